"""Records and answer-cache files are owner-only (a FIFO or device is never chmodded), and
the API key reaches no file and no log.
"""

from __future__ import annotations

import io
import logging
import os
import stat
import threading
from pathlib import Path

from reliability_helpers import (
    SECRET,
    cli_env,
    evaluate_cli,
    evaluate_in_process,
    marker_pairs,
    mode_of,
    run_cli,
    synthetic_pairs,
    write_jsonl,
)

from radmatch_audit.testing.fake_server import StubServer


def test_records_and_cache_files_are_owner_only_and_the_key_is_nowhere(tmp_path):
    rows = synthetic_pairs(3, 2)
    src, out, cache = write_jsonl(tmp_path / "pairs.jsonl", rows), tmp_path / "records.jsonl", tmp_path / "cache"
    # a few faults, so that error paths (messages, retries) run too; 5 attempts outlast them
    with StubServer(api_key=SECRET, faults=["500", "reset", "429:0.1", "garbage"]) as server:
        proc, _ = run_cli(server.base_url, src, out, "--cache-dir", str(cache), "--retries", "5",
                          env=cli_env(server.base_url, RADMATCH_API_KEY=SECRET))
        authorizations = {entry["authorization"] for entry in server.requests}
    assert proc.returncode == 0, proc.stderr
    assert authorizations == {f"Bearer {SECRET}"}  # the key was sent, to the server only

    assert mode_of(out) == 0o600
    cache_files = [p for p in cache.rglob("*") if p.is_file()]
    assert cache_files
    for path in cache_files:
        assert mode_of(path) == 0o600, path
    for folder in (p for p in cache.rglob("*") if p.is_dir()):
        assert mode_of(folder) == 0o700, folder

    assert SECRET not in out.read_text(encoding="utf-8")
    assert SECRET not in proc.stdout and SECRET not in proc.stderr
    for path in cache_files:
        assert SECRET.encode() not in path.read_bytes(), path


def test_an_existing_records_file_is_made_owner_only(tmp_path):
    src = write_jsonl(tmp_path / "pairs.jsonl", synthetic_pairs(1, 2))
    out = tmp_path / "records.jsonl"
    out.write_text("")
    out.chmod(0o644)
    with StubServer() as server:
        proc, _ = run_cli(server.base_url, src, out, "--no-cache")
        assert proc.returncode == 0, proc.stderr
        assert mode_of(out) == 0o600
        out.chmod(0o644)
        proc, _ = run_cli(server.base_url, src, out, "--no-cache", "--resume")
    assert proc.returncode == 0, proc.stderr
    assert mode_of(out) == 0o600


def test_debug_log_output_never_holds_the_api_key(tmp_path, caplog, monkeypatch):
    monkeypatch.setenv("RADMATCH_KEY_FOR_TEST", SECRET)
    caplog.set_level(logging.DEBUG)
    faults = ["500", "reset", "truncated", "garbage", "429:0.05", "503"]
    with StubServer(api_key=SECRET, faults=faults) as server:
        records = evaluate_in_process(server, marker_pairs(), retries=8,
                                      api_key_env="RADMATCH_KEY_FOR_TEST")
        authorizations = {entry["authorization"] for entry in server.requests}
    assert authorizations == {f"Bearer {SECRET}"}
    assert all(not r.failed for r in records)
    assert any(rec.levelno == logging.DEBUG for rec in caplog.records)  # DEBUG was captured
    assert any("retry" in rec.getMessage() for rec in caplog.records)  # the faults were logged
    text = caplog.text + "\n".join(rec.getMessage() for rec in caplog.records)
    assert SECRET not in text
    assert SECRET not in "".join(r.to_json() for r in records)


def test_a_fifo_or_device_output_is_written_but_never_chmodded(tmp_path):
    fifo = tmp_path / "records.fifo"
    os.mkfifo(fifo, 0o644)
    received = io.BytesIO()
    reader = threading.Thread(target=lambda: received.write(fifo.read_bytes()), daemon=True)
    reader.start()
    src = write_jsonl(tmp_path / "pairs.jsonl", synthetic_pairs(1, 2))
    with StubServer() as server:
        assert evaluate_cli(server, src, fifo, tmp_path) == 0
        reader.join(10)
        assert stat.S_IMODE(os.stat(fifo).st_mode) == 0o644
        assert received.getvalue().count(b"\n") == 2  # the records went through
        null_mode = os.stat("/dev/null").st_mode
        assert evaluate_cli(server, src, Path("/dev/null"), tmp_path) == 0
        assert os.stat("/dev/null").st_mode == null_mode
