"""`radmatch-audit evaluate` over JSONL, CSV and a saved `datasets` folder, against a loopback server.

The package's import rules (purity of the scoring core, public API, no heavy import) are
in test_architecture.py."""

import csv
import json
import os
import subprocess
import sys

import pytest

from radmatch_audit import read_records
from radmatch_audit.testing.fake_server import StubServer

ROWS = [
    {"id": "a", "ref": "FINDINGS: Small left pleural effusion. No pneumothorax.",
     "cand": "FINDINGS: Small left pleural effusion. No pneumothorax.", "ind": "Dyspnea."},
    {"id": "b", "ref": "FINDINGS: Small left pleural effusion. No pneumothorax.",
     "cand": "FINDINGS: Large right pleural effusion.", "ind": ""},
]


def evaluate(server, *args, cwd=None):
    env = {**os.environ, "RADMATCH_BASE_URL": server.base_url, "RADMATCH_MODEL": "stub-judge"}
    return subprocess.run([sys.executable, "-m", "radmatch_audit.cli", "evaluate", *args, "--no-cache", "-q", "--json"],
                          capture_output=True, text=True, timeout=120, env=env, cwd=cwd)


def test_jsonl_input_with_bad_rows_reported_and_kept(tmp_path):
    src = tmp_path / "pairs.jsonl"
    lines = [json.dumps({"pair_id": r["id"], "reference": r["ref"], "candidate": r["cand"]}) for r in ROWS]
    lines.insert(1, json.dumps({"pair_id": "c", "reference": "x"}))  # no candidate
    lines.insert(2, "{broken")
    lines.append(json.dumps({"pair_id": "d", "reference": "a", "candidate": "b", "modality": "knee_mri"}))
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "records.jsonl"
    with StubServer() as server:
        proc = evaluate(server, str(src), "-o", str(out))
    assert proc.returncode == 1  # some rows failed
    assert f"{src}: line 2: column 'candidate' is missing" in proc.stderr
    assert f"{src}: line 3: invalid JSON" in proc.stderr
    assert "line 5: modality must be one of" in proc.stderr
    summary = json.loads(proc.stdout)
    assert (summary["n_pairs"], summary["n_scored"], summary["n_failed"]) == (5, 2, 3)
    records = {r.pair_id: r for r in read_records(out)}
    assert records["a"].scores.actionable_errors == 0
    assert records["b"].scores.actionable_errors >= 1
    # a bad row keeps its own pair_id, its line, and what could be read of it
    assert records["c"].error == "input: line 2: column 'candidate' is missing"
    assert records["c"].source == "line 2" and records["c"].reference == "x"
    assert records["2"].source == "line 3" and records["2"].failure.stage == "input"  # no id: its position
    assert records["d"].error.startswith("input: line 5: modality must be one of")


def test_csv_input_with_custom_columns(tmp_path):
    src = tmp_path / "pairs.csv"
    with open(src, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "ref", "cand", "ind"])
        for r in ROWS:
            writer.writerow([r["id"], r["ref"], r["cand"], r["ind"]])
    out = tmp_path / "records.jsonl"
    with StubServer() as server:
        proc = evaluate(server, str(src), "-o", str(out), "--pair-id-column", "id", "--reference-column", "ref",
                        "--candidate-column", "cand", "--indication-column", "ind")
    assert proc.returncode == 0, proc.stderr
    records = {r.pair_id: r for r in read_records(out)}
    assert records["a"].indication == "Dyspnea." and records["b"].indication is None
    assert records["a"].stages.indication == "Dyspnea."


def test_saved_dataset_input(tmp_path):
    datasets = pytest.importorskip("datasets")
    data = datasets.DatasetDict({"test": datasets.Dataset.from_dict({
        "reference": [r["ref"] for r in ROWS], "candidate": [r["cand"] for r in ROWS],
        "study_id": ["s1", "s1"],
    })})
    data.save_to_disk(str(tmp_path / "ds"))
    out = tmp_path / "records.jsonl"
    with StubServer() as server:
        proc = evaluate(server, str(tmp_path / "ds"), "-o", str(out), "--split", "test")
    assert proc.returncode == 0, proc.stderr
    records = list(read_records(out))
    assert sorted(r.pair_id for r in records) == ["0", "1"]
    assert {r.study_id for r in records} == {"s1"}


def test_unreachable_server_stops_the_run_before_any_record(tmp_path):
    src = tmp_path / "pairs.jsonl"
    src.write_text(json.dumps({"reference": ROWS[0]["ref"], "candidate": ROWS[0]["cand"]}) + "\n")
    out = tmp_path / "records.jsonl"
    out.write_text("earlier records\n")
    env = {**os.environ, "RADMATCH_BASE_URL": "http://127.0.0.1:9/v1"}
    proc = subprocess.run([sys.executable, "-m", "radmatch_audit.cli", "evaluate", str(src), "-o", str(out), "-q",
                           "--force"], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2
    assert "cannot reach the judge server at http://127.0.0.1:9/v1" in proc.stderr
    assert out.read_text() == "earlier records\n"  # a refused run touches no output, even with --force


def test_public_endpoint_is_refused_before_any_request(tmp_path):
    src = tmp_path / "pairs.jsonl"
    src.write_text(json.dumps({"reference": "a", "candidate": "b"}) + "\n")
    env = {**os.environ, "RADMATCH_BASE_URL": "https://93.184.216.34/v1"}
    proc = subprocess.run([sys.executable, "-m", "radmatch_audit.cli", "evaluate", str(src), "-o", str(tmp_path / "o.jsonl")],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2
    assert "refusing to send report text" in proc.stderr and "--allow-remote-endpoint" in proc.stderr
