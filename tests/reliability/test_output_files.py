"""Where a command writes: never over its input (under any name, a hard link, or inside a
saved dataset), and a failed or full device is a clear error that says --resume
continues.
"""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path

import pytest
from reliability_helpers import (
    RADPREF,
    evaluate_cli,
    one_error_line,
    saved_dataset,
    scored_records,
    synthetic_pairs,
    write_jsonl,
    write_records,
)

from radmatch_audit.cli import main
from radmatch_audit.core.records import Record
from radmatch_audit.testing.fake_server import StubServer


@pytest.fixture(scope="module")
def scored(tmp_path_factory) -> list[Record]:
    """Records of 12 pairs in 6 studies, scored through the fake server."""
    return scored_records(tmp_path_factory, 6, 2)


def test_dashboard_and_baseline_refuse_to_write_over_their_input(tmp_path, scored, capsys):
    """Item 2: `dashboard R -o R`, `dashboard R --compare B -o B`, `baseline P -o P`."""
    records = write_records(tmp_path / "r.jsonl", scored)
    other = write_records(tmp_path / "b.jsonl", scored[:3])
    pairs = write_jsonl(tmp_path / "p.jsonl", synthetic_pairs(1, 2))
    before = {p: p.read_bytes() for p in (records, other, pairs)}
    assert main(["dashboard", str(records), "-o", str(records)]) == 2
    assert main(["dashboard", str(records), "--compare", str(other), "-o", str(other)]) == 2
    assert main(["baseline", str(pairs), "--method", "count", "-o", str(pairs),
                 "--base-url", "http://127.0.0.1:9/v1"]) == 2
    assert "is the input file" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in before} == before


def test_a_hard_link_is_the_same_file_for_every_command_that_writes(tmp_path, scored, capsys):
    """Item 3: files are compared by device and inode, not by path string."""
    records = write_records(tmp_path / "in.jsonl", scored)
    pairs = write_jsonl(tmp_path / "pairs.jsonl", synthetic_pairs(1, 2))
    radpref = tmp_path / "radpref"
    radpref.mkdir()
    for f in RADPREF.iterdir():
        (radpref / f.name).write_bytes(f.read_bytes())
    links = {}
    for name, target in (("rec", records), ("pairs", pairs), ("ann", radpref / "user_1.json")):
        links[name] = tmp_path / f"link-{name}"
        os.link(target, links[name])
    before = {p: p.read_bytes() for p in (records, pairs, radpref / "user_1.json")}
    assert main(["recompute", str(records), "-o", str(links["rec"])]) == 2
    assert main(["dashboard", str(records), "-o", str(links["rec"])]) == 2
    assert main(["evaluate", str(pairs), "-o", str(links["pairs"]), "--base-url", "http://127.0.0.1:9/v1"]) == 2
    assert main(["baseline", str(pairs), "--method", "count", "-o", str(links["pairs"]),
                 "--base-url", "http://127.0.0.1:9/v1"]) == 2
    assert main(["agreement", "--annotations", str(radpref), "--emit-pairs", str(links["ann"])]) == 2
    err = capsys.readouterr().err
    assert err.count("radmatch-audit: error:") == 5 and "Traceback" not in err
    assert {p: p.read_bytes() for p in before} == before


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EFBIG])
def test_a_failed_records_write_says_what_failed_and_that_resume_continues(tmp_path, monkeypatch, capsys, code):
    from radmatch_audit.files import record_io

    class Full(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError(code, os.strerror(code))

    monkeypatch.setattr(record_io, "open_private", lambda path, mode: Full())
    src = write_jsonl(tmp_path / "pairs.jsonl", synthetic_pairs(1, 2))
    with StubServer() as server:
        assert evaluate_cli(server, src, tmp_path / "out.jsonl", tmp_path) == 2
    err = capsys.readouterr().err
    assert os.strerror(code) in err and "--resume" in err and "Traceback" not in err


def test_a_full_device_is_a_clear_error(tmp_path, capsys):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    mode = os.stat("/dev/full").st_mode
    src = write_jsonl(tmp_path / "pairs.jsonl", synthetic_pairs(1, 2))
    with StubServer() as server:
        assert evaluate_cli(server, src, Path("/dev/full"), tmp_path) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert os.stat("/dev/full").st_mode == mode


@pytest.mark.parametrize("command", ["evaluate", "baseline"])
def test_an_output_inside_the_input_dataset_folder_is_refused(tmp_path, capsys, command):
    """Item 6: `-o` inside a dataset folder given as input (its own data file, with
    --force, or a new file there) is refused, for evaluate and baseline."""
    ds = saved_dataset(tmp_path / "ds", synthetic_pairs(1, 2))
    data = next(ds.glob("*.arrow"))
    before = data.read_bytes()
    capsys.readouterr()  # the progress bar of saving it
    with StubServer() as server:
        for out in (data, ds / "records.jsonl", tmp_path / "ds" / ".." / "ds" / "r.jsonl"):
            args = [command, str(ds), "-o", str(out), "--force", "--base-url", server.base_url,
                    "--model", "stub-judge", "--cache-dir", str(tmp_path / "cache")]
            args += ["--method", "count"] if command == "baseline" else ["-q"]
            assert main(args) == 2
            line = one_error_line(capsys.readouterr().err)
            assert "inside the input folder" in line
        assert server.chat_requests() == []
    assert data.read_bytes() == before
    assert not (ds / "records.jsonl").exists() and not (ds / "r.jsonl").exists()
