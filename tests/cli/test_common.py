"""cli.common: the exit codes, the refusal to overwrite records, and reading a records file."""

from __future__ import annotations

import json

import pytest
from builders import fig3_record

from radmatch_audit.cli.common import (
    EXIT_USAGE,
    check_records_file,
    checked_lines,
    existing_output,
    output_problem,
)


def test_existing_output_refuses_a_file_holding_records_unless_forced(tmp_path):
    out = tmp_path / "records.jsonl"
    out.write_text(fig3_record().to_json() + "\n", encoding="utf-8")
    assert existing_output(out, force=False) == f"{out} exists and holds records: add --force to replace it"
    assert "add --resume to keep them" in existing_output(out, force=False, resume=False)
    assert existing_output(out, force=True) is None
    assert existing_output(out, force=False, resume=True) is None  # records to keep


def test_existing_output_allows_a_missing_or_empty_file(tmp_path):
    assert existing_output(tmp_path / "new.jsonl", force=False) is None
    empty = tmp_path / "empty.jsonl"
    empty.touch()
    assert existing_output(empty, force=False) is None


def test_resume_on_a_file_of_input_pairs_is_refused(tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"reference": "r", "candidate": "c"}) + "\n", encoding="utf-8")
    problem = existing_output(pairs, force=False, resume=True)
    assert problem.startswith(f"--resume keeps only the records of {pairs}")
    assert "input pairs" in problem


def test_output_problem_names_a_missing_folder_and_the_input_itself(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text("{}\n", encoding="utf-8")
    assert "does not exist" in output_problem(tmp_path / "nowhere" / "out.jsonl", str(src))
    assert "is the input file" in output_problem(src, str(src))
    assert output_problem(tmp_path / "out.jsonl", str(src)) is None


def test_check_records_file_tells_pairs_folders_and_missing_files_apart(tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"reference": "r", "candidate": "c"}) + "\n", encoding="utf-8")
    assert "evaluate` on it first" in check_records_file(str(pairs))
    assert check_records_file(str(tmp_path)) == f"cannot read {tmp_path}: it is a folder"
    assert "cannot read" in check_records_file(str(tmp_path / "missing.jsonl"))
    records = tmp_path / "records.jsonl"
    records.write_text("\n" + fig3_record().to_json() + "\n", encoding="utf-8")
    assert check_records_file(str(records)) is None


def test_checked_lines_keeps_every_line_and_stops_on_a_file_without_records(tmp_path, capsys):
    line = fig3_record().to_json() + "\n"
    assert list(checked_lines(iter(["\n", line, line]), "r.jsonl")) == ["\n", line, line]
    with pytest.raises(SystemExit) as stop:
        checked_lines(iter(["\n"]), "blank.jsonl")
    assert stop.value.code == EXIT_USAGE
    assert capsys.readouterr().err == "radmatch-audit: error: blank.jsonl holds no records\n"
