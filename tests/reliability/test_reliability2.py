"""Issue 27, "Reliability and security, round 2", and the pre-flight's context (issue 26, 5c).

Judge-side items run against the real loopback fake server (radmatch_audit.testing.fake_server);
file items use real files, hard links, a FIFO and devices (/dev/null, /dev/full); the
dashboard item is checked in headless Chromium. Each test names the issue item it covers.
"""

from __future__ import annotations

import csv
import dataclasses
import errno
import io
import json
import os
import stat
import sys
import threading
from pathlib import Path

import pytest

from radmatch_audit import Evaluator, PairInput
from radmatch_audit.cli import main
from radmatch_audit.judges.base import JudgeUnavailable
from radmatch_audit.judges.openai_compat import OpenAICompatibleJudge
from radmatch_audit.files.record_io import BadLine, iter_lines, read_records
from radmatch_audit.core.records import Record
from radmatch_audit.core.schemas import SERVER_LIMITS
from radmatch_audit.testing.fake_server import StubServer

sys.path.insert(0, str(Path(__file__).parent))
from test_reliability import synthetic_pairs, write_jsonl  # noqa: E402

RADPREF = Path(__file__).parents[1] / "data" / "radpref"
MAX_TOKENS = {"extract": 2048, "match": 1024, "grade": 1024}


# ---------------------------------------------------------------------- helpers


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


@pytest.fixture(scope="module")
def scored(tmp_path_factory) -> list[Record]:
    """Records of 12 pairs in 6 studies, scored through the fake server."""
    tmp = tmp_path_factory.mktemp("scored")
    with StubServer() as server, evaluator(server, tmp) as ev:
        records = ev.evaluate(pair_inputs(6, 2))
    assert all(r.scores is not None for r in records)
    return records


# ---------------------------------------------------------------------- 1 redirects


def test_a_redirect_is_never_followed_and_names_its_location(tmp_path):
    """Item 1: a 307 to another loopback server fails the pair (no retry) naming the
    Location; the other server never sees the report text. The pre-flight too."""
    with StubServer() as elsewhere:
        target = elsewhere.base_url + "/chat/completions"
        with StubServer(fault_rate=1.0, fault_kinds=(f"redirect:{target}",)) as server:
            with evaluator(server, tmp_path) as ev:
                records = ev.evaluate(pair_inputs(1, 1))
            assert records[0].failed and records[0].scores is None
            assert "HTTP 307" in records[0].error and target in records[0].error
            assert records[0].failure.attempts == 1  # not retried
        with StubServer(redirect=elsewhere.base_url + "/models") as server:
            with evaluator(server, tmp_path) as ev, pytest.raises(JudgeUnavailable, match="307"):
                ev.check()
        assert elsewhere.requests == []


# ---------------------------------------------------------------------- 2, 3 same file


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


# ---------------------------------------------------------------------- 4 resume


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


# ---------------------------------------------------------------------- 5 identity, 26.5c context


def test_the_loaded_model_and_context_are_recorded_and_key_the_cache(tmp_path):
    """Item 5: vLLM's `root` and `max_model_len` reach record.judge and the cache key: a
    second server of the same served name with other weights gets its own calls."""
    with StubServer(root="org/model-a", max_model_len=65536) as a:
        with evaluator(a, tmp_path) as ev:
            ev.check()
            first = ev.evaluate(pair_inputs(1, 1))
    assert first[0].judge.loaded_model == "org/model-a" and first[0].judge.max_model_len == 65536
    assert first[0].scores is not None
    with StubServer(root="org/model-b", max_model_len=65536) as b:
        with evaluator(b, tmp_path) as ev:  # the same answer cache
            ev.check()
            second = ev.evaluate(pair_inputs(1, 1))
        assert len(b.chat_requests()) > 0  # not answered from model a's cache entries
    assert second[0].judge.loaded_model == "org/model-b"
    assert second[0].usage.cached is False


def test_an_answer_from_another_model_fails_its_pair_with_the_reason(tmp_path):
    with StubServer(root="org/model-a", fault_rate=1.0, fault_kinds=("answer_model:org/model-z",)) as server:
        with evaluator(server, tmp_path, cache="none") as ev:
            ev.check()
            record = ev.evaluate(pair_inputs(1, 1))[0]
    assert record.scores is None and "org/model-z" in record.error and "org/model-a" in record.error


def test_a_small_served_context_fails_with_its_reason_never_a_server_4xx(tmp_path):
    """Issue 26 5c: max_model_len 4096 is read by the pre-flight; a call that cannot fit
    fails with the context reason before it is sent."""
    long_report = "FINDINGS: " + " ".join(f"A {i} mm nodule in segment {i}." for i in range(400))
    pair = PairInput(reference=long_report, candidate="FINDINGS: Clear lungs.", pair_id="long")
    with StubServer(max_model_len=4096) as server:
        with evaluator(server, tmp_path) as ev:
            ev.check()
            record = ev.evaluate([pair])[0]
        statuses = [r.get("status") for r in server.requests if r["path"].endswith("/chat/completions")]
    assert record.scores is None and "context of 4096" in record.error, record.error
    assert 400 not in statuses and statuses == []


def test_exemplars_are_dropped_to_fit_the_served_context(tmp_path):
    """Issue 26 5c: a context that holds the instructions but not every exemplar: the
    record says how many were sent; the server never answers 400."""
    from radmatch_audit.judges.base import estimate_tokens
    from radmatch_audit.stages import build_messages, stage_prompt

    user = {"report": "FINDINGS: " + "Small left pleural effusion. " * 20, "indication": None}
    bare_messages = build_messages("extract", "chest_xray", user, 0)
    with StubServer(max_model_len=10**6) as server, evaluator(server, tmp_path) as ev:
        ev.check()  # the estimate learns the server's characters per token (POST /tokenize)
        measured = ev.judge.count_tokens(bare_messages)
        assert server.requests[-1]["path"] == "/tokenize"
    assert measured < estimate_tokens(bare_messages)  # nearer the server's count
    bare = measured + MAX_TOKENS["extract"]
    available = stage_prompt("extract", "chest_xray").exemplars
    assert available > 0
    pair = PairInput(reference=user["report"], candidate="FINDINGS: Clear lungs.", pair_id="p")
    with StubServer(max_model_len=bare + 50) as server:
        with evaluator(server, tmp_path) as ev:
            ev.check()
            record = ev.evaluate([pair])[0]
        statuses = {r.get("status") for r in server.requests if r["path"].endswith("/chat/completions")}
    assert record.judge.max_model_len == bare + 50
    assert record.judge.exemplars_used["extract"] < available
    assert 400 not in statuses


# ---------------------------------------------------------------------- 6 non-finite numbers


def test_a_non_finite_measurement_is_an_invalid_answer_retried_then_failed(tmp_path):
    with StubServer(fault_rate=1.0, fault_kinds=("nonfinite",)) as server:
        with evaluator(server, tmp_path, cache="none") as ev:
            record = ev.evaluate(pair_inputs(1, 1))[0]
    assert record.scores is None and record.failure.stage == "extract"
    assert "finite" in record.error and record.failure.attempts == 2


def test_readers_name_a_line_with_nan_and_skip_it(tmp_path, scored, capsys):
    good = scored[0].to_json()
    nan = scored[1].to_json().replace('"total":', '"total":NaN,"was":', 1)
    inf = scored[2].to_json().replace('"total":', '"total":1e999,"was":', 1)
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join([good, nan, inf]) + "\n", encoding="utf-8")
    items = [item for _, item in iter_lines(path)]
    assert [isinstance(i, BadLine) for i in items] == [False, True, True]
    assert "finite" in items[1].message
    assert main(["summary", str(path), "--json"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["n_pairs"] == 1 and f"{path}:2:" in captured.err
    assert main(["dashboard", str(path), "-o", str(tmp_path / "page.html")]) == 0
    with pytest.raises(ValueError, match="finite"):
        Record.model_validate({"pair_id": "x", "reference": "a", "candidate": "b",
                               "timings_s": {"total": float("nan")}})


def test_agreement_counts_a_nan_baseline_count_as_failed(tmp_path):
    from radmatch_audit.agreement.methods import read_method

    lines = [{"record_type": "baseline", "method": "count", "pair_id": "a", "errors": 2},
             {"record_type": "baseline", "method": "count", "pair_id": "b", "errors": float("nan")},
             {"record_type": "baseline", "method": "count", "pair_id": "c", "errors": float("inf")}]
    path = tmp_path / "baseline.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    method = read_method(str(path))
    assert method.errors == {"a": 2.0} and method.failed == 2


# ---------------------------------------------------------------------- 8, 9 bad lines


def test_a_lone_surrogate_row_is_a_failed_record_naming_its_line(tmp_path, scored, capsys):
    rows = synthetic_pairs(1, 3)
    src = tmp_path / "pairs.jsonl"
    lines = [json.dumps(r) for r in rows]
    lines[1] = lines[1].replace("Drafted", "\\ud800Drafted")
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "records.jsonl"
    with StubServer() as server:
        assert evaluate_cli(server, src, out, tmp_path) == 1
    records = {r.pair_id: r for r in read_records(out)}
    assert len(records) == 3
    bad = records["r0-c1"]
    assert bad.failure.stage == "input" and "line 2" in bad.error and "surrogate" in bad.error
    assert records["r0-c0"].scores is not None and records["r0-c2"].scores is not None
    # a records file holding such a record: recompute and dashboard name it and go on
    broken = write_records(tmp_path / "broken.jsonl", scored[:2])
    broken.write_text(broken.read_text().replace('"candidate":"', '"candidate":"\\udc00', 1))
    capsys.readouterr()
    assert main(["recompute", str(broken), "-o", str(tmp_path / "re.jsonl")]) == 1
    assert main(["dashboard", str(broken), "-o", str(tmp_path / "page.html")]) == 0
    assert f"{broken}:1: it holds a lone surrogate" in capsys.readouterr().err


DEEP = "[" * 100_000 + "]" * 100_000


def test_a_deeply_nested_line_is_skipped_with_a_message_everywhere(tmp_path, scored, capsys):
    path = write_records(tmp_path / "records.jsonl", scored[:2], DEEP)
    assert main(["summary", str(path)]) == 1
    assert main(["recompute", str(path), "-o", str(tmp_path / "re.jsonl")]) == 1
    assert main(["dashboard", str(path), "-o", str(tmp_path / "page.html")]) == 0
    err = capsys.readouterr().err
    assert err.count("nested too deeply") >= 2 and "Traceback" not in err
    # evaluate: a nested input row is a failed record; --resume reads past a nested line
    rows = synthetic_pairs(1, 2)
    src = tmp_path / "pairs.jsonl"
    src.write_text(json.dumps(rows[0]) + "\n" + DEEP + "\n" + json.dumps(rows[1]) + "\n")
    out = tmp_path / "out.jsonl"
    with StubServer() as server:
        assert evaluate_cli(server, src, out, tmp_path) == 1
        with open(out, "a", encoding="utf-8") as handle:
            handle.write(DEEP + "\n")
        assert evaluate_cli(server, src, out, tmp_path, "--resume") == 1
    records = [item for _, item in iter_lines(out) if not isinstance(item, BadLine)]
    assert sorted(r.pair_id for r in records) == ["1", "r0-c0", "r0-c1"]
    assert "nested too deeply" in next(r for r in records if r.pair_id == "1").error


# ---------------------------------------------------------------------- 10 CSV


def test_a_long_csv_field_is_read_and_a_too_long_one_names_its_row(tmp_path, monkeypatch):
    from radmatch_audit.files import inputs

    long_report = "FINDINGS: " + "Stable appearance of the chest. " * 8000  # 256,000 characters
    path = tmp_path / "pairs.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["pair_id", "reference", "candidate"])
        writer.writerow(["a", "FINDINGS: Clear.", "FINDINGS: Clear."])
        writer.writerow(["b", long_report, "FINDINGS: Clear."])
    items = list(inputs.read_pairs(path))
    assert [type(item).__name__ for _, item in items] == ["PairInput", "PairInput"]
    assert items[1][1].reference == long_report
    monkeypatch.setattr(inputs, "CSV_FIELD_LIMIT", 1000)
    with pytest.raises(inputs.InputError, match="line 3"):
        list(inputs.read_pairs(path))


# ---------------------------------------------------------------------- 11, 12 output files


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


# ---------------------------------------------------------------------- 13 order


def test_the_summary_interval_does_not_depend_on_the_order_of_lines(tmp_path, scored, capsys):
    many = []  # 30 studies of 0 to 10 errors: enough spread for the draws to tell an order
    for k in range(5):
        for i, r in enumerate(scored):
            errors = (7 * (i + 12 * k)) % 11
            many.append(r.model_copy(update={
                "pair_id": f"{r.pair_id}-{k}", "study_id": f"{r.study_id}-{k}",
                "scores": dataclasses.replace(r.scores, actionable_errors=errors)}))
    intervals = []
    for name, order in (("forward", many), ("reversed", many[::-1]),
                        ("shuffled", many[1::2] + many[0::2])):
        path = write_records(tmp_path / f"{name}.jsonl", order)
        assert main(["summary", str(path), "--json"]) == 0
        intervals.append(json.dumps(json.loads(capsys.readouterr().out), sort_keys=True))
    assert intervals[0] == intervals[1] == intervals[2]


# ---------------------------------------------------------------------- 14 usage


def test_a_malformed_usage_block_is_unknown_and_fails_nothing(tmp_path):
    with StubServer(fault_rate=1.0, fault_kinds=("bad_usage",)) as server:
        with evaluator(server, tmp_path, cache="none") as ev:
            records = ev.evaluate(pair_inputs(1, 2))
    assert all(r.scores is not None for r in records), [r.error for r in records]
    assert all(r.usage.completion_tokens == 0 for r in records)
    assert all(r.usage.unreported_calls == r.usage.judge_calls > 0 for r in records)


# ---------------------------------------------------------------------- 15 bidi in the dashboard


BIDI_CANDIDATE = "FINDINGS: Effusion on the \u202etfel\u202c side. Heart normal."


def bidi_page(tmp_path, scored) -> Path:
    record = scored[0].model_copy(update={"pair_id": "bidi-1", "candidate": BIDI_CANDIDATE})
    src = write_records(tmp_path / "records.jsonl", [record])
    out = tmp_path / "page.html"
    assert main(["dashboard", str(src), "-o", str(out)]) == 0
    return out


def test_bidi_controls_flag_the_pair(tmp_path, scored):
    from radmatch_audit.dashboard.view import BIDI_FLAG

    html = bidi_page(tmp_path, scored).read_text(encoding="utf-8")
    assert BIDI_FLAG in html


@pytest.mark.browser
def test_bidi_controls_are_shown_as_marks_in_chromium(tmp_path, scored):
    import test_dashboard as td

    if not (td.CHROMIUM and td.CHROMEDRIVER):
        pytest.skip("chromium/chromedriver not installed")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in td.FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'profile'}")
    options.binary_location = td.CHROMIUM
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    driver = webdriver.Chrome(service=Service(td.CHROMEDRIVER), options=options)
    try:
        td.open_page(driver, bidi_page(tmp_path, scored))
        driver.find_element("css selector", "#pairs-body tr a").click()
        td.wait_for_view(driver, "pair", "bidi-1")
        shown = driver.execute_script(
            "return {cand: document.querySelector('[data-side=candidate]').textContent,"
            " body: document.body.innerText}")
    finally:
        driver.quit()
    assert "\u27e8U+202E\u27e9tfel\u27e8U+202C\u27e9" in shown["cand"]
    assert not any(ch in shown["body"] for ch in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
    assert "bidirectional control characters" in shown["body"]


# ---------------------------------------------------------------------- 16 RadEvalExpert


def test_radevalexpert_studies_are_image_sets(tmp_path):
    from radmatch_audit.agreement.radevalexpert import COLUMNS, load_radevalexpert

    cell = json.dumps({"significant": {"1": 1}, "insignificant": {}})
    path = tmp_path / "radevalexpert.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for annotator, kind, images in (("a", "findings", "p1/s1"), ("a", "impression", "p1/s1"),
                                        ("b", "findings", "p1/s1"), ("a", "findings", "p2/s9")):
            writer.writerow({"annotator": annotator, "type": kind, "ground_truth": "Clear.",
                             "images_path": images, **{f"prediction{k}": "Clear." for k in (1, 2, 3)},
                             **{f"annotation{k}": cell for k in (1, 2, 3)}})
    loaded = load_radevalexpert(path)
    studies = {case.study_id for case in loaded.cases.values()}
    assert len(studies) == 2
    assert {row["study_id"] for row in loaded.rows} == studies
