"""Report text never reaches log output, the screen or an error record; bidirectional
controls in a report flag its pair and show as marks on the dashboard.
"""

from __future__ import annotations

import json
import logging

import pytest
from reliability_helpers import (
    MARKER,
    bidi_page,
    evaluate_in_process,
    marker_pairs,
    records_of,
    run_cli,
    scored_records,
    synthetic_pairs,
    write_jsonl,
)

from radmatch_audit.core.records import Record
from radmatch_audit.testing.fake_server import StubServer


@pytest.fixture(scope="module")
def scored(tmp_path_factory) -> list[Record]:
    """Records of 12 pairs in 6 studies, scored through the fake server."""
    return scored_records(tmp_path_factory, 6, 2)


def test_warning_log_output_never_holds_report_text_when_pairs_fail(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    with StubServer(fault_rate=1.0, fault_kinds=("500", "garbage", "invalid", "truncated_json"),
                    retry_after=0.01) as server:
        records = evaluate_in_process(server, marker_pairs(), retries=2)
    assert all(r.failed for r in records)
    warnings = [rec for rec in caplog.records if rec.levelno >= logging.WARNING]
    assert len(warnings) >= len(records)  # each failed pair was logged ...
    text = caplog.text + "\n".join(rec.getMessage() for rec in warnings)
    for record in records:
        assert record.pair_id in text
    for fragment in (MARKER, "Zebra", "quokka", "Reported for study", "Drafted by system"):
        assert fragment not in text  # ... without its report text


def test_cli_stderr_never_holds_report_text_when_pairs_fail(tmp_path):
    rows = synthetic_pairs(2, 2, marker=MARKER)
    src, out = write_jsonl(tmp_path / "pairs.jsonl", rows), tmp_path / "records.jsonl"
    with StubServer(fault_rate=1.0, fault_kinds=("500", "garbage")) as server:
        proc, _ = run_cli(server.base_url, src, out, "--no-cache", "--retries", "1")
    assert proc.returncode == 1
    assert "failed" in proc.stderr
    assert "quokka" not in proc.stderr and "quokka" not in proc.stdout
    assert all(r.failed and "quokka" in r.reference for r in records_of(out))  # kept in the file


def test_a_server_error_quoting_the_request_reaches_neither_the_screen_nor_a_record(tmp_path):
    """A judge server (or a gateway) whose error message quotes the request."""
    rows = synthetic_pairs(1, 2, marker=MARKER)
    src, out = write_jsonl(tmp_path / "pairs.jsonl", rows), tmp_path / "records.jsonl"
    with StubServer(fault_rate=1.0, fault_kinds=("echo",)) as server:
        proc, _ = run_cli(server.base_url, src, out, "--no-cache", "--retries", "1")
        assert any(r.get("status") == 400 for r in server.requests)
    assert proc.returncode == 1
    assert "quokka" not in proc.stderr and "quokka" not in proc.stdout
    records = records_of(out)
    assert records and all(r.failed and "left out" in r.error for r in records)
    for line in out.read_text().splitlines():  # the report's own fields hold it, nothing else
        record = json.loads(line)
        for field in ("reference", "candidate", "indication"):
            record.pop(field, None)
        assert "quokka" not in json.dumps(record)


def test_bidi_controls_flag_the_pair(tmp_path, scored):
    from radmatch_audit.dashboard.view import BIDI_FLAG

    html = bidi_page(tmp_path, scored).read_text(encoding="utf-8")
    assert BIDI_FLAG in html


@pytest.mark.browser
def test_bidi_controls_are_shown_as_marks_in_chromium(tmp_path, scored):
    import dashboard_fixtures as td

    if not (td.CHROMIUM and td.CHROMEDRIVER):
        pytest.skip("chromium/chromedriver not installed")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in td.CHROME_FLAGS:
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
