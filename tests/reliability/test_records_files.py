"""Records files under --resume and --force: a file that holds no records, a bad first
line, a second run on the same file, a held lock, a malformed or newer record, a
symbolic link.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from pathlib import Path

import pytest
from reliability_helpers import (
    MALFORMED,
    cli_command,
    cli_env,
    evaluate_cli,
    malformed_line,
    one_error_line,
    scored_records,
    synthetic_pairs,
    wait_for_output,
    write_jsonl,
    write_records,
)

from radmatch_audit.cli import main
from radmatch_audit.core.records import Record
from radmatch_audit.files.record_io import BadLine, RecordWriter, iter_lines, read_records
from radmatch_audit.testing.fake_server import StubServer


@pytest.fixture(scope="module")
def scored(tmp_path_factory) -> list[Record]:
    """Records of 4 pairs in 2 studies, scored through the fake server."""
    return scored_records(tmp_path_factory, 2, 2)


@pytest.mark.parametrize("kind", ["input pairs", "csv", "text"])
def test_resume_refuses_a_file_that_holds_no_records_and_leaves_it_whole(tmp_path, capsys, kind):
    """Item 1: `-o` naming input pairs (arguments swapped), a CSV or any file without a
    record is refused with --resume as without it; the file keeps every byte."""
    src = write_jsonl(tmp_path / "pairs.jsonl", synthetic_pairs(1, 2))
    out = tmp_path / "other.jsonl"
    if kind == "input pairs":
        write_jsonl(out, synthetic_pairs(2, 2))
    elif kind == "csv":
        out.write_text("pair_id,reference,candidate\np1,FINDINGS: a.,FINDINGS: b.\n", encoding="utf-8")
    else:
        out.write_text("notes on the study\nto read later\n", encoding="utf-8")
    before = out.read_bytes()
    with StubServer() as server:
        assert evaluate_cli(server, src, out, tmp_path) == 2  # the plain run refuses it
        capsys.readouterr()
        assert evaluate_cli(server, src, out, tmp_path, "--resume") == 2
        assert server.chat_requests() == []
    line = one_error_line(capsys.readouterr().err)
    assert "--resume" in line and str(out) in line and "--force" in line
    assert out.read_bytes() == before


def test_resume_still_continues_a_records_file_with_a_bad_first_line(tmp_path, scored, capsys):
    """Item 1: a records file whose first line is torn junk is still a records file."""
    src = write_jsonl(tmp_path / "pairs.jsonl", synthetic_pairs(2, 2))
    out = tmp_path / "records.jsonl"
    out.write_text('{"schema_version": 3, "pair_id": "x", "stag\n' + scored[0].to_json() + "\n",
                   encoding="utf-8")
    with StubServer() as server:
        assert evaluate_cli(server, src, out, tmp_path, "--resume") == 0
    assert "resuming: 1 pair(s)" in capsys.readouterr().err
    assert sorted(r.pair_id for r in read_records(out)) == sorted(r.pair_id for r in scored)


@pytest.mark.parametrize("second", [("--force",), ("--resume",)])
def test_a_second_run_on_the_same_records_file_is_refused_and_the_first_completes(tmp_path, capsys, second):
    """Item 2: while one `evaluate` writes OUT, a second one on OUT (with --force or
    --resume) is refused naming the first run's pid; the first run's file is whole."""
    rows = synthetic_pairs(2, 2)
    src, out = write_jsonl(tmp_path / "pairs.jsonl", rows), tmp_path / "records.jsonl"
    with StubServer(latency_s=0.4, capacity=1) as server:
        first = subprocess.Popen(cli_command(src, out, "--no-cache"), env=cli_env(server.base_url),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_for_output(out, first)
            assert evaluate_cli(server, src, out, tmp_path, *second) == 2
            line = one_error_line(capsys.readouterr().err)
            _, err = first.communicate(timeout=120)
        finally:
            first.kill()
    assert f"another radmatch-audit run (pid {first.pid})" in line and str(out) in line
    assert first.returncode == 0, err
    assert sorted(r.pair_id for r in read_records(out)) == sorted(r["pair_id"] for r in rows)


@pytest.mark.parametrize("resume", [False, True])
def test_a_held_records_file_is_never_truncated_or_rewritten(tmp_path, scored, resume):
    """Item 2: the writer takes the lock before it empties (or, resuming, rewrites) the
    file; a file another process holds keeps every byte and inode."""
    from radmatch_audit.files.record_io import RecordsInUse, lock_problem

    out = write_records(tmp_path / "records.jsonl", scored, "torn")
    before, inode = out.read_bytes(), out.stat().st_ino
    holder = os.open(out, os.O_RDONLY)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        with pytest.raises(RecordsInUse, match=f"pid {os.getpid()}"):
            RecordWriter(out, resume=resume)
    finally:
        os.close(holder)
    assert out.read_bytes() == before and out.stat().st_ino == inode
    with RecordWriter(out, resume=resume) as writer:  # free again: the lock is the writer's
        assert lock_problem(out) is not None
        writer.write(scored[0])
    assert lock_problem(out) is None


@pytest.mark.parametrize("change", MALFORMED)
def test_a_malformed_older_record_is_a_named_bad_line_everywhere(tmp_path, scored, capsys, change):
    """Item 4: a malformed record of an older version (`samples` a number or true, a list
    or object as `record_type`) is named and skipped by every reader, never a TypeError."""
    path = write_records(tmp_path / "records.jsonl", scored[:2], malformed_line(scored[2], change))
    items = [item for _, item in iter_lines(path)]
    assert [type(item) for item in items] == [Record, Record, BadLine]
    assert items[2].line_no == 3 and change.split()[0] in items[2].message
    for command in (["summary", str(path)], ["compare", str(path), str(path)],
                    ["recompute", str(path), "-o", str(tmp_path / "re.jsonl")]):
        assert main(command) in (0, 1)
        err = capsys.readouterr().err
        assert "Traceback" not in err and f"{path}:3:" in err, (command, err)
    page = tmp_path / "page.html"  # the dashboard lists bad lines on its page
    assert main(["dashboard", str(path), "-o", str(page)]) in (0, 1)
    assert page.is_file() and "Traceback" not in capsys.readouterr().err
    radpref = Path(__file__).parents[1] / "data" / "radpref"  # agreement counts bad lines as unreadable
    assert main(["agreement", str(path), "--annotations", str(radpref), "--json"]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_resume_past_a_malformed_older_record_evaluates_its_pair_again(tmp_path, scored, capsys):
    """Item 4: `evaluate --resume` drops the malformed line like any bad line and goes on."""
    rows = synthetic_pairs(2, 2)
    src, out = write_jsonl(tmp_path / "pairs.jsonl", rows), tmp_path / "records.jsonl"
    write_records(out, scored[:2], malformed_line(scored[2], "samples 5"))
    with StubServer() as server:
        assert evaluate_cli(server, src, out, tmp_path, "--resume") == 0
    assert "Traceback" not in capsys.readouterr().err
    assert sorted(r.pair_id for r in read_records(out)) == sorted(r["pair_id"] for r in rows)


def test_resume_through_a_symbolic_link_rewrites_its_target_and_keeps_the_link(tmp_path, capsys):
    """Item 5: --resume through a symlinked -o rewrites the link's target (in the target's
    folder) and leaves the link a link; no records land in the link's folder."""
    rows = synthetic_pairs(2, 2)
    src = write_jsonl(tmp_path / "pairs.jsonl", rows)
    (tmp_path / "real").mkdir()
    (tmp_path / "links").mkdir()
    target = tmp_path / "real" / "records.jsonl"
    link = tmp_path / "links" / "out.jsonl"
    link.symlink_to(target)
    with StubServer() as server:
        assert evaluate_cli(server, src, link, tmp_path, "--limit", "2") == 0
        with target.open("a", encoding="utf-8") as handle:
            handle.write('{"torn": ')  # an interrupted run's last line
        assert evaluate_cli(server, src, link, tmp_path, "--resume") == 0
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert os.listdir(tmp_path / "links") == ["out.jsonl"]
    assert sorted(os.listdir(tmp_path / "real")) == ["records.jsonl"]  # no temporary file left
    assert sorted(r.pair_id for r in read_records(target)) == sorted(r["pair_id"] for r in rows)
    assert target.stat().st_mode & 0o777 == 0o600


def test_resume_refuses_a_file_with_a_record_of_a_newer_version_and_keeps_it(tmp_path, scored, capsys):
    """Item 13: --resume never drops a record of a newer schema version: it is refused,
    naming the file, the line and the version, and the file keeps every byte."""
    src = write_jsonl(tmp_path / "pairs.jsonl", synthetic_pairs(2, 2))
    newer = json.loads(scored[1].to_json()) | {"schema_version": 99}
    out = write_records(tmp_path / "records.jsonl", [scored[0]], json.dumps(newer))
    before = out.read_bytes()
    with StubServer() as server:
        assert evaluate_cli(server, src, out, tmp_path, "--resume") == 2
        assert server.chat_requests() == []
    line = one_error_line(capsys.readouterr().err)
    assert f"{out}: line 2" in line and "schema_version 99" in line and "newer" in line
    assert out.read_bytes() == before
