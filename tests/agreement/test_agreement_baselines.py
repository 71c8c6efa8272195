"""The single-call baselines end to end through a real loopback HTTP server, then
`radmatch-audit agreement` over their records and RadMatch's, on the shipped RadPref subset."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from radmatch_audit.stages import baselines
from radmatch_audit.cli import main
from radmatch_audit.testing import fake_server
from radmatch_audit.testing.fake_server import StubServer

RADPREF = Path(__file__).resolve().parents[1] / "data" / "radpref"  # shipped: see its README.md
_SENTENCE = re.compile(r"[^.]+\.")


def _sentences(text: str) -> set[str]:
    return {s.strip().lower() for s in _SENTENCE.findall(text)}


@pytest.fixture
def server(monkeypatch):
    """The stub server, taught the two baseline schemas: every candidate sentence that is
    not a reference sentence is one error (enumerate lists them, count counts them)."""
    toy = fake_server.toy_answer

    def answer(title, user, schema):
        if title in ("CountAnswer", "EnumerateAnswer"):
            extra = sorted(_sentences(user["candidate"]) - _sentences(user["reference"]))
            if title == "CountAnswer":
                return {"errors": min(len(extra), baselines.MAX_COUNT)}
            return {"errors": [{"description": s[:80]} for s in extra]}
        return toy(title, user, schema)

    monkeypatch.setattr(fake_server, "toy_answer", answer)
    with StubServer() as stub:
        yield stub


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_baselines_and_agreement_end_to_end(server, tmp_path, capsys):
    pairs = tmp_path / "pairs.jsonl"
    assert main(["agreement", "--annotations", str(RADPREF), "--emit-pairs", str(pairs)]) == 0
    assert pairs.stat().st_mode & 0o077 == 0  # report text: owner-only
    judge = ["--base-url", server.base_url, "--model", "stub-judge", "--no-cache"]
    outputs = {}
    for method in baselines.METHODS:
        outputs[method] = tmp_path / f"{method}.jsonl"
        assert main(["baseline", str(pairs), "--method", method, "-o", str(outputs[method]), *judge]) == 0
    radmatch = tmp_path / "radmatch.jsonl"
    assert main(["evaluate", str(pairs), "-o", str(radmatch), "-q", *judge]) == 0
    capsys.readouterr()

    count, listed = _records(outputs["count"]), _records(outputs["enumerate"])
    assert len(count) == len(listed) == 22
    by_id = {r["pair_id"]: r for r in listed}
    for record in count:
        assert record["record_type"] == "baseline" and record["method"] == "count"
        assert record["error"] is None and record["failure"] is None
        assert record["errors"] == record["answer"]["errors"]
        other = by_id[record["pair_id"]]
        assert other["errors"] == len(other["answer"]["errors"]) == record["errors"]
        assert record["judge"]["model"] == "stub-judge"
        assert record["judge"]["prompt_version"].startswith("baseline-v1-")
    # each baseline call was schema-constrained: the request carried the answer model's schema
    titles = {fake_server.schema_of(body).get("title") for body in server.chat_requests()}
    assert {"CountAnswer", "EnumerateAnswer"} <= titles

    code = main(["agreement", str(radmatch), str(outputs["count"]), str(outputs["enumerate"]),
                 "--annotations", str(RADPREF), "--resamples", "200", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    labels = [m["label"] for m in report["methods"]]
    # a RadMatch file gives two methods: its significant errors (the error adjudication's
    # count, the headline) and its actionable errors (the paper's RadMatch count)
    assert labels == ["radmatch-significant (stub-judge)", "radmatch (stub-judge)",
                      "count (stub-judge)", "enumerate (stub-judge)"]
    assert all(m["scored"] == 22 and m["not_annotated"] == 0 for m in report["methods"])
    significant = next(e for e in report["endpoints"] if e["key"] == "significant")
    for label in labels:
        result = significant["results"][label]
        assert result["tau_b"]["n"] == 22 and -1 <= result["tau_b"]["value"] <= 1
        assert result["blocked_tau_b"]["blocks"] <= 11
    # the two baselines answered the same counts, so they agree exactly
    assert significant["results"][labels[2]] == significant["results"][labels[3]]
    assert report["methods"][2]["preference"]["cases"] > 0

    assert main(["agreement", str(outputs["count"]), "--annotations", str(RADPREF),
                 "--resamples", "100"]) == 0
    table = capsys.readouterr().out
    # 22 pairs; marked † when its intervals rest on fewer than 10 studies (blocks)
    assert any(row.startswith("| clinically significant errors | count (stub-judge) | 22 ")
               for row in table.splitlines())


def test_a_failed_baseline_call_leaves_a_failed_record(tmp_path, capsys):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"pair_id": "p1", "reference": "A.", "candidate": "B."}) + "\n")
    out = tmp_path / "count.jsonl"
    with StubServer(faults=["503", "503", "503"]) as stub:
        code = main(["baseline", str(pairs), "--method", "count", "-o", str(out),
                     "--base-url", stub.base_url, "--model", "stub-judge", "--no-cache", "--retries", "3"])
    assert code == 1
    (record,) = _records(out)
    assert record["errors"] is None and record["failure"]["attempts"] == 3
    assert record["error"].startswith("baseline_count: HTTP 503")
    capsys.readouterr()
    assert main(["agreement", str(out), "--annotations", str(RADPREF), "--resamples", "50"]) == 0
    captured = capsys.readouterr()
    assert "every pair failed" in captured.err and "| count (stub-judge) | 0 | 1 | 0 |" in captured.out


def test_count_grammar_is_bounded_and_prompts_load():
    schema = baselines.CountAnswer.model_json_schema()
    assert schema["properties"]["errors"]["enum"][-1] == baselines.MAX_COUNT
    small = baselines.enumerate_model(8, 100).model_json_schema()
    assert json.dumps(small).count('"maxItems": 8') == 1
    for method in baselines.METHODS:
        assert baselines.load_prompt(method).startswith(f"# Baseline: {method}")
    with pytest.raises(ValueError, match="baseline method must be one of"):
        baselines.load_prompt("guess")


def test_stage_prompts_loader_is_not_confused_by_the_baselines_folder():
    from radmatch_audit.stages import load_instructions, prompt_version

    assert load_instructions("match").startswith("# Stage:")
    assert prompt_version("extract", "chest_xray").startswith("v1-")


def test_baseline_refuses_to_replace_records_without_force(server, tmp_path, capsys):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"pair_id": "a", "reference": "Small effusion.", "candidate": "No effusion."}) + "\n")
    out = tmp_path / "count.jsonl"
    run = ["baseline", str(pairs), "--method", "count", "-o", str(out),
           "--base-url", server.base_url, "--model", "stub-judge", "--no-cache"]
    assert main(run) == 0
    written = out.read_text()
    capsys.readouterr()
    assert main(run) == 2
    assert capsys.readouterr().err.strip() == (
        f"radmatch-audit: error: {out} exists and holds records: add --force to replace it")
    assert out.read_text() == written  # untouched
    assert main([*run, "--force"]) == 0
    assert len(_records(out)) == 1
