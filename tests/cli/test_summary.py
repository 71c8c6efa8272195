"""cli.summary: the command's parser contract and its exit codes, in process."""

from __future__ import annotations

import argparse
import json

import dashboard_fixtures as fx

from radmatch_audit.cli import summary
from radmatch_audit.cli.common import EXIT_OK, EXIT_SOME_FAILED, EXIT_USAGE


def run_summary(*argv: str) -> int:
    p = argparse.ArgumentParser()
    summary.add_arguments(p)
    return summary.run(p.parse_args(list(argv)))


def test_summary_of_a_records_file_as_json(tmp_path, capsys):
    src = fx.write_records(tmp_path / "r.jsonl", [fx.fig3a(), fx.fig3b()])
    assert run_summary(str(src), "--json") == EXIT_OK
    assert json.loads(capsys.readouterr().out)["n_pairs"] == 2


def test_a_bad_line_is_named_and_the_exit_code_is_1(tmp_path, capsys):
    src = fx.write_records(tmp_path / "r.jsonl", [fx.fig3a()])
    with src.open("a", encoding="utf-8") as handle:
        handle.write("{not json\n")
    assert run_summary(str(src), "--json") == EXIT_SOME_FAILED
    err = capsys.readouterr().err
    assert f"{src}:2:" in err and "1 line(s) of" in err


def test_input_pairs_are_refused_with_one_line(tmp_path, capsys):
    src = tmp_path / "pairs.jsonl"
    src.write_text(json.dumps({"reference": "r", "candidate": "c"}) + "\n", encoding="utf-8")
    try:
        code = run_summary(str(src))
    except SystemExit as stop:
        code = stop.code
    assert code == EXIT_USAGE
    assert capsys.readouterr().err.count("\n") == 1


def test_help_and_description_name_the_summary():
    assert "summary" in summary.HELP
    assert "--explain" in summary.DESCRIPTION
