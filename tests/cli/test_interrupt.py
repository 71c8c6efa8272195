"""Ctrl-C and SIGTERM during `radmatch-audit evaluate` (issue 30 item 5): a real process,
stopped within a generous bound of the 2 s goal, printing only the resume hint, exit
130 or 143, and every record line it wrote complete (so `--resume` goes on).

Two slow judges: the fake server with a delay (HTTP calls in flight), and a judge whose
calls run in a thread that does not stop (as an in-process model's prefill, which took
23.5 s to end on Ctrl-C).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from radmatch_audit.testing.fake_server import StubServer

REPO = Path(__file__).resolve().parents[2]
BOUND_S = 6.0  # the goal is 2 s; the machine is shared and busy

# `radmatch-audit evaluate` with a judge whose every call blocks its thread for 30 s
THREAD_JUDGE = textwrap.dedent("""
    import asyncio, sys, threading, time
    from pathlib import Path
    from radmatch_audit.judges.config import JudgeConfig

    class StuckJudge:
        backend, model, context_window = "transformers", "stuck-judge", 8192

        async def generate(self, messages, schema, *, max_tokens):
            Path(sys.argv[1]).touch()  # the test sends its signal once a call runs
            work = asyncio.ensure_future(asyncio.to_thread(time.sleep, 30))
            try:
                return await asyncio.shield(work)
            except asyncio.CancelledError:
                await asyncio.wait([work])  # as the in-process judge: waits for its thread
                raise

        def count_tokens(self, messages):
            return 100

        async def check(self):
            pass

        async def aclose(self):
            pass

    JudgeConfig.build_judge = lambda self: StuckJudge()
    from radmatch_audit.cli import main
    sys.exit(main(sys.argv[2:]))
""")


def write_pairs(path: Path, n: int = 4) -> Path:
    path.write_text("".join(
        json.dumps({"pair_id": str(i), "reference": f"Small right pleural effusion, study {i}.",
                    "candidate": "No pleural effusion."}) + "\n" for i in range(n)))
    return path


def stop(proc: subprocess.Popen, signum: int) -> tuple[float, str]:
    started = time.perf_counter()
    proc.send_signal(signum)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return time.perf_counter() - started, err


def wait_for(predicate, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 120
    while not predicate():
        assert proc.poll() is None, f"evaluate ended before {what}: {proc.communicate()[1][-2000:]}"
        assert time.monotonic() < deadline, f"no {what} in 120 s"
        time.sleep(0.05)


def check_stopped(elapsed: float, err: str, proc: subprocess.Popen, signum: int, out: Path) -> None:
    assert elapsed < BOUND_S, f"took {elapsed:.1f} s to stop"
    assert proc.returncode == 128 + signum
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines == [f"interrupted; records so far are in {out}: add --resume to go on"], err
    for line in out.read_text().splitlines(keepends=True):  # whatever was written is whole
        assert line.endswith("\n") and json.loads(line)["pair_id"]


def env(tmp_path: Path) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith("RADMATCH_")}
    return {**keep, "RADMATCH_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(REPO / "inference")}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_a_run_against_a_slow_server_at_once(tmp_path, signum):
    pairs, out = write_pairs(tmp_path / "pairs.jsonl"), tmp_path / "records.jsonl"
    with StubServer(latency_s=20.0) as server:
        proc = subprocess.Popen(
            [sys.executable, "-m", "radmatch_audit.cli", "evaluate", str(pairs), "-o", str(out),
             "--base-url", server.base_url, "--model", "stub-judge", "--no-cache", "-q"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(tmp_path))
        wait_for(lambda: any(r["path"].endswith("/chat/completions") for r in server.requests),
                 proc, "judge call")
        elapsed, err = stop(proc, signum)
    check_stopped(elapsed, err, proc, signum, out)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_a_judge_whose_thread_does_not_stop(tmp_path, signum):
    pairs, out, started = write_pairs(tmp_path / "pairs.jsonl"), tmp_path / "records.jsonl", tmp_path / "started"
    proc = subprocess.Popen(
        [sys.executable, "-c", THREAD_JUDGE, str(started), "evaluate", str(pairs), "-o", str(out),
         "--no-cache", "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(tmp_path))
    wait_for(started.exists, proc, "judge call")
    elapsed, err = stop(proc, signum)
    # the embedded-judge note comes first when the backend is transformers: drop it
    check_stopped(elapsed, "\n".join(l for l in err.splitlines() if not l.startswith("note:")),
                  proc, signum, out)


def test_after_a_signal_resume_finishes_the_run(tmp_path):
    pairs, out = write_pairs(tmp_path / "pairs.jsonl", n=6), tmp_path / "records.jsonl"
    with StubServer(latency_s={"default": 0.0, "ExtractionAnswer": 0.0}) as server:
        base = [sys.executable, "-m", "radmatch_audit.cli", "evaluate", str(pairs), "-o", str(out),
                "--base-url", server.base_url, "--model", "stub-judge", "--no-cache", "-q",
                "--concurrency", "1"]
        proc = subprocess.Popen(base, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env(tmp_path))
        wait_for(lambda: out.exists() and out.read_text().count("\n") >= 1, proc, "first record")
        elapsed, err = stop(proc, signal.SIGTERM)
        if proc.returncode == 143:
            assert "add --resume" in err
        done = subprocess.run(base + ["--resume", "--json"], capture_output=True, text=True,
                              env=env(tmp_path), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["n_pairs"] == 6
    assert sorted(json.loads(line)["pair_id"] for line in out.read_text().splitlines()) == list("012345")
