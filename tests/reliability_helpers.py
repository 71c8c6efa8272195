"""What the reliability tests (tests/reliability/) share: synthetic pairs, running
`radmatch-audit evaluate` in a subprocess or in process against the loopback fake server
(radmatch_audit.testing.fake_server), reading records back, and the calls a record
needed.
"""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from radmatch_audit import Evaluator, JudgeConfig, PairInput
from radmatch_audit.cli import main
from radmatch_audit.core.records import Record
from radmatch_audit.core.schemas import SERVER_LIMITS
from radmatch_audit.files.record_io import read_records
from radmatch_audit.judges.openai_compat import OpenAICompatibleJudge
from radmatch_audit.scoring.results import as_dict
from radmatch_audit.stages import finding_view, rows_to_grade
from radmatch_audit.testing.fake_server import StubServer
from radmatch_audit.testing.reports import INDICATIONS, SENTENCES

SECRET = "sk-radmatch-test-7f3c9a1e5b2d4c6f8a0b"


MARKER = "Zebra-striped quokka artefact overlies the left apex."  # never to reach a log


TITLES = {"extract": "ExtractionAnswer", "match": "MatchingAnswer", "grade": "GradingAnswer"}


ALL_FAULT_KINDS = ("500", "503", "429", "reset", "truncated", "truncated_json", "invalid",
                   "garbage", "hang")


CAUSE = re.compile(
    r"HTTP (429|500|503) from the judge server"
    r"|the connection to the judge server failed"
    r"|no answer from the judge server within"
    r"|HTTP 200 answer was cut off"
    r"|answer is not valid JSON|answer does not fit its schema"
    r"|does not have one error list per matched row"
)


def synthetic_pairs(n_refs: int, n_cands: int = 4, *, marker: str | None = None) -> list[dict]:
    """`n_refs` references x `n_cands` candidates from SENTENCES; unique pair_ids.

    Three references in four have an INDICATION header (read by code, sent to every stage);
    each candidate shares some sentences with its reference and has one of its own.
    `marker`, when given, is a sentence put into every reference.
    """
    rows = []
    n = len(SENTENCES)
    for r in range(n_refs):
        body = " ".join(SENTENCES[(r * 3 + k) % n] for k in range(5))
        if marker:
            body += " " + marker
        header = f"INDICATION: {INDICATIONS[r % len(INDICATIONS)]}\n" if r % 4 else ""
        reference = f"{header}FINDINGS: {body} Reported for study {r}."
        for c in range(n_cands):
            shared = " ".join(SENTENCES[(r * 3 + c + k) % n] for k in range(3))
            candidate = f"FINDINGS: {shared} Drafted by system {c} for study {r}."
            rows.append({"pair_id": f"r{r}-c{c}", "study_id": f"s{r}",
                         "reference": reference, "candidate": candidate})
    return rows


def write_jsonl(path: Path, rows: Iterable[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def cli_command(src: Path, out: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "radmatch_audit.cli", "evaluate", str(src), "-o", str(out), "-q", "--json",
            *args]


def cli_env(base_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RADMATCH_")}
    return {**env, "RADMATCH_BASE_URL": base_url, "RADMATCH_MODEL": "stub-judge", **extra}


def run_cli(base_url: str, src: Path, out: Path, *args: str, timeout: float = 120,
            env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, float]:
    """Run `radmatch-audit evaluate`; the finished process and its wall time in seconds."""
    started = time.perf_counter()
    proc = subprocess.run(cli_command(src, out, *args), check=False, capture_output=True,
                          text=True, timeout=timeout, env=env or cli_env(base_url))
    return proc, time.perf_counter() - started


def records_of(path: Path) -> list[Record]:
    return list(read_records(path))


def one_per_pair(records: list[Record], pair_ids: Iterable[str]) -> dict[str, Record]:
    """The records by pair_id, after asserting there is exactly one per input pair."""
    counts = Counter(r.pair_id for r in records)
    repeated = {pair_id: n for pair_id, n in counts.items() if n > 1}
    assert not repeated, f"pairs with more than one record: {repeated}"
    assert set(counts) == set(pair_ids), (
        f"missing: {sorted(set(pair_ids) - set(counts))[:10]}, "
        f"unexpected: {sorted(set(counts) - set(pair_ids))[:10]}")
    return {r.pair_id: r for r in records}


def scores_by_pair(records: dict[str, Record]) -> dict[str, Any]:
    return {pid: as_dict(r.scores) if r.scores else None for pid, r in records.items()}


def records_of_lenient(path: Path) -> list[Record]:
    """The complete records of a file an interrupted run left (a torn last line skipped)."""
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1].decode("utf-8")
    return [Record.model_validate_json(line) for line in complete.splitlines() if line.strip()]


def evaluate_in_process(server: StubServer, pairs: list[PairInput], *, retries: int,
                        **config: Any) -> list[Record]:
    """The Python API as a user calls it, with quick retries (backoff 0.01 s)."""
    config = JudgeConfig.from_env(env={}, base_url=server.base_url, model="stub-judge", cache=False,
                                  timeout_s=5.0, **config)
    with Evaluator(config.build_judge(), concurrency=4, retries=retries, backoff_s=0.01) as evaluator:
        return evaluator.evaluate(pairs)


def marker_pairs(n: int = 4) -> list[PairInput]:
    return [PairInput(reference=row["reference"], candidate=row["candidate"], pair_id=row["pair_id"])
            for row in synthetic_pairs(n, 1, marker=MARKER)]


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def line_count(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def free_port() -> socket.socket:
    """A socket bound to a loopback port and not listening: connecting to it is refused."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


def call_key(title: str, user_input: Any) -> tuple[str, str]:
    """A judge call as (stage schema title, canonical JSON of the pair's own user message).

    The rest of a request (the stage's static prefix, schema, max_tokens) is the same
    for every call of one stage, so this names the exact call.
    """
    return title, json.dumps(user_input, sort_keys=True)


def logged_key(body: dict[str, Any]) -> tuple[str, str]:
    title = body["structured_outputs"]["json"]["title"]
    return call_key(title, json.loads(body["messages"][-1]["content"]))


def needed_calls(record: Record) -> list[tuple[str, str]]:
    """Every judge call a scored record's stored stages rest on, rebuilt from the record.

    extract: each non-empty report with the indication found; match: both finding lists
    as the match stage shows them, when both are non-empty; grade: the rows of the
    repaired matching (generic rows left out), when there are any.
    """
    stages = record.stages
    indication = stages.indication
    calls = []
    for report in (record.reference, record.candidate):
        if report.strip():
            calls.append(call_key(TITLES["extract"], {"report": report, "indication": indication}))
    reference, candidate = stages.reference_findings or [], stages.candidate_findings or []
    if reference and candidate:
        calls.append(call_key(TITLES["match"], {
            "indication": indication,
            "gt_findings": [finding_view(f) for f in reference],
            "pred_findings": [finding_view(f) for f in candidate],
        }))
    rows = rows_to_grade(stages.matching, reference, candidate)
    if rows:
        findings = {f.id: f for f in reference + candidate}
        calls.append(call_key(TITLES["grade"], {
            "indication": indication,
            "pairs": [{"pred_finding": finding_view(findings[p]), "gt_finding": finding_view(findings[g])}
                      for p, g in rows],
        }))
    return calls


RADPREF = Path(__file__).parent / "data" / "radpref"


MAX_TOKENS = {"extract": 2048, "match": 1024, "grade": 1024}


def evaluator(server: StubServer, tmp_path: Path, *, cache: str = "cache", retries: int = 2,
              concurrency: int = 4) -> Evaluator:
    judge = OpenAICompatibleJudge(base_url=server.base_url, model="stub-judge", timeout_s=10.0)
    return Evaluator(judge, concurrency=concurrency, cache_dir=tmp_path / cache, limits=SERVER_LIMITS,
                     max_tokens=MAX_TOKENS, retries=retries, backoff_s=0.01)


def pair_inputs(n_refs: int = 2, n_cands: int = 2) -> list[PairInput]:
    return [PairInput(reference=r["reference"], candidate=r["candidate"], pair_id=r["pair_id"],
                      study_id=r["study_id"]) for r in synthetic_pairs(n_refs, n_cands)]


def evaluate_cli(server: StubServer, src: Path, out: Path, tmp_path: Path, *extra: str) -> int:
    return main(["evaluate", str(src), "-o", str(out), "-q", "--json", "--base-url", server.base_url,
                 "--model", "stub-judge", "--cache-dir", str(tmp_path / "cache"), *extra])


def write_records(path: Path, records: list[Record], *extra_lines: str) -> Path:
    lines = [r.to_json() for r in records] + list(extra_lines)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


DEEP = "[" * 100_000 + "]" * 100_000


BIDI_CANDIDATE = "FINDINGS: Effusion on the \u202etfel\u202c side. Heart normal."


def bidi_page(tmp_path, scored) -> Path:
    record = scored[0].model_copy(update={"pair_id": "bidi-1", "candidate": BIDI_CANDIDATE})
    src = write_records(tmp_path / "records.jsonl", [record])
    out = tmp_path / "page.html"
    assert main(["dashboard", str(src), "-o", str(out)]) == 0
    return out


def one_error_line(err: str) -> str:
    """The command's error line, after asserting it is the only line and no traceback."""
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("radmatch-audit: error: ")
    return lines[0]


def wait_for_output(path: Path, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the first run never opened its records file"
        time.sleep(0.05)


def malformed_line(record: Record, change: str) -> str:
    data = json.loads(record.to_json()) | {"schema_version": 2}
    if change == "samples 5":
        data.update(samples=5)
    elif change == "samples true":
        data.update(samples=True)
    elif change == "record_type list":
        data.update(record_type=["baseline"])
    else:
        data.update(record_type={"kind": "baseline"})
    return json.dumps(data)


MALFORMED = ["samples 5", "samples true", "record_type list", "record_type object"]


def saved_dataset(folder: Path, rows: list[dict]) -> Path:
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list(rows).save_to_disk(str(folder))
    return folder


def scored_records(tmp_path_factory, n_refs: int, n_cands: int) -> list[Record]:
    """Records of n_refs * n_cands pairs in n_refs studies, scored through the fake server."""
    tmp = tmp_path_factory.mktemp("scored")
    with StubServer() as server, evaluator(server, tmp) as ev:
        records = ev.evaluate(pair_inputs(n_refs, n_cands))
    assert all(r.scores is not None for r in records)
    return records
