"""Bad input pairs: a repeated or clashing pair id is refused before anything is written, a
bad row fails only its pair, and a missing column or library is one error line.
"""

from __future__ import annotations

import csv
import json
import os
import sys

import pytest
from reliability_helpers import (
    one_error_line,
    one_per_pair,
    records_of,
    run_cli,
    synthetic_pairs,
    write_jsonl,
)

from radmatch_audit.cli import main
from radmatch_audit.testing.fake_server import StubServer


def test_a_repeated_pair_id_is_refused_and_the_output_is_untouched(tmp_path):
    rows = synthetic_pairs(2, 2)
    rows.append({**rows[1], "candidate": "FINDINGS: Lungs are clear."})  # pair_id of row 2 again
    src, out = write_jsonl(tmp_path / "pairs.jsonl", rows), tmp_path / "records.jsonl"
    before = b'{"pair_id": "old", "note": "an earlier run"}\n'
    out.write_bytes(before)
    mtime = os.stat(out).st_mtime_ns
    with StubServer() as server:
        proc, _ = run_cli(server.base_url, src, out, "--no-cache")
        assert server.requests == []
    assert proc.returncode == 2
    assert f"pair_id {rows[1]['pair_id']!r} of line 5 already appears at line 2" in proc.stderr
    assert out.read_bytes() == before and os.stat(out).st_mtime_ns == mtime


def test_bad_utf8_line_becomes_a_failed_record_and_the_others_are_scored(tmp_path):
    rows = synthetic_pairs(1, 3)
    lines = [json.dumps(row).encode() for row in rows]
    lines.insert(1, b'{"pair_id": "bad-bytes", "reference": "FINDINGS: \xff\xfe effusion.", '
                    b'"candidate": "FINDINGS: Lungs are clear."}')
    src, out = tmp_path / "pairs.jsonl", tmp_path / "records.jsonl"
    src.write_bytes(b"\n".join(lines) + b"\n")
    with StubServer() as server:
        proc, _ = run_cli(server.base_url, src, out, "--no-cache")
    assert proc.returncode == 1, proc.stderr
    records = one_per_pair(records_of(out), [row["pair_id"] for row in rows] + ["bad-bytes"])
    bad = records["bad-bytes"]
    assert bad.failure.stage == "input" and bad.scores is None
    assert "line 2" in bad.failure.cause and "UTF-8" in bad.failure.cause
    assert bad.candidate == "FINDINGS: Lungs are clear."  # its readable values are kept
    assert all(records[row["pair_id"]].scores is not None for row in rows)
    out.read_bytes().decode("utf-8")  # the records file itself is valid UTF-8
    summary = json.loads(proc.stdout)
    assert (summary["n_pairs"], summary["n_scored"], summary["n_failed"]) == (4, 3, 1)


def test_an_empty_reference_is_an_input_failure(tmp_path):
    rows = synthetic_pairs(1, 2)
    rows.append({"pair_id": "empty", "reference": "", "candidate": "FINDINGS: Lungs are clear."})
    rows.append({"pair_id": "blank", "reference": " \n ", "candidate": "FINDINGS: Lungs are clear."})
    src, out = write_jsonl(tmp_path / "pairs.jsonl", rows), tmp_path / "records.jsonl"
    with StubServer() as server:
        proc, _ = run_cli(server.base_url, src, out, "--no-cache")
        reports = {json.loads(b["messages"][-1]["content"]).get("report") for b in server.chat_requests()}
    assert proc.returncode == 1, proc.stderr
    records = one_per_pair(records_of(out), [row["pair_id"] for row in rows])
    for pid in ("empty", "blank"):
        assert records[pid].failure.stage == "input" and records[pid].scores is None
        assert "reference" in records[pid].failure.cause
    assert "" not in reports and " \n " not in reports  # no judge call for them
    assert records["r0-c0"].scores is not None and records["r0-c1"].scores is not None


def test_csv_without_a_reference_column_fails_before_any_request(tmp_path):
    src, out = tmp_path / "pairs.csv", tmp_path / "records.jsonl"
    src.write_text("pair_id,report,candidate\na,FINDINGS: Lungs are clear.,FINDINGS: Lungs are clear.\n")
    with StubServer() as server:
        proc, wall_s = run_cli(server.base_url, src, out, "--no-cache")
        assert server.requests == []
    assert proc.returncode == 2
    assert "no column 'reference'" in proc.stderr and "--reference-column" in proc.stderr
    assert not out.exists()
    assert wall_s < 60


@pytest.mark.parametrize("command", ["evaluate", "baseline"])
def test_a_position_id_that_a_row_gives_is_refused_naming_both_rows(tmp_path, capsys, command):
    """Item 15: a row without pair_id takes its position as its id; when another row gives
    that id, the run is refused naming the row without an id and the row that gives it."""
    rows = synthetic_pairs(2, 2)
    rows[2].pop("pair_id")  # position 2: its id is "2"
    rows[3]["pair_id"] = "2"
    src = tmp_path / "pairs.jsonl"
    src.write_text("\n".join(json.dumps(row) for row in rows[:2]) + "\n\n"  # line 3 is blank
                   + "\n".join(json.dumps(row) for row in rows[2:]) + "\n", encoding="utf-8")
    out = tmp_path / "records.jsonl"
    with StubServer() as server:
        args = [command, str(src), "-o", str(out), "--base-url", server.base_url, "--model", "stub-judge",
                "--cache-dir", str(tmp_path / "cache")]
        assert main(args + (["--method", "count"] if command == "baseline" else ["-q"])) == 2
        assert server.chat_requests() == []
    line = one_error_line(capsys.readouterr().err)
    assert "line 4 has no pair_id and takes its position, '2'" in line
    assert "line 5 gives" in line
    assert not out.exists()


@pytest.mark.parametrize("command", ["evaluate", "baseline"])
def test_a_dataset_folder_without_datasets_installed_is_one_error_line(tmp_path, capsys, monkeypatch, command):
    """Item 17: a folder input when `datasets` cannot be imported: exit 2, one line with
    the install hint, no traceback."""
    (tmp_path / "ds").mkdir()
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` raises ImportError
    args = [command, str(tmp_path / "ds"), "-o", str(tmp_path / "out.jsonl"),
            "--base-url", "http://127.0.0.1:9", "--model", "stub-judge"]
    assert main(args + (["--method", "count"] if command == "baseline" else ["-q"])) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "`datasets`" in line and "pip install" in line and str(tmp_path / "ds") in line


def test_radevalexpert_studies_are_image_sets(tmp_path):
    from radmatch_audit.agreement.radevalexpert import COLUMNS, load_radevalexpert

    cell = json.dumps({"significant": {"1": 1}, "insignificant": {}})
    path = tmp_path / "radevalexpert.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for annotator, kind, images in (("a", "findings", "p1/s1"), ("a", "impression", "p1/s1"),
                                        ("b", "findings", "p1/s1"), ("a", "findings", "p2/s9")):
            writer.writerow({"annotator": annotator, "type": kind, "ground_truth": "Clear.",
                             "images_path": images, **{f"prediction{k}": "Clear." for k in (1, 2, 3)},
                             **{f"annotation{k}": cell for k in (1, 2, 3)}})
    loaded = load_radevalexpert(path)
    studies = {case.study_id for case in loaded.cases.values()}
    assert len(studies) == 2
    assert {row["study_id"] for row in loaded.rows} == studies
