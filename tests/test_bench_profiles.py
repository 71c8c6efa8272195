"""The scoring benchmark's workloads are what its docstring says they are."""

import random

import pytest

from radmatch.recompute import score_record
from scripts.bench_scoring import MISSED, FALSE, ATTRIBUTE_ERROR, realistic_record, stress_record


def _rates(make, n=600):
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
    assert missed == pytest.approx(MISSED, abs=0.05)
    assert false == pytest.approx(FALSE, abs=0.06)  # clipping at 8 findings adds a few
    assert wrong == pytest.approx(ATTRIBUTE_ERROR, abs=0.04)


def test_stress_profile_is_a_worst_case_for_scoring():
    missed, false, wrong = _rates(stress_record)
    assert missed < 0.3 and false < 0.3  # most findings matched...
    assert wrong > 0.8  # ...and nearly every matched unit wrong


def test_benchmark_reports_the_median_run_beside_a_json_round_trip():
    from scripts.bench_scoring import measure, rate, report

    result = measure("realistic", pairs=40, seed=0, repeats=3)
    assert len(result["runs"]) == 3 and all(a > 0 and b > 0 for a, b in result["runs"])
    times = sorted(took for took, _ in result["runs"])
    assert rate(result) == pytest.approx(40 / times[1])  # the median run, not the best
    text = report(result)
    assert "median of 3 runs" in text and "stdlib JSON round trip" in text
    assert set(result["phases"]) == {"parse", "score", "serialise", "summary"}
