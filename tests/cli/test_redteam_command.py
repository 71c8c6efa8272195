"""`radmatch-audit redteam`: the red-team set's command, checking stored records without a
judge, and its help."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from radmatch_audit.cli.app import main
from radmatch_audit.core.records import PairInput
from radmatch_audit.files import paths
from radmatch_audit.files.record_io import RecordWriter
from radmatch_audit.read.redteam import load_pairs
from radmatch_audit.run.pipeline import Evaluator
from radmatch_audit.testing.scripted import ScriptedJudge

REPO = Path(__file__).resolve().parents[2]
PAIRS = REPO / "redteam" / "pairs.jsonl"
CHOSEN = ("rt20-laterality-flip", "rt08-history-in-candidate")


@pytest.fixture(scope="module")
def stored_records(tmp_path_factory) -> Path:
    """Records of two pairs of the set, by the toy judge, written as `evaluate` writes them."""
    pairs = [p for p in load_pairs(PAIRS) if p["pair_id"] in CHOSEN]
    inputs = [PairInput(reference=p["reference"], candidate=p["candidate"], pair_id=p["pair_id"],
                        modality=p["modality"], indication=p["indication"]) for p in pairs]
    path = tmp_path_factory.mktemp("redteam") / "records.jsonl"
    with Evaluator(ScriptedJudge(), cache_dir=None) as evaluator, RecordWriter(path) as writer:
        for record in evaluator.evaluate(inputs):
            writer.write(record)
    return path


def test_records_are_checked_without_a_judge(stored_records, capsys, monkeypatch):
    monkeypatch.setenv("RADMATCH_BASE_URL", "http://127.0.0.1:9/v1")  # no judge is called
    assert main(["redteam", "--records", str(stored_records)]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split("  ") for line in out.splitlines() if line.startswith("rt")}
    assert set(rows) == set(CHOSEN)
    assert "pass" in rows["rt20-laterality-flip"]
    assert f"{len(load_pairs(PAIRS)) - 2} pair(s) of the set have no record" in out
    assert "pass rate: 1/2 (50 %)" in out


def test_an_installed_package_without_the_set_asks_for_pairs(stored_records, capsys, monkeypatch):
    monkeypatch.setattr(paths, "_checkout_dir", lambda: None)  # installed from a wheel
    assert main(["redteam", "--records", str(stored_records)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "--pairs" in line and "redteam/pairs.jsonl" in line
    assert main(["redteam", "--records", str(stored_records), "--pairs", str(PAIRS)]) == 0


def test_help_names_every_option():
    proc = subprocess.run([sys.executable, "-m", "radmatch_audit.cli", "redteam", "--help"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    for option in ("--pairs", "--output", "--records", "--limit", "--pair", "--base-url", "--model"):
        assert option in proc.stdout
    assert "red-team set" in proc.stdout
