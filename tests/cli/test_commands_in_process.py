"""Each command module's contract, in process: `add_arguments` builds its parser, `run(args)`
does the work and returns the exit code (docs/architecture.md, "A new command").

The judge-run commands (evaluate, baseline, redteam) run against the fake judge server on
127.0.0.1; the others read records the tests write.
"""

from __future__ import annotations

import argparse
import json
import signal

import dashboard_fixtures as fx
import pytest

from radmatch_audit.cli import (
    agreement, baseline, compare, dashboard, evaluate, install_metric, interrupt, recompute, redteam,
)
from radmatch_audit.cli.common import EXIT_OK, EXIT_USAGE
from radmatch_audit.files.record_io import read_records
from radmatch_audit.testing.fake_server import StubServer

REF = "FINDINGS: Small right pleural effusion. No pneumothorax. Heart size is normal."
CAND = "FINDINGS: No pneumothorax. Heart size is normal. Large mass in the left lung."


def run(module, *argv: str) -> int:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    try:
        return module.run(parser.parse_args([str(a) for a in argv]))
    except SystemExit as stop:  # argparse's own usage errors
        return stop.code


def pairs_file(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"pair_id": "p1", "reference": REF, "candidate": CAND}) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("module", [agreement, baseline, compare, dashboard, evaluate,
                                    install_metric, recompute, redteam])
def test_every_command_module_says_what_it_does(module):
    assert module.HELP and module.DESCRIPTION and module.HELP[0].islower()


def test_evaluate_runs_the_judge_and_writes_one_record_per_pair(tmp_path, capsys):
    out = tmp_path / "records.jsonl"
    with StubServer() as server:
        code = run(evaluate, pairs_file(tmp_path), "-o", out, "--base-url", server.base_url,
                   "--model", "stub-judge", "--no-cache", "-q")
    assert code == EXIT_OK, capsys.readouterr().err
    (record,) = read_records(out)
    assert record.pair_id == "p1" and record.scores.adjudication == "current"
    assert record.scores.significant_errors is not None
    assert run(evaluate, pairs_file(tmp_path), "-o", out, "--base-url", "http://127.0.0.1:9/v1") == EXIT_USAGE


def test_baseline_writes_baseline_records(tmp_path, capsys):
    out = tmp_path / "count.jsonl"
    with StubServer() as server:
        code = run(baseline, pairs_file(tmp_path), "--method", "count", "-o", out,
                   "--base-url", server.base_url, "--model", "stub-judge", "--no-cache")
    assert code == EXIT_OK, capsys.readouterr().err
    (line,) = out.read_text(encoding="utf-8").splitlines()
    record = json.loads(line)
    assert record["record_type"] == "baseline" and record["errors"] == 2  # the toy count


def test_recompute_and_compare_and_dashboard_read_records(tmp_path, capsys):
    a = fx.write_records(tmp_path / "a.jsonl", [fx.fig3a(), fx.fig3b()])
    out = tmp_path / "again.jsonl"
    assert run(recompute, a, "-o", out) == EXIT_OK
    assert [r.pair_id for r in read_records(out)] == [r.pair_id for r in read_records(a)]
    capsys.readouterr()
    assert run(compare, a, out, "--json") == EXIT_OK
    assert json.loads(capsys.readouterr().out)["n_compared"] == 2
    page = tmp_path / "page.html"
    assert run(dashboard, a, "-o", page) == EXIT_OK and page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert run(recompute, a, "-o", a) == EXIT_USAGE  # an input is never overwritten


def test_redteam_checks_stored_records_without_a_judge(tmp_path, capsys):
    records = fx.write_records(tmp_path / "r.jsonl", [fx.fig3a()])
    pairs = tmp_path / "set.jsonl"
    pairs.write_text(json.dumps({
        "pair_id": fx.fig3a().pair_id, "attack": "control", "behaviour": "scored",
        "modality": "chest_xray", "indication": None, "reference": "r", "candidate": "c",
        "expect": [{"kind": "scored"}]}) + "\n", encoding="utf-8")
    assert run(redteam, "--pairs", pairs, "--records", records) == EXIT_OK
    assert "pass" in capsys.readouterr().out


def test_agreement_refuses_a_missing_annotation_set_in_one_line(tmp_path, capsys):
    records = fx.write_records(tmp_path / "r.jsonl", [fx.fig3a()])
    assert run(agreement, records, "--annotations", tmp_path / "nowhere") == EXIT_USAGE
    assert capsys.readouterr().err.count("\n") == 1


def test_install_metric_writes_the_script_into_the_modules_cache(tmp_path, capsys):
    assert run(install_metric, "--modules-cache", tmp_path / "modules") == EXIT_OK
    assert list((tmp_path / "modules").rglob("radmatch.py"))
    assert "installed the RadMatch metric" in capsys.readouterr().out


def test_the_run_stopper_writes_under_its_lock_and_restores_the_handlers():
    written = []
    stopper = interrupt.RunStopper("stopped; rerun with --resume")
    before = signal.getsignal(signal.SIGTERM)
    with stopper.installed():
        assert signal.getsignal(signal.SIGTERM) != before
        stopper.guard(written.append)("record")
    assert written == ["record"] and signal.getsignal(signal.SIGTERM) == before
