"""What a newcomer's mistakes get told (issue 30 items 6, 7, 8): the fix, before any work.

* a base URL without /v1 against a server that serves the OpenAI API only under /v1
  (vLLM) is refused at the pre-flight, naming the URL to use;
* wrong column names are refused before anything loads, naming the columns found and
  the flags that map them;
* CSV content in a .jsonl file is called CSV, not one "invalid JSON" per line.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from radmatch_audit.judges.base import JudgeUnavailable
from radmatch_audit.judges.openai_compat import OpenAICompatibleJudge
from radmatch_audit.testing.fake_server import StubServer


def preflight(base_url: str) -> None:
    async def check() -> None:
        judge = OpenAICompatibleJudge(base_url=base_url, model="stub-judge")
        try:
            await judge.check()
        finally:
            await judge.aclose()

    asyncio.run(check())


# ---------------------------------------------------------------------------- item 6


def test_a_base_url_without_v1_is_refused_naming_the_v1_url():
    with StubServer(v1_only=True) as server:
        root = server.base_url.removesuffix("/v1")
        with pytest.raises(JudgeUnavailable) as caught:
            preflight(root)
        preflight(server.base_url)  # the suggested URL passes
    message = str(caught.value)
    assert "404" in message and f"--base-url {root}/v1" in message


def test_a_server_that_lists_no_models_anywhere_still_passes():
    with StubServer(v1_only=True) as server:  # /other/models is a 404, and so is /other/v1/models
        preflight(server.base_url.removesuffix("/v1") + "/other")


# ---------------------------------------------------------------------------- items 7, 8


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_wrong_json_columns_are_refused_naming_the_columns_and_flags(tmp_path):
    from radmatch_audit.files.inputs import InputError, check_input, read_pairs

    path = write_jsonl(tmp_path / "pairs.jsonl", [
        {"ground_truth": "Small effusion.", "generated": "No effusion.", "id": str(i)} for i in range(3)])
    with pytest.raises(InputError) as caught:
        check_input(path)
    message = str(caught.value)
    assert "no column 'reference', 'candidate'" in message
    assert "columns found in its first 3 JSON lines: 'ground_truth', 'generated', 'id'" in message
    assert "--reference-column NAME and --candidate-column NAME" in message
    assert "effusion" not in message  # values are report text: never in a message
    rows = list(read_pairs(path, columns={"reference": "ground_truth", "candidate": "generated"}))
    assert [pair.reference for _, pair in rows] == ["Small effusion."] * 3


def test_a_row_missing_a_column_among_good_rows_is_still_one_row_problem(tmp_path):
    from radmatch_audit.files.inputs import RowProblem, check_input, read_pairs

    path = write_jsonl(tmp_path / "pairs.jsonl", [
        {"reference": "A.", "candidate": "B."}, {"reference": "A."}, {"reference": "C.", "candidate": "D."}])
    check_input(path)
    items = [item for _, item in read_pairs(path)]
    assert isinstance(items[1], RowProblem) and "candidate" in items[1].message
    assert not isinstance(items[0], RowProblem) and not isinstance(items[2], RowProblem)


def test_csv_content_in_a_jsonl_file_is_called_csv(tmp_path):
    from radmatch_audit.files.inputs import InputError, check_input

    path = tmp_path / "pairs.jsonl"
    path.write_text('reference,candidate\n"Small effusion.","No effusion."\n"A, b.","C."\n')
    with pytest.raises(InputError, match=r"looks like CSV, not JSON lines: its first line has 2 "
                       r"comma-separated fields \('reference', 'candidate'\).*name it \.csv"):
        check_input(path)
    headerless = tmp_path / "rows.jsonl"
    headerless.write_text('"Small right effusion.","No effusion."\n')
    with pytest.raises(InputError, match="looks like CSV") as caught:
        check_input(headerless)
    assert "effusion" not in str(caught.value)  # a first line of report text is not quoted


def test_broken_json_lines_are_still_row_problems(tmp_path):
    from radmatch_audit.files.inputs import RowProblem, read_pairs

    path = tmp_path / "pairs.jsonl"
    path.write_text('{"reference": "A.", "candidate": "B."}\n{"reference": "A.", \n')
    items = [item for _, item in read_pairs(path)]
    assert isinstance(items[1], RowProblem) and "invalid JSON" in items[1].message


# ---------------------------------------------------------------------------- the CLI (3, 7, 9)


def cli(*argv: str, capsys) -> tuple[int, str, str]:
    from radmatch_audit.cli import main

    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def pairs_file(tmp_path, n: int = 2):
    return write_jsonl(tmp_path / "pairs.jsonl", [
        {"pair_id": str(i), "reference": "Small right pleural effusion.", "candidate": "No effusion."}
        for i in range(n)])


def test_evaluate_refuses_wrong_columns_before_loading_a_judge(tmp_path, capsys, monkeypatch):
    from radmatch_audit.judges.config import JudgeConfig

    def no_judge(self):
        raise AssertionError("a judge was built for an input that cannot be read")

    monkeypatch.setattr(JudgeConfig, "build_judge", no_judge)
    src = write_jsonl(tmp_path / "pairs.jsonl", [{"ref": "A.", "hyp": "B."}] * 3)
    code, out, err = cli("evaluate", str(src), "-o", str(tmp_path / "r.jsonl"), capsys=capsys)
    assert code == 2 and out == ""
    assert err.startswith(f"radmatch-audit: error: {src} has no column 'reference', 'candidate' "
                          "(columns found in its first 3 JSON lines: 'ref', 'hyp'); name the right "
                          "ones with --reference-column NAME and --candidate-column NAME")
    assert "note:" not in err and not (tmp_path / "r.jsonl").exists()


def test_evaluate_summary_names_the_judge_and_refuses_to_replace_records(tmp_path, capsys):
    src, out = pairs_file(tmp_path), tmp_path / "records.jsonl"
    with StubServer() as server:
        judge = ["--base-url", server.base_url, "--model", "stub-judge", "--no-cache", "-q"]
        code, summary, _ = cli("evaluate", str(src), "-o", str(out), *judge, capsys=capsys)
        assert code == 0
        port = server.base_url.split(":")[2].split("/")[0]
        *_, judge_line, _, pointer = summary.rstrip().splitlines()
        assert judge_line == f"judge: vllm / stub-judge at 127.0.0.1:{port}"
        assert pointer.startswith("what each line means: radmatch-audit summary --explain")
        written = out.read_text()

        code, _, err = cli("evaluate", str(src), "-o", str(out), *judge, capsys=capsys)
        assert code == 2 and err.strip() == (
            f"radmatch-audit: error: {out} exists and holds records: add --resume to keep them "
            "and evaluate the rest, or --force to replace it")
        assert out.read_text() == written  # untouched

        code, as_json, _ = cli("evaluate", str(src), "-o", str(out), *judge, "--resume", "--json",
                               capsys=capsys)
        assert code == 0 and json.loads(as_json)["judge"]["model"] == "stub-judge"
        assert out.read_text() == written  # resumed: every pair was done
        code, _, _ = cli("evaluate", str(src), "-o", str(out), *judge, "--force", capsys=capsys)
        assert code == 0 and out.read_text().count("\n") == 2


def test_recompute_and_dashboard_outputs_are_owner_only_and_a_replacement_is_said(tmp_path, capsys):
    src, records = pairs_file(tmp_path), tmp_path / "records.jsonl"
    with StubServer() as server:
        assert cli("evaluate", str(src), "-o", str(records), "--base-url", server.base_url,
                   "--model", "stub-judge", "--no-cache", "-q", capsys=capsys)[0] == 0
    for command, output in (("recompute", tmp_path / "again.jsonl"), ("dashboard", tmp_path / "page.html")):
        output.write_text("old")
        output.chmod(0o644)
        code, _, err = cli(command, str(records), "-o", str(output), capsys=capsys)
        assert code == 0, err
        assert f"note: replacing {output}, which exists" in err
        assert output.stat().st_mode & 0o777 == 0o600 and output.read_text() != "old"
        output.unlink()
        code, _, err = cli(command, str(records), "-o", str(output), capsys=capsys)
        assert code == 0 and "replacing" not in err and output.stat().st_mode & 0o777 == 0o600
