"""The synthetic workloads are what their docstring says, and the scoring and pipeline
benchmarks report what their docstrings promise (run as programs: tests import no script)."""

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from radmatch_audit.read.recompute import score_record
from radmatch_audit.testing.fake_server import StubServer
from radmatch_audit.testing.synthetic import realistic_record, stress_record

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_scoring.py"

# RadPref's error rates, pooled over its three radiologists (`benchmarks/radpref_rates.py`
# derives them from the annotations), written out here rather than imported from the
# generator: a generator drifting from them fails this test.
RADPREF_MISSED, RADPREF_FALSE, RADPREF_ATTRIBUTE_ERROR = 0.58, 0.47, 0.17


def _rates(make, n=600):
    """Missed, false and wrong rates as scoring sees the records, not as they were drawn."""
    rnd = random.Random(3)
    reference = candidate = missed = false = matched = wrong = 0
    for i in range(n):
        rec = score_record(make(rnd, i))
        reference += len(rec.stages.reference_findings)
        candidate += len(rec.stages.candidate_findings)
        sizes = (len(rec.stages.reference_findings), len(rec.stages.candidate_findings))
        assert 8 <= min(sizes) and max(sizes) <= 15, sizes
        for unit in rec.scores.units:
            missed += unit.kind == "mis"
            false += unit.kind == "spu"
            if unit.kind == "matched" and len(unit.rows) == 1:
                matched += 1
                wrong += bool(unit.errors)
    return missed / reference, false / candidate, wrong / matched


def test_realistic_profile_has_the_radpref_error_rates():
    missed, false, wrong = _rates(realistic_record)
    assert missed == pytest.approx(RADPREF_MISSED, abs=0.05)
    assert false == pytest.approx(RADPREF_FALSE, abs=0.06)  # clipping at 8 findings adds a few
    assert wrong == pytest.approx(RADPREF_ATTRIBUTE_ERROR, abs=0.04)


def test_stress_profile_is_a_worst_case_for_scoring():
    missed, false, wrong = _rates(stress_record)
    assert missed < 0.3 and false < 0.3  # most findings matched...
    assert wrong > 0.8  # ...and nearly every matched unit wrong


def test_benchmark_reports_the_median_run_beside_a_json_round_trip():
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--pairs", "40", "--repeats", "3", "--profile", "realistic"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    rates = re.search(r"summary\): ([\d,]+) pairs/s, median of 3 runs \(([\d,]+)-([\d,]+)\)", out)
    assert rates, out
    median, slowest, fastest = (int(x.replace(",", "")) for x in rates.groups())
    assert 0 < slowest <= median <= fastest
    assert re.search(r"stdlib JSON round trip of the same lines: [\d,]+ lines/s; recompute "
                     r"takes [\d.]+x its time", out), out
    phases = re.findall(r"^ {4}(\w+) +\d+ us/pair", out, flags=re.MULTILINE)
    assert phases == ["parse", "score", "serialise", "summary"]
    assert re.search(r"^goal \(realistic profile, median run\) 2,000 pairs/s: (met|NOT met)$",
                     out, flags=re.MULTILINE), out


PIPELINE_BENCH = BENCH.with_name("bench_pipeline.py")


def test_pipeline_benchmark_shares_calls_and_reruns_from_the_cache():
    """Two references x 4 candidates against the fake server: each reference's extraction
    is asked once for its 4 candidates and its indication is read by code (4.25 calls a
    pair with the adjudication, not 5), a rerun over the same answer cache asks nothing,
    and the timing figures are filled in."""
    proc = subprocess.run(
        [sys.executable, str(PIPELINE_BENCH), "--references", "2", "--candidates", "4",
         "--latency", "0.05", "--concurrency", "8", "--capacity", "8", "--json"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["pairs"], result["failed"]) == (8, 0)
    assert result["judge_calls_per_pair_cold"] == 4.25
    assert result["server_requests_cold"] == 34 and result["graph_problems"] == []
    assert (result["judge_calls_rerun"], result["server_requests_rerun"]) == (0, 0)
    assert 0 < result["efficiency"] <= 1.0
    assert result["transport_ms_per_call"] is not None
    assert result["prompt_tokens_per_pair"]["static_prefix"] > result["prompt_tokens_per_pair"]["pair"] > 0


def test_pipeline_benchmark_measures_a_server_level_by_level_with_thinking_off():
    """The real-server mode against the fake server (which serves vLLM's /metrics
    counters): a fresh workload per level, tokens per pair for the cost of thinking,
    the prefix-cache hit rate, and --thinking off reaching the server in every call."""
    with StubServer(latency_s=0.02) as server:
        proc = subprocess.run(
            [sys.executable, str(PIPELINE_BENCH), "--base-url", server.base_url,
             "--model", server.model, "--levels", "1,2", "--min-pairs", "4",
             "--thinking", "off", "--json"],
            capture_output=True, text=True, timeout=300,
        )
        bodies = server.chat_requests()
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["thinking"] == "off"
    assert [level["in_flight"] for level in result["levels"]] == [1, 2]
    for level in result["levels"]:
        assert (level["pairs"], level["failed"]) == (4, 0)
        assert level["judge_calls_per_pair"] == 4.25  # one reference, 4 candidates, per level
        assert level["completion_tokens_per_pair"] > 0 and level["prompt_tokens_per_pair"] > 0
        assert 0 < level["prefix_cache_hit_rate"] <= 1
    assert result["references"] == 2 and len(bodies) == 34  # no level reused the other's pairs
    assert all(body["chat_template_kwargs"] == {"enable_thinking": False} for body in bodies)
