"""What the command line says when it cannot do its job (issue 14): one clear line and
the documented exit code (0 ok, 1 some lines or pairs failed, 2 the command could not run),
never a traceback. Each test runs the real CLI in a subprocess."""

import json
import subprocess
import sys
from pathlib import Path

from builders import fig3_record, write_jsonl

from radmatch_audit.testing.fake_server import StubServer

ROOT = Path(__file__).resolve().parents[2]
PAIRS = ROOT / "examples" / "pairs.jsonl"
CLI = [sys.executable, "-m", "radmatch_audit.cli"]
PAIRS_MESSAGE = "is not a records file (it looks like input pairs: run `radmatch-audit evaluate` on it first)"


def run_cli(*args):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=120)


def error_line(proc) -> str:
    """The one line of a command that could not run: exit 2, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("radmatch-audit: error: "), proc.stderr
    return lines[-1]


def write_records(path, records):
    path.write_text("".join(r.to_json() + "\n" for r in records), encoding="utf-8")
    return path


def failed(pair_id: str, error: str) -> str:
    data = json.loads(fig3_record(pair_id).to_json())
    data.update(error=error, scores=None)
    return json.dumps(data)


# ----------------------------------------------------------------- 1. unreadable input


def test_dashboard_of_a_missing_file_says_cannot_read(tmp_path):
    line = error_line(run_cli("dashboard", tmp_path / "MISSING.jsonl", "-o", tmp_path / "x.html"))
    assert line == f"radmatch-audit: error: cannot read {tmp_path / 'MISSING.jsonl'}: No such file or directory"
    assert not (tmp_path / "x.html").exists()


def test_dashboard_compare_with_a_missing_file_says_cannot_read(tmp_path):
    src = write_records(tmp_path / "r.jsonl", [fig3_record()])
    proc = run_cli("dashboard", src, "--compare", tmp_path / "MISSING.jsonl", "-o", tmp_path / "x.html")
    assert error_line(proc).startswith(f"radmatch-audit: error: cannot read {tmp_path / 'MISSING.jsonl'}")


def test_dashboard_of_records_still_writes_the_page(tmp_path):
    src = write_records(tmp_path / "r.jsonl", [fig3_record()])
    proc = run_cli("dashboard", src, "-o", tmp_path / "x.html")
    assert proc.returncode == 0, proc.stderr
    assert "1 pairs, 0 failed" in proc.stdout and (tmp_path / "x.html").exists()


# ----------------------------------------------------------------- 2. a closed pipe


def _read_one_line_and_close(args, *, read_first: bool = True) -> subprocess.Popen:
    proc = subprocess.Popen([*CLI, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if read_first:
        proc.stdout.readline()
    proc.stdout.close()  # the reader goes away, as `head -1` does
    _, err = proc.communicate(timeout=120)
    return proc, err.decode()


def test_recompute_to_a_closed_pipe_ends_quietly(tmp_path):
    # well over a pipe's 64 kB buffer, so the writer meets the closed end
    src = write_records(tmp_path / "in.jsonl", [fig3_record(f"p{i}") for i in range(100)])
    proc, err = _read_one_line_and_close(["recompute", src, "-o", "/dev/stdout"])
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert err == ""
    assert proc.returncode == 141  # 128 + SIGPIPE, as a tool killed by the signal


def test_summary_json_to_a_closed_pipe_ends_quietly(tmp_path):
    src = write_records(tmp_path / "in.jsonl", [fig3_record()])
    # closed before the summary is written (the CLI is still starting up)
    proc, err = _read_one_line_and_close(["summary", src, "--json"], read_first=False)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert err == ""


# ----------------------------------------------------------------- 3. not a records file


def test_dashboard_of_a_pairs_file_is_refused(tmp_path):
    proc = run_cli("dashboard", PAIRS, "-o", tmp_path / "x.html")
    assert error_line(proc) == f"radmatch-audit: error: {PAIRS} {PAIRS_MESSAGE}"
    assert proc.stdout == "" and not (tmp_path / "x.html").exists()


def test_dashboard_compare_with_a_pairs_file_is_refused(tmp_path):
    src = write_records(tmp_path / "r.jsonl", [fig3_record()])
    proc = run_cli("dashboard", src, "--compare", PAIRS, "-o", tmp_path / "x.html")
    assert error_line(proc) == f"radmatch-audit: error: {PAIRS} {PAIRS_MESSAGE}"


def test_summary_and_recompute_of_a_pairs_file_are_refused(tmp_path):
    assert error_line(run_cli("summary", PAIRS)) == f"radmatch-audit: error: {PAIRS} {PAIRS_MESSAGE}"
    assert error_line(run_cli("summary", PAIRS, "--json")).endswith(PAIRS_MESSAGE)
    out = tmp_path / "out.jsonl"
    proc = run_cli("recompute", PAIRS, "-o", out)
    assert error_line(proc) == f"radmatch-audit: error: {PAIRS} {PAIRS_MESSAGE}"
    assert not out.exists()  # refused before the output is created


def test_a_file_of_unreadable_lines_is_not_a_records_file(tmp_path):
    src = tmp_path / "junk.jsonl"
    src.write_text("{not json\n[1, 2]\n", encoding="utf-8")
    for args in (["summary", src], ["recompute", src, "-o", tmp_path / "o.jsonl"]):
        line = error_line(run_cli(*args))
        assert line == f"radmatch-audit: error: {src} is not a records file (no line of it could be read as a record)"
    line = error_line(run_cli("dashboard", src, "-o", tmp_path / "x.html"))
    assert line.startswith(f"radmatch-audit: error: no line of {src} could be read as a record (line 1 skipped: invalid JSON")


def test_one_bad_line_among_records_is_still_exit_1(tmp_path):
    src = write_records(tmp_path / "in.jsonl", [fig3_record()])
    with open(src, "a", encoding="utf-8") as fh:
        fh.write("{not json\n")
    proc = run_cli("summary", src, "--json")
    assert proc.returncode == 1 and json.loads(proc.stdout)["n_pairs"] == 1


# ----------------------------------------------------------------- 4. help text


def test_summary_help_prints_a_single_percent_sign():
    proc = run_cli("summary", "--help")
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    assert "95% Wilson" in text and "%%" not in proc.stdout


# ----------------------------------------------------------------- 5. the text summary


def test_text_summary_lists_failed_pairs_names_the_judge_and_explains_generic(tmp_path):
    good = json.loads(fig3_record("good").to_json())
    good["judge"].update(backend="openai", model="Qwen/Qwen3-32B")
    lines = [json.dumps(good)] + [failed(f"f{i:02d}", f"grade: timed out {i}") for i in range(12)]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    proc = run_cli("summary", src)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert "judge: openai/Qwen/Qwen3-32B" in out
    assert "failed pairs (12, not scored):" in out
    assert "  f00: grade: timed out 0" in out and "  f09: grade: timed out 9" in out
    assert "  f10: grade: timed out 10" not in out and "  (+2 more)" in out
    generic = [line for line in out if line.strip().startswith("(GENERIC:")]
    assert len(generic) == 1 and "No acute abnormality" in generic[0]
    assert "no safety credit" in generic[0] and "docs/scoring.md" in generic[0]


def test_json_summary_keeps_its_keys_and_adds_the_judges(tmp_path):
    good = json.loads(fig3_record("good").to_json())
    good["judge"].update(backend="openai", model="m")
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(good) + "\n" + failed("bad", "extract: refused") + "\n", encoding="utf-8")
    data = json.loads(run_cli("summary", src, "--json").stdout)
    assert data["judges"] == ["openai/m"]
    assert data["failed_pairs"] == {"bad": "extract: refused"}
    for key in ("n_pairs", "n_scored", "n_failed", "mean_actionable_errors", "outcomes",
                "safety", "attribution", "attributes", "subsets", "warnings"):
        assert key in data


# ----------------------------------------------------------------- 6. empty input


def test_empty_records_file_holds_no_records(tmp_path):
    for name, text in (("empty.jsonl", ""), ("blank.jsonl", "\n  \n")):
        src = tmp_path / name
        src.write_text(text, encoding="utf-8")
        assert error_line(run_cli("summary", src)) == f"radmatch-audit: error: {src} holds no records"
        out = tmp_path / "out.jsonl"
        assert error_line(run_cli("recompute", src, "-o", out)) == f"radmatch-audit: error: {src} holds no records"
        assert not out.exists()
        line = error_line(run_cli("dashboard", src, "-o", tmp_path / "x.html"))
        assert line == f"radmatch-audit: error: {src} holds no records"


# ----------------------------------------------------------------- 7. what the summary's terms mean


def without_notable(pair_id: str = "fig3", model: str = "m") -> str:
    """The worked example with its notable findings made urgent, rescored from its stages."""
    data = json.loads(fig3_record(pair_id).to_json())
    for side in ("reference_findings", "candidate_findings"):
        for finding in data["stages"][side]:
            if finding["clinical_significance"] == "notable":
                finding["clinical_significance"] = "urgent"
    data["scores"] = None
    data["judge"].update(backend="transformers", model=model)
    return json.dumps(data)


def printed_terms(out: str) -> set[str]:
    """The terms a text summary prints: outcome keys, safety tiers, subsets, line heads."""
    lines = out.splitlines()
    outcomes = next(line for line in lines if line.startswith("outcomes: "))
    terms = {word for word in outcomes.split()[1:] if word.isalpha()}
    table = lines.index(next(line for line in lines if line.startswith("safety ")))
    terms |= {line.split()[0] for line in lines[table + 1:table + 4]}
    terms |= {"pairs", "scored", "failed", "judge", "mean actionable errors per pair", "precision",
              "recall", "subset", "evidence attributed"}
    return terms


def test_summary_explain_gives_every_printed_term_a_meaning(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(json.loads(fig3_record().to_json())) + "\n", encoding="utf-8")
    plain = run_cli("summary", src)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.rstrip().splitlines()[-1] == (
        "what each line means: radmatch-audit summary --explain; what radiologists and a capable "
        'judge reach: README.md, "Agreement with radiologists"')
    explained = run_cli("summary", src, "--explain")
    assert explained.returncode == 0, explained.stderr
    assert explained.stdout.startswith(plain.stdout.rsplit("\n\n", 1)[0])  # the same summary first
    legend = explained.stdout.split("What each line means", 1)[1]
    meanings = {line.split(":")[0].strip() for line in legend.splitlines() if ":" in line}
    meanings |= {term for line in meanings if "," in line for term in line.replace(" ", "").split(",")}
    terms = printed_terms(plain.stdout)
    assert {"COR", "PAR", "INC", "MIS", "SPU", "triage", "actionable", "all"} <= terms
    assert terms <= meanings, terms - meanings
    assert 'README.md, "Agreement with radiologists"' in legend
    both = run_cli("summary", src, "--explain", "--json")
    assert both.returncode == 2 and both.stdout == ""
    assert both.stderr.strip().endswith("argument --json: not allowed with argument --explain")


def test_summary_says_why_triage_and_actionable_rows_are_the_same(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(without_notable() + "\n", encoding="utf-8")
    out = run_cli("summary", src).stdout.splitlines()
    triage = next(line for line in out if line.startswith("triage "))
    actionable = next(line for line in out if line.startswith("actionable "))
    assert triage.split()[1:] == actionable.split()[1:]
    assert out[out.index(next(line for line in out if line.startswith("all "))) + 1] == (
        "  (triage and actionable are the same: no finding of either report is notable, the one "
        "tier actionable adds to triage)")
    write_records(src, [fig3_record()])  # notable findings on both sides: the rows differ
    assert not any("are the same" in line for line in run_cli("summary", src).stdout.splitlines())


def test_summary_of_the_embedded_judges_records_warns_that_its_counts_are_not_clinical(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(without_notable(model="SmolLM2-135M-Instruct") + "\n", encoding="utf-8")
    out = run_cli("summary", src).stdout
    warning = next(line for line in out.splitlines() if line.startswith("warning: "))
    assert "embedded small judge (SmolLM2-135M-Instruct)" in warning
    assert "error counts are not clinical" in warning and "pleural effusion" in warning
    assert 'README.md, "Agreement with radiologists"' in warning
    src.write_text(without_notable(model="radmatch-judge") + "\n", encoding="utf-8")
    assert "not clinical" not in run_cli("summary", src).stdout


def test_the_summary_docs_scoring_reads_is_what_the_command_prints(tmp_path):
    """docs/scoring.md, "Reading a summary": the README's example pairs as the embedded judge
    scored them on 2026-12-05 (tests/data/examples_embedded_records.jsonl.gz)."""
    import gzip

    src = tmp_path / "records.jsonl"
    src.write_bytes(gzip.decompress((ROOT / "tests" / "data" / "examples_embedded_records.jsonl.gz").read_bytes()))
    proc = run_cli("summary", src)
    assert proc.returncode == 0, proc.stderr
    printed = "\n".join(line.rstrip() for line in proc.stdout.rstrip("\n").splitlines())
    doc = (ROOT / "docs" / "scoring.md").read_text(encoding="utf-8")
    shown = doc.split("### Reading a summary", 1)[1].split("```text\n", 1)[1].split("\n```", 1)[0]
    assert shown == printed, (
        "docs/scoring.md's summary is not what `radmatch-audit summary` prints for "
        "tests/data/examples_embedded_records.jsonl.gz: paste the new output (trailing spaces cut)")


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
