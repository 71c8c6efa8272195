"""Lines that are not readable records (NaN, a lone surrogate, deep nesting, a too-long CSV
field) are named and skipped by every reader, and the summary does not depend on the
order of lines.
"""

from __future__ import annotations

import csv
import dataclasses
import json

import pytest
from reliability_helpers import DEEP, evaluate_cli, scored_records, synthetic_pairs, write_records

from radmatch_audit.cli import main
from radmatch_audit.core.records import Record
from radmatch_audit.files.record_io import BadLine, iter_lines, read_records
from radmatch_audit.testing.fake_server import StubServer


@pytest.fixture(scope="module")
def scored(tmp_path_factory) -> list[Record]:
    """Records of 12 pairs in 6 studies, scored through the fake server."""
    return scored_records(tmp_path_factory, 6, 2)


def test_readers_name_a_line_with_nan_and_skip_it(tmp_path, scored, capsys):
    good = scored[0].to_json()
    nan = scored[1].to_json().replace('"total":', '"total":NaN,"was":', 1)
    inf = scored[2].to_json().replace('"total":', '"total":1e999,"was":', 1)
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join([good, nan, inf]) + "\n", encoding="utf-8")
    items = [item for _, item in iter_lines(path)]
    assert [isinstance(i, BadLine) for i in items] == [False, True, True]
    assert "finite" in items[1].message
    assert main(["summary", str(path), "--json"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["n_pairs"] == 1 and f"{path}:2:" in captured.err
    assert main(["dashboard", str(path), "-o", str(tmp_path / "page.html")]) == 0
    with pytest.raises(ValueError, match="finite"):
        Record.model_validate({"pair_id": "x", "reference": "a", "candidate": "b",
                               "timings_s": {"total": float("nan")}})


def test_agreement_counts_a_nan_baseline_count_as_failed(tmp_path):
    from radmatch_audit.agreement.methods import read_method

    lines = [{"record_type": "baseline", "method": "count", "pair_id": "a", "errors": 2},
             {"record_type": "baseline", "method": "count", "pair_id": "b", "errors": float("nan")},
             {"record_type": "baseline", "method": "count", "pair_id": "c", "errors": float("inf")}]
    path = tmp_path / "baseline.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    method = read_method(str(path))
    assert method.errors == {"a": 2.0} and method.failed == 2


def test_a_lone_surrogate_row_is_a_failed_record_naming_its_line(tmp_path, scored, capsys):
    rows = synthetic_pairs(1, 3)
    src = tmp_path / "pairs.jsonl"
    lines = [json.dumps(r) for r in rows]
    lines[1] = lines[1].replace("Drafted", "\\ud800Drafted")
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "records.jsonl"
    with StubServer() as server:
        assert evaluate_cli(server, src, out, tmp_path) == 1
    records = {r.pair_id: r for r in read_records(out)}
    assert len(records) == 3
    bad = records["r0-c1"]
    assert bad.failure.stage == "input" and "line 2" in bad.error and "surrogate" in bad.error
    assert records["r0-c0"].scores is not None and records["r0-c2"].scores is not None
    # a records file holding such a record: recompute and dashboard name it and go on
    broken = write_records(tmp_path / "broken.jsonl", scored[:2])
    broken.write_text(broken.read_text().replace('"candidate":"', '"candidate":"\\udc00', 1))
    capsys.readouterr()
    assert main(["recompute", str(broken), "-o", str(tmp_path / "re.jsonl")]) == 1
    assert main(["dashboard", str(broken), "-o", str(tmp_path / "page.html")]) == 0
    assert f"{broken}:1: it holds a lone surrogate" in capsys.readouterr().err


def test_a_deeply_nested_line_is_skipped_with_a_message_everywhere(tmp_path, scored, capsys):
    path = write_records(tmp_path / "records.jsonl", scored[:2], DEEP)
    assert main(["summary", str(path)]) == 1
    assert main(["recompute", str(path), "-o", str(tmp_path / "re.jsonl")]) == 1
    assert main(["dashboard", str(path), "-o", str(tmp_path / "page.html")]) == 0
    err = capsys.readouterr().err
    assert err.count("nested too deeply") >= 2 and "Traceback" not in err
    # evaluate: a nested input row is a failed record; --resume reads past a nested line
    rows = synthetic_pairs(1, 2)
    src = tmp_path / "pairs.jsonl"
    src.write_text(json.dumps(rows[0]) + "\n" + DEEP + "\n" + json.dumps(rows[1]) + "\n")
    out = tmp_path / "out.jsonl"
    with StubServer() as server:
        assert evaluate_cli(server, src, out, tmp_path) == 1
        with open(out, "a", encoding="utf-8") as handle:
            handle.write(DEEP + "\n")
        assert evaluate_cli(server, src, out, tmp_path, "--resume") == 1
    records = [item for _, item in iter_lines(out) if not isinstance(item, BadLine)]
    assert sorted(r.pair_id for r in records) == ["1", "r0-c0", "r0-c1"]
    assert "nested too deeply" in next(r for r in records if r.pair_id == "1").error


def test_a_long_csv_field_is_read_and_a_too_long_one_names_its_row(tmp_path, monkeypatch):
    from radmatch_audit.files import inputs

    long_report = "FINDINGS: " + "Stable appearance of the chest. " * 8000  # 256,000 characters
    path = tmp_path / "pairs.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["pair_id", "reference", "candidate"])
        writer.writerow(["a", "FINDINGS: Clear.", "FINDINGS: Clear."])
        writer.writerow(["b", long_report, "FINDINGS: Clear."])
    items = list(inputs.read_pairs(path))
    assert [type(item).__name__ for _, item in items] == ["PairInput", "PairInput"]
    assert items[1][1].reference == long_report
    monkeypatch.setattr(inputs, "CSV_FIELD_LIMIT", 1000)
    with pytest.raises(inputs.InputError, match="line 3"):
        list(inputs.read_pairs(path))


def test_the_summary_interval_does_not_depend_on_the_order_of_lines(tmp_path, scored, capsys):
    many = []  # 30 studies of 0 to 10 errors: enough spread for the draws to tell an order
    for k in range(5):
        for i, r in enumerate(scored):
            errors = (7 * (i + 12 * k)) % 11
            many.append(r.model_copy(update={
                "pair_id": f"{r.pair_id}-{k}", "study_id": f"{r.study_id}-{k}",
                "scores": dataclasses.replace(r.scores, actionable_errors=errors)}))
    intervals = []
    for name, order in (("forward", many), ("reversed", many[::-1]),
                        ("shuffled", many[1::2] + many[0::2])):
        path = write_records(tmp_path / f"{name}.jsonl", order)
        assert main(["summary", str(path), "--json"]) == 0
        intervals.append(json.dumps(json.loads(capsys.readouterr().out), sort_keys=True))
    assert intervals[0] == intervals[1] == intervals[2]
