"""Peak memory of `radmatch-audit evaluate` at two run sizes: does it stay flat in the number of pairs?

    python benchmarks/bench_memory.py [--sizes 2000 20000] [--candidates 4] [--concurrency 32]
                                   [--seed 0] [--timeout-s 3600] [--json]

For each size N: N synthetic pairs (N / candidates references of 300-600 characters,
drawn from a pool of chest X-ray sentences, each with `--candidates` candidates; pair_ids
unique) are written to a temporary JSONL file; a fresh fake judge server
(`python -m radmatch_audit.testing.fake_server --port 0`, no latency, no faults) starts in its
own process; then

    python -m radmatch_audit.cli evaluate PAIRS.jsonl -o RECORDS.jsonl --no-cache --concurrency 32 -q --json

runs as a child process against it. Its peak RSS is the child's own `ru_maxrss`, read
with `os.wait4` on that pid (neither this script nor the server is counted); while it
runs, its VmRSS is sampled from /proc, to show how resident memory moves with progress.
Printed: peak RSS per size, the ratio largest / smallest (goal: at most 1.2, memory flat
in the number of pairs), and the commands to reproduce.

The fake server keeps every request body in memory (its request log), about 60 kB per
pair: some 1.3 GB for 20,000 pairs. That is the server process, not the one measured.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from radmatch_audit.testing.reports import INDICATIONS, SENTENCES

REFERENCE_CHARS = (300, 600)


def reference_text(rnd: random.Random, index: int) -> str:
    """A reference of 300-600 characters: an indication, then pool sentences."""
    head = f"INDICATION: {rnd.choice(INDICATIONS)}\nFINDINGS: "
    tail = f" Reported for study {index}."
    low, high = REFERENCE_CHARS
    target = rnd.randint(low, high - max(map(len, SENTENCES)) - 1)  # one more sentence fits
    sentences: list[str] = []
    for sentence in rnd.sample(SENTENCES, len(SENTENCES)):
        sentences.append(sentence)
        if len(head) + len(" ".join(sentences)) + len(tail) >= target:
            break
    return head + " ".join(sentences) + tail


def write_pairs(path: Path, n_pairs: int, candidates: int, seed: int) -> dict[str, float]:
    """N pairs as JSON lines; returns the reference length range and mean."""
    rnd = random.Random(seed)
    lengths = []
    with open(path, "w", encoding="utf-8") as handle:
        for r in range((n_pairs + candidates - 1) // candidates):
            reference = reference_text(rnd, r)
            lengths.append(len(reference))
            findings = reference.split("FINDINGS: ", 1)[1].split(". ")
            for c in range(candidates):
                if r * candidates + c >= n_pairs:
                    break
                kept = rnd.sample(findings, k=max(1, len(findings) * 2 // 3))
                candidate = ("FINDINGS: " + ". ".join(kept).rstrip(".") + ". "
                             + rnd.choice(SENTENCES) + f" Drafted by system {c} for study {r}.")
                handle.write(json.dumps({"pair_id": f"r{r}-c{c}", "study_id": f"s{r}",
                                         "reference": reference, "candidate": candidate}) + "\n")
    return {"min": min(lengths), "max": max(lengths), "mean": sum(lengths) / len(lengths)}


def server_command() -> list[str]:
    return [sys.executable, "-m", "radmatch_audit.testing.fake_server", "--port", "0", "--latency", "0"]


def evaluate_command(pairs: Path, records: Path, concurrency: int) -> list[str]:
    return [sys.executable, "-m", "radmatch_audit.cli", "evaluate", str(pairs), "-o", str(records),
            "--no-cache", "--concurrency", str(concurrency), "-q", "--json"]


def start_server() -> tuple[subprocess.Popen, str]:
    server = subprocess.Popen(server_command(), stdout=subprocess.PIPE, text=True)
    base_url = server.stdout.readline().strip()  # printed first, or the server exited
    if not base_url.startswith("http"):
        server.kill()
        raise SystemExit(f"the fake server did not start (exit {server.wait()})")
    return server, base_url


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def vm_rss_mb(pid: int) -> Optional[float]:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        return None
    return None


def line_count(path: Path) -> int:
    try:
        with open(path, "rb") as handle:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))
    except FileNotFoundError:
        return 0


def measure(n_pairs: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """One `radmatch-audit evaluate` run of n_pairs against a fresh fake server."""
    pairs, records = workdir / f"pairs-{n_pairs}.jsonl", workdir / f"records-{n_pairs}.jsonl"
    lengths = write_pairs(pairs, n_pairs, args.candidates, args.seed)
    server, base_url = start_server()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RADMATCH_")}
    env.update(RADMATCH_BASE_URL=base_url, RADMATCH_MODEL="stub-judge")
    stdout_path, stderr_path = workdir / f"stdout-{n_pairs}", workdir / f"stderr-{n_pairs}"
    samples: list[tuple[float, int, float]] = []  # (seconds, records written, VmRSS MB)
    try:
        with open(stdout_path, "w") as out, open(stderr_path, "w") as err:
            started = time.perf_counter()
            child = subprocess.Popen(evaluate_command(pairs, records, args.concurrency),
                                     stdout=out, stderr=err, env=env)
        deadline = started + args.timeout_s
        next_sample = started
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            now = time.perf_counter()
            if now >= deadline:
                child.send_signal(signal.SIGKILL)
                _, status, usage = os.wait4(child.pid, 0)
                break
            if now >= next_sample:
                rss = vm_rss_mb(child.pid)
                if rss is not None:
                    samples.append((now - started, line_count(records), rss))
                next_sample = now + args.sample_s
            time.sleep(0.05)
        wall_s = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    finally:
        stop(server)
    summary: dict[str, Any] = {}
    try:
        summary = json.loads(stdout_path.read_text())
    except ValueError:
        pass
    result = {
        "pairs": n_pairs,
        "exit": child.returncode,
        "timed_out": wall_s >= args.timeout_s,
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # Linux: kilobytes
        "wall_s": round(wall_s, 1),
        "pairs_per_s": round(n_pairs / wall_s, 1),
        "n_scored": summary.get("n_scored"),
        "n_failed": summary.get("n_failed"),
        "records_written": line_count(records),
        "reference_chars": {k: round(v) for k, v in lengths.items()},
        "rss_by_progress_mb": _by_progress(samples, n_pairs),
        "command": " ".join(shlex.quote(p) for p in evaluate_command(pairs, records, args.concurrency)),
    }
    if child.returncode not in (0, 1):
        result["stderr_tail"] = stderr_path.read_text()[-2000:]
    for path in (pairs, records):
        path.unlink(missing_ok=True)
    return result


def _by_progress(samples: list[tuple[float, int, float]], n_pairs: int) -> dict[str, float]:
    """VmRSS at the first sample past 10 %, 25 %, 50 %, 75 % and 95 % of the records."""
    marks: dict[str, float] = {}
    for fraction in (0.10, 0.25, 0.50, 0.75, 0.95):
        for _, written, rss in samples:
            if written >= fraction * n_pairs:
                marks[f"{int(fraction * 100)}%"] = round(rss, 1)
                break
    return marks


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 20000])
    parser.add_argument("--candidates", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sample-s", type=float, default=0.5, help="seconds between VmRSS samples")
    parser.add_argument("--timeout-s", type=float, default=3600, help="limit per run; killed past it")
    parser.add_argument("--goal", type=float, default=1.2, help="largest / smallest peak RSS allowed")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    results = []
    with tempfile.TemporaryDirectory(prefix="radmatch-bench-memory-") as tmp:
        for n_pairs in sorted(args.sizes):
            result = measure(n_pairs, args, Path(tmp))
            results.append(result)
            if not args.json:
                print(f"{n_pairs:>7} pairs: peak RSS {result['peak_rss_mb']:.1f} MB, "
                      f"{result['wall_s']:.1f} s ({result['pairs_per_s']:.1f} pairs/s), "
                      f"exit {result['exit']}, scored {result['n_scored']}, failed {result['n_failed']}; "
                      f"VmRSS by progress {result['rss_by_progress_mb']}", flush=True)
    smallest, largest = results[0], results[-1]
    ratio = largest["peak_rss_mb"] / smallest["peak_rss_mb"]
    ok = ratio <= args.goal and all(r["exit"] == 0 and not r["timed_out"] for r in results)
    reproduce = "python benchmarks/bench_memory.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    if args.json:
        print(json.dumps({"results": results, "ratio": round(ratio, 3), "goal": args.goal,
                          "ok": ok, "reproduce": reproduce.strip()}, indent=2))
    else:
        print(f"peak RSS ratio {largest['pairs']} / {smallest['pairs']} pairs: {ratio:.3f} "
              f"(goal <= {args.goal}): {'ok' if ok else 'NOT MET'}")
        print(f"reproduce: {reproduce.strip()}")
        print("each run: server  " + " ".join(server_command()))
        print("          client  " + smallest["command"].replace(f"-{smallest['pairs']}.", "-N."))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
