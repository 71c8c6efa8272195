"""A run killed in mid-write, then --resume: one record per pair, the scores of an
uninterrupted run; a torn last line is dropped, changed rows are evaluated again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

from reliability_helpers import (
    TITLES,
    cli_command,
    cli_env,
    evaluate_cli,
    line_count,
    one_per_pair,
    records_of,
    records_of_lenient,
    run_cli,
    scores_by_pair,
    synthetic_pairs,
    write_jsonl,
)

from radmatch_audit.files.record_io import read_records
from radmatch_audit.testing.fake_server import StubServer


def test_sigkill_mid_run_then_resume_matches_an_uninterrupted_run(tmp_path):
    rows = synthetic_pairs(15, 4)  # 60 pairs
    pair_ids = [row["pair_id"] for row in rows]
    src = write_jsonl(tmp_path / "pairs.jsonl", rows)
    whole, killed = tmp_path / "whole.jsonl", tmp_path / "killed.jsonl"
    with StubServer(latency_s=0.05) as server:
        proc, _ = run_cli(server.base_url, src, whole, "--no-cache", "--concurrency", "4")
        assert proc.returncode == 0, proc.stderr

        run = subprocess.Popen(cli_command(src, killed, "--no-cache", "--concurrency", "2"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=cli_env(server.base_url))
        try:
            deadline = time.monotonic() + 120
            while line_count(killed) < len(rows) // 2 and run.poll() is None:
                assert time.monotonic() < deadline, "the run wrote too few records in 120 s"
                time.sleep(0.01)
            os.kill(run.pid, signal.SIGKILL)
        finally:
            run.wait(timeout=30)
        assert run.returncode == -signal.SIGKILL, "the run ended before it could be killed"
        written_before = line_count(killed)
        assert len(rows) // 2 <= written_before < len(rows)
        done_before = {r.pair_id for r in records_of_lenient(killed)}

        sent = len(server.chat_requests())
        proc, _ = run_cli(server.base_url, src, killed, "--no-cache", "--concurrency", "4", "--resume")
        resumed_bodies = server.chat_requests()[sent:]
    assert proc.returncode == 0, proc.stderr
    assert "resuming:" in proc.stderr

    expected = scores_by_pair(one_per_pair(records_of(whole), pair_ids))
    final = one_per_pair(records_of(killed), pair_ids)
    assert scores_by_pair(final) == expected
    assert json.loads(proc.stdout)["n_pairs"] == len(rows)
    # the resumed run asked nothing about a candidate whose record it kept
    extracted = {json.loads(b["messages"][-1]["content"])["report"] for b in resumed_bodies
                 if b["structured_outputs"]["json"]["title"] == TITLES["extract"]}
    kept_candidates = {final[pid].candidate for pid in done_before}
    assert not extracted & kept_candidates


def test_resume_drops_a_torn_last_line(tmp_path):
    rows = synthetic_pairs(5, 4)  # 20 pairs
    pair_ids = [row["pair_id"] for row in rows]
    src = write_jsonl(tmp_path / "pairs.jsonl", rows)
    whole, torn = tmp_path / "whole.jsonl", tmp_path / "torn.jsonl"
    with StubServer() as server:
        proc, _ = run_cli(server.base_url, src, whole, "--no-cache")
        assert proc.returncode == 0, proc.stderr
        lines = whole.read_bytes().splitlines(keepends=True)
        torn_id = json.loads(lines[8])["pair_id"]
        torn.write_bytes(b"".join(lines[:8]) + lines[8][: len(lines[8]) // 2])  # no newline
        proc, _ = run_cli(server.base_url, src, torn, "--no-cache", "--resume")
    assert proc.returncode == 0, proc.stderr
    assert "resuming: 8 pair(s)" in proc.stderr
    final = one_per_pair(records_of(torn), pair_ids)  # every line parses: the torn one is gone
    assert final[torn_id].scores is not None
    assert scores_by_pair(final) == scores_by_pair(one_per_pair(records_of(whole), pair_ids))
    assert torn.read_bytes().endswith(b"\n")


def test_resume_reevaluates_changed_rows_and_does_not_count_pairs_gone_from_the_input(tmp_path, capsys):
    rows = synthetic_pairs(1, 3)
    src, out = write_jsonl(tmp_path / "pairs.jsonl", rows), tmp_path / "records.jsonl"
    with StubServer() as server:
        assert evaluate_cli(server, src, out, tmp_path) == 0
        first = {r.pair_id: r for r in read_records(out)}
        changed = dict(rows[0], candidate=rows[0]["candidate"] + " New right pleural effusion.")
        write_jsonl(src, [changed, rows[1]])  # row 0 changed, row 2 gone
        capsys.readouterr()
        asked = len(server.chat_requests())
        assert evaluate_cli(server, src, out, tmp_path, "--resume") == 0
        captured = capsys.readouterr()
        assert len(server.chat_requests()) > asked  # the changed pair went to the judge again
    summary = json.loads(captured.out)
    assert summary["n_pairs"] == 2, summary
    assert "1 record(s)" in captured.err and "evaluated again" in captured.err
    assert "not in" in captured.err and "not counted" in captured.err
    by_pair = {}
    for r in read_records(out):
        by_pair.setdefault(r.pair_id, []).append(r)
    assert {k: len(v) for k, v in by_pair.items()} == {"r0-c0": 1, "r0-c1": 1, "r0-c2": 1}
    assert by_pair["r0-c0"][0].candidate == changed["candidate"]  # the record of the new row
    assert by_pair["r0-c2"][0].to_json() == first["r0-c2"].to_json()  # kept in the file
