"""Benchmark of the judge pipeline: throughput, calls and tokens per pair, client CPU.

    python benchmarks/bench_pipeline.py [--references 64] [--candidates 4] [--latency 0.2]
                                     [--capacity 64] [--concurrency 64] [--json]
    python benchmarks/bench_pipeline.py --base-url http://127.0.0.1:8000/v1 --model NAME

Simulated (default): the fake judge server (radmatch_audit.testing.fake_server) runs in a
subprocess, so that time.process_time() here is the client's CPU alone. Every call
takes `--latency` seconds and at most `--capacity` calls are served at once, like a
GPU batch. The workload is R references x K candidates (synthetic chest X-ray
sentences; each reference has an indication line, read by code, each candidate is
distinct), run
through `Evaluator.run`. Reported:

* pairs/s, and efficiency = ideal makespan / wall time. The ideal makespan schedules
  the calls the run actually made (per pair: extract reference and extract candidate
  -> match -> grade; a call shared by several pairs counted once) on
  `capacity` slots with the simulated latency, without client overhead
  (radmatch_audit.testing.makespan.ideal_makespan).
* judge calls per pair, cold and on a rerun over the same answer cache (goal: 0).
* prompt tokens per pair, as the static prefix (every message but the last) and the
  pair's own part (the last message), counted with the embedded SmolLM2 tokenizer and
  its chat template when it is installed, else as characters / 4.
* client CPU ms per pair and per judge call, in steady state: the once-per-run setup
  (importing Outlines, each stage's request field) is done before the clock and
  reported apart. The client runs as `radmatch-audit evaluate` does: the objects alive after
  its setup are left out of the garbage collector's later passes
  (`radmatch_audit.run.pipeline.freeze_setup_heap`).

Answer tokens (--answer-tokens [--records FILE] [--answers FILE]): the decode cost of
each stage's answer, counted without a judge: completion tokens per answer and per pair
(two extractions, one matching, one grading; an error adjudication, made only for a pair
with a unit that is not correct, is counted per answer in the records and the answer key)
as the judge wrote answers before 2026-12-02
(every field, `", "` and `": "` between tokens) and as the exemplars now teach it
(stages.compact_answer: defaults left out, no whitespace), on the exemplars' answers
and on the answers stored in a records file. Under grammar-constrained decoding every
token of an answer, structure included, is a decode step.

Real server (--base-url): pairs/s at 1, 8, 32 and 64 judge calls in flight (a distinct
workload each, answer cache off), prompt and completion tokens per pair, and the
prefix-cache hit rate from the server's /metrics counters
(vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total, or the older
vllm:gpu_prefix_cache_* names) read before and after each level. The cost of thinking
is one level run with `--thinking on` and again with `--thinking off`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any, Callable, Optional

from radmatch_audit import Evaluator, JudgeConfig, PairInput
from radmatch_audit.run.pipeline import freeze_setup_heap
from radmatch_audit.testing.makespan import ideal_makespan
from radmatch_audit.testing.reports import INDICATIONS, SENTENCES

TITLES = {"extract": "ExtractionAnswer", "match": "MatchingAnswer", "grade": "GradingAnswer"}
PREFIX_METRICS = ("vllm:prefix_cache", "vllm:gpu_prefix_cache")


def workload(n_refs: int, n_cands: int, first: int = 0) -> list[PairInput]:
    """R references x K candidates; every candidate distinct and sharing findings with its
    reference, so each pair needs its own extraction, matching and grading."""
    pairs = []
    for r in range(first, first + n_refs):
        reference = (f"INDICATION: {INDICATIONS[r % len(INDICATIONS)]}\nFINDINGS: "
                     + " ".join(SENTENCES[(r + k) % len(SENTENCES)] for k in range(5))
                     + f" Reported for study {r}.")
        for c in range(n_cands):
            shared = " ".join(SENTENCES[(r + c + k) % len(SENTENCES)] for k in range(3))
            candidate = f"FINDINGS: {shared} Drafted by system {c} for study {r}."
            pairs.append(PairInput(reference=reference, candidate=candidate,
                                   pair_id=f"r{r}-c{c}", study_id=f"s{r}"))
    return pairs


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read()


def _root(base_url: str) -> str:
    return re.sub(r"/v1/?$", "", base_url.rstrip("/"))


def prepare(evaluator: Evaluator) -> None:
    """The once-per-run work, outside the clock: importing Outlines and its request field
    for each stage's schema (grading has one schema per row count; 1-8 rows cover most)."""
    constraint = getattr(evaluator.judge, "constraint", None)
    if constraint is not None:
        stages = evaluator.stages
        for stage in ("extract", "match"):
            constraint(stages[stage].grammar())
        for rows in range(1, 9):
            constraint(stages["grade"].grammar(rows))


def time_round_trips(judge: Any) -> list[float]:
    """Seconds each HTTP call of `judge` took as the client saw it (filled as calls end)."""
    took: list[float] = []
    post = judge._post

    async def timed(path: str, payload: bytes, *args: Any, **kwargs: Any) -> bytes:
        started = time.perf_counter()
        try:
            return await post(path, payload, *args, **kwargs)
        finally:
            took.append(time.perf_counter() - started)

    judge._post = timed
    return took


def run_pairs(config: JudgeConfig, pairs: list[PairInput]) -> dict[str, Any]:
    """One run on a fresh evaluator: records, stats, wall and client CPU seconds."""
    records: list[Any] = []
    with Evaluator.from_config(config) as evaluator:  # the judge is built before the clock
        round_trips = time_round_trips(evaluator.judge) if hasattr(evaluator.judge, "_post") else []
        started = time.process_time()
        prepare(evaluator)
        setup_cpu = time.process_time() - started
        freeze_setup_heap()  # as `radmatch-audit evaluate` does once its judge is up
        cpu, wall = time.process_time(), time.perf_counter()
        stats = evaluator.run(pairs, on_record=records.append)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"records": records, "wall_s": wall, "cpu_s": cpu, "setup_cpu_s": setup_cpu,
            "round_trips_s": round_trips,
            "pairs": stats.pairs,
            "failed": stats.failed, "judge_calls": stats.judge_calls,
            "cached_calls": stats.cached_calls}


# ---------------------------------------------------------------- the simulated run


def start_fake_server(args: argparse.Namespace) -> tuple[subprocess.Popen, str]:
    command = [sys.executable, "-m", "radmatch_audit.testing.fake_server", "--port", "0",
               "--latency", str(args.latency), "--capacity", str(args.capacity),
               "--fault-rate", str(args.fault_rate),
               "--always-fail-rate", str(args.always_fail_rate)]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    base_url = server.stdout.readline().strip()  # the server prints it first, or exits
    if not base_url.startswith("http"):
        server.kill()
        raise RuntimeError("the fake judge server did not start")
    return server, base_url


def chat_log(base_url: str) -> list[dict[str, Any]]:
    """The chat requests the fake server has received, as it recorded them."""
    log = json.loads(_get(_root(base_url) + "/fake/requests"))
    return [r for r in log if r["path"].endswith("/chat/completions")]


def _id(finding: Any) -> tuple[str, str]:
    """(id, text) of a finding, as a request shows it (a dict) or a record (an object)."""
    if isinstance(finding, dict):
        return finding["finding_id"], finding["text"]
    return finding.id, finding.text


def request_signature(title: str, body: dict[str, Any]) -> Optional[tuple]:
    """What identifies a judge call, read off the request the server received."""
    try:
        user = json.loads(body["messages"][-1]["content"])
        if title == TITLES["extract"]:
            return ("extract", user["report"], user.get("indication"))
        if title == TITLES["match"]:
            return ("match", user.get("indication"), tuple(map(_id, user["gt_findings"])),
                    tuple(map(_id, user["pred_findings"])))
        if title == TITLES["grade"]:
            rows = tuple((_id(p["pred_finding"]), _id(p["gt_finding"])) for p in user["pairs"])
            return ("grade", user.get("indication"), rows)
    except (KeyError, TypeError, ValueError, AttributeError):
        pass
    return None


def record_signatures(record: Any) -> list[tuple]:
    """The calls a pair needs, in stage order, identified as `request_signature` does."""
    stages, ref, cand = record.stages, record.reference, record.candidate
    ind = stages.indication
    calls: list[tuple] = [("extract", ref, ind), ("extract", cand, ind)]
    gt, pred = stages.reference_findings or [], stages.candidate_findings or []
    calls.append(("match", ind, tuple(map(_id, gt)), tuple(map(_id, pred))))
    if stages.grading is not None and stages.grading.pairs:
        text = {f.id: f.text for f in gt + pred}
        calls.append(("grade", ind, tuple(((p, text[p]), (g, text[g]))
                                          for p, g in stages.grading.pairs)))
    return calls


Graph = dict[tuple, tuple[float, list]]


def call_graph(records: list[Any], answered: list[dict[str, Any]],
               latency: Callable[[str], float]) -> tuple[Graph, list[str]]:
    """The calls the run made, as {call: (seconds, calls it needs)}, and any mismatch.

    A call is known by its input (`request_signature`), so one call answering several
    pairs (the reference's extraction, a repeated grading) counts once;
    it waits for the calls of the first pair, in input order, that needed it. Only calls
    the server answered are in the graph; the stages a pair skipped are left out.
    """
    made = {request_signature(r["stage"], r["body"]) for r in answered}
    calls: Graph = {}
    for record in records:
        signatures = record_signatures(record)
        extracts = [c for c in signatures[:2] if c in made]
        for call in extracts:
            calls.setdefault(call, (latency(TITLES["extract"]), []))
        needs = extracts
        for call in signatures[2:]:  # match, then grade
            if call in made:
                calls.setdefault(call, (latency(TITLES[call[0]]), needs))
                needs = [call]
    problems = []
    for stage in TITLES:
        in_log = {c for c in made if c and c[0] == stage}
        in_graph = {c for c in calls if c[0] == stage}
        if in_log != in_graph:
            problems.append(f"{stage}: {len(in_log)} distinct calls answered, "
                            f"{len(in_log & in_graph)} of them attributed to a pair")
    return calls, problems


def token_counter() -> tuple[str, Callable[[list[dict[str, Any]]], int]]:
    """Count a prompt's tokens with SmolLM2's tokenizer and chat template, else chars / 4."""
    try:
        from transformers import AutoTokenizer

        from radmatch_audit.judges.smollm import ensure_hf_dir

        tokenizer = AutoTokenizer.from_pretrained(str(ensure_hf_dir()))

        def count(messages: list[dict[str, Any]]) -> int:
            text = tokenizer.apply_chat_template(messages, tokenize=False)
            return len(tokenizer(text, add_special_tokens=False)["input_ids"])

        count([{"role": "user", "content": "probe"}])
        return "SmolLM2 tokenizer", count
    except Exception as exc:  # noqa: BLE001 - any failure falls back to the estimate
        print(f"(no tokenizer: {type(exc).__name__}; tokens are characters / 4)", file=sys.stderr)
        return "characters / 4", lambda messages: sum(len(m["content"]) for m in messages) // 4


def prompt_tokens(answered: list[dict[str, Any]]) -> tuple[str, int, int]:
    """(how counted, static prefix tokens, pair tokens) summed over the answered calls."""
    how, count = token_counter()
    memo: dict[str, int] = {}
    prefix_total = pair_total = 0
    for request in answered:
        messages = request["body"]["messages"]
        key = json.dumps(messages[:-1])
        if key not in memo:
            memo[key] = count(messages[:-1]) if len(messages) > 1 else 0
        prefix_total += memo[key]
        pair_total += count(messages) - memo[key]
    return how, prefix_total, pair_total


def simulated(args: argparse.Namespace) -> dict[str, Any]:
    pairs = workload(args.references, args.candidates)
    server, base_url = start_fake_server(args)
    try:
        with tempfile.TemporaryDirectory() as cache_dir:
            config = JudgeConfig(base_url=base_url, model="stub-judge", cache=True,
                                 cache_dir=cache_dir, concurrency=args.concurrency, retries=3,
                                 timeout_s=args.timeout)
            server_cpu = process_cpu_s(server.pid)
            cold = run_pairs(config, pairs)
            log = chat_log(base_url)
            server_cpu = process_cpu_s(server.pid) - server_cpu if server_cpu is not None else None
            rerun = run_pairs(config, [PairInput(**vars(p)) for p in pairs])
            rerun_requests = len(chat_log(base_url)) - len(log)
    finally:
        server.terminate()
        server.wait(timeout=10)

    answered = [r for r in log if r.get("status") == 200 and r.get("fault") in (None, "ok")]
    order = {p.pair_id: i for i, p in enumerate(pairs)}
    records = sorted(cold["records"], key=lambda record: order[record.pair_id])
    calls, problems = call_graph(records, answered, lambda title: args.latency)
    ideal = ideal_makespan(calls, args.capacity)
    how, prefix, own = prompt_tokens(answered)
    n = len(pairs)
    return {
        "mode": "simulated", "references": args.references, "candidates": args.candidates,
        "pairs": n, "latency_s": args.latency, "capacity": args.capacity,
        "concurrency": args.concurrency, "failed": cold["failed"],
        "wall_s": round(cold["wall_s"], 3), "pairs_per_s": round(n / cold["wall_s"], 2),
        "ideal_makespan_s": round(ideal, 3), "efficiency": round(ideal / cold["wall_s"], 3),
        "calls_in_graph": len(calls), "graph_problems": problems,
        "judge_calls_per_pair_cold": round(cold["judge_calls"] / n, 3),
        "server_requests_cold": len(log),
        "judge_calls_rerun": rerun["judge_calls"], "server_requests_rerun": rerun_requests,
        "failed_rerun": rerun["failed"],
        "tokens_counted_by": how,
        "prompt_tokens_per_pair": {"static_prefix": round(prefix / n, 1), "pair": round(own / n, 1),
                                   "total": round((prefix + own) / n, 1)},
        "client_cpu_ms_per_pair": round(1000 * cold["cpu_s"] / n, 3),
        "client_cpu_ms_per_call": round(1000 * cold["cpu_s"] / max(cold["judge_calls"], 1), 3),
        "client_cpu_ms_per_pair_rerun": round(1000 * rerun["cpu_s"] / n, 3),
        "client_setup_cpu_s": round(cold["setup_cpu_s"], 3),
        # the fake server shares the machine's cores: when client and server CPU together
        # approach the cores there are, the run is CPU-bound, not limited by its schedule
        "server_cpu_ms_per_call": (round(1000 * server_cpu / max(len(log), 1), 3)
                                   if server_cpu is not None else None),
        "cpu_cores_busy": (round((cold["cpu_s"] + server_cpu) / cold["wall_s"], 2)
                           if server_cpu is not None else None),
        # a call's round trip as the client timed it, less the server's time on it (arrival
        # to answer sent): the network, both ends' sockets and the client's event loop
        "transport_ms_per_call": _transport_ms(cold["round_trips_s"], answered),
    }


def _transport_ms(round_trips: list[float], answered: list[dict[str, Any]]) -> Optional[float]:
    served = [r["finished"] - r["arrived"] for r in answered if r.get("finished")]
    if not round_trips or not served:
        return None
    return round(1000 * (statistics.median(round_trips) - statistics.median(served)), 2)


def process_cpu_s(pid: int) -> Optional[float]:
    """User plus system CPU seconds of a process (Linux /proc), or None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


# ---------------------------------------------------------------- a real server


THINKING = {"on": True, "off": False, "server": None}


def prefix_counters(base_url: str) -> tuple[float, float]:
    """(queries, hits) summed over the prefix-cache counters of the server's /metrics."""
    totals = {"queries": 0.0, "hits": 0.0}
    for line in _get(_root(base_url) + "/metrics").decode().splitlines():
        match = re.match(r"^([\w:]+?)_(queries|hits)_total(?:\{[^}]*\})?\s+(\S+)", line)
        if match and match.group(1) in PREFIX_METRICS:
            totals[match.group(2)] += float(match.group(3))
    return totals["queries"], totals["hits"]


def real_server(args: argparse.Namespace) -> dict[str, Any]:
    levels, first = [], getattr(args, "first_reference", 0)
    thinking = getattr(args, "thinking", "server")  # bench_vllm_cpu.py passes no --thinking
    before_all = prefix_counters(args.base_url)
    for in_flight in args.levels:
        n_pairs = getattr(args, "pairs", None) or max(args.min_pairs, 2 * in_flight)
        n_refs = math.ceil(n_pairs / args.candidates)
        pairs = workload(n_refs, args.candidates, first)
        first += n_refs  # a distinct workload each level: only the static prefix is shared
        config = JudgeConfig(base_url=args.base_url, model=args.model, concurrency=in_flight,
                             cache=False, retries=3, timeout_s=args.timeout,
                             allow_remote_endpoint=args.allow_remote, decoding=args.decoding,
                             context_window=args.context_window,
                             thinking=THINKING[thinking])
        queries, hits = prefix_counters(args.base_url)
        run = run_pairs(config, pairs)
        queries, hits = (a - b for a, b in zip(prefix_counters(args.base_url), (queries, hits)))
        levels.append({
            "in_flight": in_flight, "pairs": len(pairs), "failed": run["failed"],
            "wall_s": round(run["wall_s"], 2), "pairs_per_s": round(len(pairs) / run["wall_s"], 3),
            "judge_calls_per_pair": round(run["judge_calls"] / len(pairs), 3),
            "prefix_cache_hit_rate": round(hits / queries, 3) if queries else None,
            "client_cpu_ms_per_pair": round(1000 * run["cpu_s"] / len(pairs), 2),
            # what thinking costs shows here: run a level with --thinking on, then off
            "prompt_tokens_per_pair": round(sum(r.usage.prompt_tokens for r in run["records"]) / len(pairs), 1),
            "completion_tokens_per_pair": round(
                sum(r.usage.completion_tokens for r in run["records"]) / len(pairs), 1),
        })
    queries, hits = (a - b for a, b in zip(prefix_counters(args.base_url), before_all))
    return {"mode": "server", "base_url": args.base_url, "model": args.model, "levels": levels,
            "thinking": thinking,
            "references": first - getattr(args, "first_reference", 0),
            "prefix_cache_hit_rate": round(hits / queries, 3) if queries else None}


def _answers_of_record(record: Any) -> dict[str, list[dict[str, Any]]]:
    """A stored record's stage answers, as the judge gave them (ids the pipeline added left out)."""
    stages, answers = record.stages, {"extract": [], "match": [], "grade": [], "adjudicate": []}
    for findings in (stages.reference_findings, stages.candidate_findings):
        if findings:
            answers["extract"].append(
                {"findings": [f.model_dump(mode="json", exclude={"id"}) for f in findings]})
    if stages.matching is not None and stages.matching.matches:
        answers["match"].append(stages.matching.model_dump(mode="json"))
    if stages.grading is not None and stages.grading.pairs:
        answers["grade"].append(
            {k: v for k, v in stages.grading.model_dump(mode="json").items() if k != "pairs"})
    adjudication = stages.adjudication
    if adjudication is not None and adjudication.units and adjudication.answer is not None:
        answers["adjudicate"].append(adjudication.answer.model_dump(mode="json"))
    return answers


def _authored_answers(path: str) -> dict[str, list[dict[str, Any]]]:
    """Answers of a key such as redteam/correct_answers.jsonl ({pair_id, stage, answer} lines,
    stage extract_reference, extract_candidate, match, grade or adjudicate)."""
    answers: dict[str, list[dict[str, Any]]] = {"extract": [], "match": [], "grade": [], "adjudicate": []}
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                entry = json.loads(line)
                answers[entry["stage"].split("_")[0]].append(entry["answer"])
    return answers


def answer_tokens(records_path: Optional[str], answers_path: Optional[str] = None) -> dict[str, Any]:
    """Completion tokens per answer and per pair, before and after the compact rendering."""
    from radmatch_audit.stages import MODALITIES, compact_answer, load_exemplars
    from radmatch_audit.files.record_io import read_records

    counted_by, count = token_counter()

    def tokens(text: str) -> int:
        return count([{"role": "assistant", "content": text}]) - count([{"role": "assistant", "content": ""}])

    def figure(answers: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for stage, items in answers.items():
            if not items:
                continue
            full = [tokens(json.dumps(a, ensure_ascii=False, separators=(", ", ": "))) for a in items]
            compact = [tokens(json.dumps(compact_answer(stage, a), ensure_ascii=False, separators=(",", ":")))
                       for a in items]
            out[stage] = {"answers": len(items), "before": round(statistics.mean(full), 1),
                          "after": round(statistics.mean(compact), 1)}
        if {"extract", "match", "grade"} <= set(out):
            pair = {k: round(2 * out["extract"][k] + out["match"][k] + out["grade"][k], 1)
                    for k in ("before", "after")}
            pair["cut"] = round(1 - pair["after"] / pair["before"], 3)
            out["pair"] = pair
        return out

    exemplars = {stage: [ex["output"] for m in MODALITIES for ex in load_exemplars(m, stage)]
                 for stage in ("extract", "match", "grade")}
    result = {"mode": "answer_tokens", "tokens_counted_by": counted_by,
              "exemplars": figure(exemplars)}
    if records_path:
        recorded: dict[str, list[dict[str, Any]]] = {"extract": [], "match": [], "grade": [], "adjudicate": []}
        for record in read_records(records_path):
            for stage, items in _answers_of_record(record).items():
                recorded[stage].extend(items)
        result["records"] = figure(recorded)
    if answers_path:
        result["authored"] = figure(_authored_answers(answers_path))
    return result


def show(result: dict[str, Any]) -> None:
    if result["mode"] == "answer_tokens":
        print(f"completion tokens per answer ({result['tokens_counted_by']}), before -> after")
        for source in ("exemplars", "records", "authored"):
            for stage, f in result.get(source, {}).items():
                if stage == "pair":
                    print(f"  {source:9} per pair: {f['before']} -> {f['after']} ({f['cut']:.0%} fewer)")
                else:
                    print(f"  {source:9} {stage:10} ({f['answers']:>3} answers): {f['before']} -> {f['after']}")
        return
    if result["mode"] == "server":
        print(f"server {result['base_url']} model {result['model']} thinking {result['thinking']}")
        for level in result["levels"]:
            print(f"  {level['in_flight']:>3} calls in flight: {level['pairs_per_s']:8.3f} pairs/s "
                  f"({level['pairs']} pairs, {level['failed']} failed, "
                  f"{level['judge_calls_per_pair']} calls/pair, "
                  f"{level['completion_tokens_per_pair']} completion tokens/pair, "
                  f"prefix-cache hit rate {level['prefix_cache_hit_rate']})")
        print(f"prefix-cache hit rate over the run: {result['prefix_cache_hit_rate']}")
        return
    r, tokens = result, result["prompt_tokens_per_pair"]
    print(f"workload: {r['references']} references x {r['candidates']} candidates = "
          f"{r['pairs']} pairs; latency {r['latency_s']} s a call, capacity {r['capacity']}, "
          f"concurrency {r['concurrency']}")
    print(f"throughput: {r['pairs_per_s']} pairs/s ({r['wall_s']} s, {r['failed']} failed)")
    print(f"efficiency: {r['efficiency']:.1%} (ideal makespan {r['ideal_makespan_s']} s "
          f"for {r['calls_in_graph']} calls on {r['capacity']} slots)")
    for problem in r["graph_problems"]:
        print(f"  call graph: {problem}")
    print(f"judge calls per pair: {r['judge_calls_per_pair_cold']} cold "
          f"({r['server_requests_cold']} requests), {r['judge_calls_rerun']} on a rerun "
          f"({r['server_requests_rerun']} requests, {r['failed_rerun']} failed)")
    print(f"prompt tokens per pair ({r['tokens_counted_by']}): {tokens['total']} = "
          f"{tokens['static_prefix']} static prefix + {tokens['pair']} pair")
    print(f"client CPU: {r['client_cpu_ms_per_pair']} ms a pair, {r['client_cpu_ms_per_call']} ms "
          f"a judge call cold; {r['client_cpu_ms_per_pair_rerun']} ms a pair on the rerun; "
          f"setup {r['client_setup_cpu_s']} s once")
    if r.get("transport_ms_per_call") is not None:
        print(f"transport: {r['transport_ms_per_call']} ms a call (median round trip at the "
              f"client less median time at the server)")
    if r.get("server_cpu_ms_per_call") is not None:
        print(f"fake server CPU: {r['server_cpu_ms_per_call']} ms a call; client and server "
              f"together kept {r['cpu_cores_busy']} cores busy (this machine has {os.cpu_count()})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--references", type=int, default=64)
    parser.add_argument("--candidates", type=int, default=4)
    parser.add_argument("--latency", type=float, default=0.2, help="simulated seconds a call")
    parser.add_argument("--capacity", type=int, default=64, help="simulated calls served at once")
    parser.add_argument("--concurrency", type=int, default=64, help="judge calls in flight (simulated)")
    parser.add_argument("--fault-rate", type=float, default=0.0, help="simulated transient faults")
    parser.add_argument("--always-fail-rate", type=float, default=0.0)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds a judge call")
    parser.add_argument("--base-url", help="benchmark this OpenAI-compatible server instead")
    parser.add_argument("--model", default="radmatch-judge", help="the served model (--base-url)")
    parser.add_argument("--levels", type=lambda s: [int(x) for x in s.split(",")],
                        default=[1, 8, 32, 64], help="judge calls in flight, one level each (--base-url)")
    parser.add_argument("--min-pairs", type=int, default=8, help="pairs per level (at least 2x it)")
    parser.add_argument("--pairs", type=int, help="exactly this many pairs per level")
    parser.add_argument("--allow-remote", action="store_true", help="a server not on this machine")
    parser.add_argument("--decoding", choices=["auto", "server", "small_model"], default="auto",
                        help="small_model for a small served model such as SmolLM2 on vLLM CPU")
    parser.add_argument("--context-window", type=int, help="the served model's context (--base-url)")
    parser.add_argument("--thinking", choices=sorted(THINKING), default="server",
                        help="a reasoning judge's thinking (--base-url): on, off, or the "
                             "server's default; compare completion tokens per pair")
    parser.add_argument("--answer-tokens", action="store_true",
                        help="count the completion tokens of each stage's answers, before and "
                             "after the compact rendering, on the exemplars (and --records)")
    parser.add_argument("--records", help="a records file whose stored answers --answer-tokens counts")
    parser.add_argument("--answers", help="an answer key whose answers --answer-tokens counts "
                                          "(redteam/correct_answers.jsonl: a correct judge's answers)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    if args.answer_tokens:
        result = answer_tokens(args.records, args.answers)
        print(json.dumps(result, indent=2)) if args.json else show(result)
        return 0
    result = real_server(args) if args.base_url else simulated(args)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        show(result)
    if result["mode"] == "simulated":
        ok = not result["failed"] and result["judge_calls_rerun"] == 0
        return 0 if ok or args.fault_rate or args.always_fail_rate else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
