"""End to end with real models: the embedded CPU judge, and a real vLLM server on loopback.

SmolLM2-135M's clinical judgement is poor; these tests check plumbing that only a real
model exercises: grammar-constrained decoding, token budgets, the context budget,
records that validate and score, and recompute reproducing the scores.
"""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from radmatch_audit import Evaluator, PairInput, read_records
from radmatch_audit.judges.config import SMALL_MODEL_MAX_TOKENS
from radmatch_audit.core.schemas import SMALL_MODEL_LIMITS, answer_models
from radmatch_audit.judges.openai_compat import OpenAICompatibleJudge
from radmatch_audit.stages import build_messages

pytestmark = pytest.mark.slow

RADPREF = Path(__file__).resolve().parents[1] / "data" / "radpref"  # shipped: see its README.md


def radpref_rows():
    with open(RADPREF / "crimson_sample_data.csv", newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory):
    """Two candidates against one real reference (cases 2 and 4 of the CRIMSON sample)."""
    rows = {row["id"]: row for row in radpref_rows()}
    reference = rows["2"]
    path = tmp_path_factory.mktemp("pairs") / "pairs.jsonl"
    with open(path, "w", encoding="utf-8") as out:
        for pair_id, candidate in (("case2", reference["Predicted"]), ("case2-vs-4", rows["4"]["Predicted"])):
            out.write(json.dumps({
                "pair_id": pair_id, "study_id": "crimson-2", "reference": reference["Findings"],
                "candidate": candidate, "indication": reference["indication"] or None,
            }) + "\n")
    return path


def run_cli(*args, env_extra=None, timeout=1800):
    import os

    env = {**os.environ, **(env_extra or {})}
    env.pop("RADMATCH_BASE_URL", None)
    return subprocess.run([sys.executable, "-m", "radmatch_audit.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def test_embedded_cpu_judge_end_to_end_and_recompute(pairs_file, tmp_path):
    cache = tmp_path / "cache"
    records_path = tmp_path / "records.jsonl"
    proc = run_cli("evaluate", str(pairs_file), "-o", str(records_path), "--cache-dir", str(cache),
                   "--json", "-q")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "only exercises the pipeline" in proc.stderr  # said plainly to the user
    summary = json.loads(proc.stdout)
    assert (summary["n_pairs"], summary["n_scored"], summary["n_failed"]) == (2, 2, 0)

    records = list(read_records(records_path))
    assert [r.pair_id for r in sorted(records, key=lambda r: r.pair_id)] == ["case2", "case2-vs-4"]
    for record in records:
        assert record.error is None and record.scores is not None
        assert record.judge.backend == "transformers"
        assert record.stages.indication  # the given indication reached the prompts
        assert record.stages.reference_findings and record.stages.candidate_findings
        assert record.usage.completion_tokens > 0
    # the shared reference was extracted once: one pair paid for it, the other did not;
    # a pair with a unit that is not correct pays one more call, its error adjudication
    adjudicated = [bool(r.stages.adjudication.units) for r in records]
    assert sorted(r.usage.judge_calls - a for r, a in zip(records, adjudicated)) in (
        [3, 4], [2, 3], [3, 3], [2, 4])
    for record, asked in zip(records, adjudicated):
        assert record.scores.adjudication == "current", record.stages.adjudication.error
        assert record.scores.significant_errors is not None
        assert asked or record.scores.significant_errors == 0

    out = tmp_path / "recomputed.jsonl"
    proc = run_cli("recompute", str(records_path), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    again = {r.pair_id: r for r in read_records(out)}
    for record in records:
        assert again[record.pair_id].scores == record.scores
        assert again[record.pair_id].repairs == record.repairs

    # a rerun over the same pairs costs no judge call
    rerun = tmp_path / "rerun.jsonl"
    proc = run_cli("evaluate", str(pairs_file), "-o", str(rerun), "--cache-dir", str(cache), "-q")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert all(r.usage.judge_calls == 0 for r in read_records(rerun))


def test_vllm_server_enforces_the_schema_and_the_pipeline_scores(vllm_server, pairs_file, tmp_path):
    base_url, api_key, model = vllm_server
    judge = OpenAICompatibleJudge(base_url=base_url, model=model, api_key=api_key, context_window=8192,
                                  timeout_s=600)
    pairs = [PairInput(**json.loads(line)) for line in pairs_file.read_text().splitlines()]
    with Evaluator(judge, cache_dir=None, limits=SMALL_MODEL_LIMITS, max_tokens=SMALL_MODEL_MAX_TOKENS,
                   concurrency=2) as evaluator:
        evaluator.check()  # the pre-flight against a real server: it serves this model
        # ... and lists its tokenizer's special tokens, SmolLM2's own beyond the hand list
        assert {"<|im_start|>", "<file_sep>", "<jupyter_code>"} <= set(judge.control_tokens)
        records = evaluator.evaluate(pairs)
        again = evaluator.evaluate(pairs)  # reused: answers from its memo, the same scores
    for record in records:
        assert record.error is None, record.error
        assert record.scores is not None and record.judge.backend == "vllm"
        assert record.usage.prompt_tokens > 1000  # usage read off the server's answers
    assert [r.scores for r in again] == [r.scores for r in records]

    # the control: the same extraction prompt without the constraint is not valid JSON for
    # the schema, so valid answers above came from the server's grammar, not from luck
    import openai

    schema = answer_models(SMALL_MODEL_LIMITS).extract
    messages = build_messages("extract", "chest_xray", {"report": pairs[0].reference, "indication": None})
    client = openai.OpenAI(base_url=base_url, api_key=api_key)
    free = client.chat.completions.create(model=model, messages=messages, max_tokens=300, temperature=0)
    text = free.choices[0].message.content
    with pytest.raises(Exception):
        schema.model_validate_json(text)


def test_an_abandoned_generation_stops_at_once(local_judge):
    """A cancelled call (Ctrl-C, a closed evaluator) must not keep generating behind our back."""
    import asyncio
    import time

    schema = answer_models(SMALL_MODEL_LIMITS).extract
    messages = build_messages("extract", "chest_xray", {"report": "Small left effusion. " * 20, "indication": None})
    local_judge._grammar(schema)  # compile the grammar ...
    local_judge._prefilled(messages)  # ... and prefill the prefix outside the timed part: neither can stop midway

    async def start_then_cancel():
        task = asyncio.ensure_future(local_judge.generate(messages, schema, max_tokens=1700))
        await asyncio.sleep(4)  # generating by now
        cancelled_at = time.perf_counter()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task  # returns once the worker thread has stopped
        return time.perf_counter() - cancelled_at

    took = asyncio.run(start_then_cancel())
    assert took < 15, f"the generation went on for {took:.1f} s after it was abandoned"
