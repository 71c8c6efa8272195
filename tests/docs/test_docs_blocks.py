"""Every shell and Python block of README.md and docs/*.md runs as written.

Each fenced block names its language: `sh`/`bash` and `python` are run, `json` and
`text` (output, layouts, command synopses) are not. A block that needs what a test
machine lacks (a GPU server, a download, the user's own annotation set) says so in an
HTML comment just before its fence, `<!-- docs-test: skip (needs a GPU server) -->`,
and `<!-- docs-test: slow (...) -->` keeps a long block (a benchmark) to the slow run.

Per document, in a temporary working folder (a copy of examples/, redteam/ and
tests/data/; the repository's .venv and scripts/ linked in): the
shell blocks run in order with `bash -e`, .venv/bin first on PATH, then the Python
blocks run top to bottom in one interpreter, as docs/metric.md promises. The
environment is offline with a throw-away Hugging Face home. The judge:

* fast: the repository's test judge server (radmatch_audit.testing.fake_server, toy
  answers through the real pipeline and HTTP), named by RADMATCH_BASE_URL, which the
  blocks read like any user's setting; and, for docs/metric.md, a judge endpoint that
  refuses connections, so the documented failure results (None, the failed reward) are
  what the blocks print;
* slow: no judge configured, so the embedded SmolLM2 judge, as a new user runs them
  (about a minute a pair on 2 cores; one answer store for the slow tests of the session).

docs/records.md's example records are the output of its own blocks: the test compares
them (timings aside); scripts/regen_records_example.py rewrites them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import pytest

from radmatch_audit.cli.app import COMMANDS, build_parser
from radmatch_audit.judges.config import SERVER_CONCURRENCY
from radmatch_audit.testing.fake_server import StubServer

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RUN = {"sh": "shell", "bash": "shell", "python": "python"}
INERT = {"json", "text"}
FENCE = re.compile(r"^```(?P<lang>[^\n`]*)\n(?P<code>.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
MARKER = re.compile(r"<!-- docs-test: (?P<kind>skip|slow) \((?P<why>[^)]+)\) -->\s*\Z")
COPIED = ("examples", "redteam", "tests/data")  # blocks may write beside these
LINKED = (".venv", "scripts", "benchmarks")  # `.venv/bin/python scripts/...` as the README writes it
CLOSED_URL = "http://127.0.0.1:9/v1"  # loopback discard port: connection refused at once
STUB_MODEL = "stub-judge"
MAX_SKIPPED = 12  # the skip list stays short: raise it only with a reason in the doc


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int
    lang: str
    code: str
    skip: Optional[str] = None  # why it is not run
    slow: Optional[str] = None  # why it runs only in the slow run

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"


def blocks(doc: Path) -> Iterator[Block]:
    text = doc.read_text(encoding="utf-8")
    for fence in FENCE.finditer(text):
        before = text[max(0, fence.start() - 300):fence.start()]
        marker = MARKER.search(before)
        kind, why = (marker["kind"], marker["why"]) if marker else (None, None)
        yield Block(
            doc, text.count("\n", 0, fence.start()) + 1, fence["lang"].strip(), fence["code"],
            skip=why if kind == "skip" else None, slow=why if kind == "slow" else None,
        )


ALL = [block for doc in DOCS for block in blocks(doc)]
RUNNABLE_DOCS = sorted({b.doc for b in ALL if b.lang in RUN and not b.skip})
# Docs whose blocks use the configured judge (records.md starts its own test server).
JUDGED_DOCS = [d for d in RUNNABLE_DOCS if "StubServer(" not in d.read_text(encoding="utf-8")]


def doc_id(doc: Path) -> str:
    return str(doc.relative_to(REPO))


# ---------------------------------------------------------------------------- the blocks


def test_every_block_names_its_language():
    unnamed = [f"{b.where} ({b.lang or 'no language'})" for b in ALL if b.lang not in {*RUN, *INERT}]
    assert not unnamed, f"fence these as sh, bash, python, json or text: {unnamed}"


def test_the_skip_list_is_short_and_says_why():
    skipped = [b for b in ALL if b.skip]
    markers = sum(doc.read_text(encoding="utf-8").count("<!-- docs-test:") for doc in DOCS)
    assert markers == sum(1 for b in ALL if b.skip or b.slow), "a docs-test marker not just before a fence"
    assert len(skipped) <= MAX_SKIPPED, [f"{b.where}: {b.skip}" for b in skipped]
    assert all(b.lang in RUN for b in skipped), "only runnable blocks need a skip marker"
    counts = {
        "run": sum(1 for b in ALL if b.lang in RUN and not b.skip and not b.slow),
        "slow": sum(1 for b in ALL if b.lang in RUN and b.slow),
        "skipped": len(skipped),
    }
    print(counts, *(f"skipped {b.where}: {b.skip}" for b in skipped), sep="\n")


@pytest.mark.parametrize("block", [b for b in ALL if b.lang == "python"], ids=lambda b: b.where)
def test_every_python_block_compiles(block):
    compile(block.code, block.where, "exec")


@pytest.mark.parametrize("block", [b for b in ALL if b.lang in ("sh", "bash")], ids=lambda b: b.where)
def test_every_shell_block_parses(block):
    result = subprocess.run(["bash", "-n", "-c", block.code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"{block.where}: {result.stderr}"


# ---------------------------------------------------------------------------- running them


def workdir(tmp_path: Path) -> Path:
    """A working folder like a checkout's root: its data copied, the rest linked."""
    root = tmp_path / "work"
    root.mkdir()
    for name in COPIED:
        shutil.copytree(REPO / name, root / name)
    for name in LINKED:
        (root / name).symlink_to(REPO / name)
    return root


def block_env(tmp_path: Path, answers: Path, **judge: str) -> dict[str, str]:
    """Offline, a throw-away HF home, .venv/bin first; the judge only as given."""
    keep = {"RADMATCH_CACHE_DIR", "RADMATCH_SMOLLM_GGUF", "RADMATCH_LOCAL_MODEL_DIR"}
    env = {k: v for k, v in os.environ.items()
           if (not k.startswith("RADMATCH_") or k in keep) and not k.startswith("HF_")}
    env.update(
        PATH=f"{REPO / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}",
        HF_HOME=str(tmp_path / "hf-home"),
        HF_EVALUATE_OFFLINE="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
        RADMATCH_JUDGE_CACHE_DIR=str(answers),
        RADMATCH_PROGRESS="0",
        PYTHONPATH="",  # the installed package, as a user has it
        **judge,
    )
    return env


def run_doc(doc: Path, tmp_path: Path, env: dict[str, str], *, slow: bool) -> str:
    """The document's shell blocks in order, then its Python blocks in one session;
    everything they print on stdout."""
    chosen = [b for b in blocks(doc) if b.lang in RUN and not b.skip and (slow or not b.slow)]
    root = workdir(tmp_path)
    out = []
    for block in (b for b in chosen if RUN[b.lang] == "shell"):
        out.append(run_checked(["bash", "-e", "-c", block.code], root, env, block.where))
    python = [b for b in chosen if RUN[b.lang] == "python"]
    if python:
        script = tmp_path / f"{doc.stem}_blocks.py"
        script.write_text("".join(f"# ---- {b.where}\n{b.code}\n" for b in python), encoding="utf-8")
        out.append(run_checked([sys.executable, str(script)], root, env, doc_id(doc)))
    return "".join(out)


def run_checked(cmd: list[str], cwd: Path, env: dict[str, str], where: str) -> str:
    result = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=5400)
    assert result.returncode == 0, (
        f"{where}: exit {result.returncode}\nstdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-4000:]}")
    return result.stdout


@pytest.fixture(scope="module")
def stub_judge() -> Iterator[StubServer]:
    with StubServer(model=STUB_MODEL) as server:
        yield server


@pytest.mark.parametrize("doc", RUNNABLE_DOCS, ids=doc_id)
def test_doc_blocks_run_with_the_test_judge_server(doc, tmp_path, stub_judge):
    env = block_env(tmp_path, tmp_path / "answers", RADMATCH_BASE_URL=stub_judge.base_url,
                    RADMATCH_MODEL=STUB_MODEL)
    out = run_doc(doc, tmp_path, env, slow=False)
    CHECKS.get(doc.name, lambda out: None)(out)


@pytest.mark.slow
@pytest.mark.parametrize("doc", JUDGED_DOCS, ids=doc_id)
def test_doc_blocks_run_with_the_embedded_judge(doc, tmp_path, shared_answer_cache):
    """As a new user runs them: no judge server, the embedded SmolLM2 judge; slow blocks too."""
    out = run_doc(doc, tmp_path, block_env(tmp_path, shared_answer_cache), slow=True)
    CHECKS.get(doc.name, lambda out: None)(out)


def test_metric_doc_results_with_an_unreachable_judge(tmp_path):
    """No reachable judge: every pair is failed (None, never 0), the reward is the documented 0.0."""
    env = block_env(tmp_path, tmp_path / "answers", RADMATCH_BASE_URL=CLOSED_URL, RADMATCH_RETRIES="1",
                    RADMATCH_CACHE="0")
    out = run_doc(REPO / "docs" / "metric.md", tmp_path, env, slow=False)
    assert "[None, None]" in out  # the datasets example: both pairs failed, not 0
    assert "epoch 1: mean actionable errors None, failed 1" in out
    assert "[0.0, 0.0]" in out  # the reward example: the documented failed reward


# ---------------------------------------------------------------------------- what they print


def check_readme(out: str) -> None:
    lines = out.strip().splitlines()
    assert lines[-3].isdigit(), out  # the first pair's actionable errors
    assert lines[-2] == "True", out  # the rerun came from the answer cache
    assert lines[-1] == "3 0", out  # three example pairs streamed, none failed


def check_metric(out: str) -> None:
    assert "failed 0" in out and "None" not in out.split("epoch 0")[1], out
    rewards = json.loads(out.strip().splitlines()[-1])
    assert len(rewards) == 2 and all(0.0 < r <= 1.0 for r in rewards), out


VOLATILE = {"timings_s", "elapsed_s"}


def comparable(record: dict) -> dict:
    """A record without what differs between two runs: times, in keys and in the error text."""
    def strip(value):
        if isinstance(value, dict):
            return {k: (None if k in VOLATILE else strip(v)) for k, v in value.items()}
        if isinstance(value, list):
            return [strip(v) for v in value]
        if isinstance(value, str):
            return re.sub(r"in \d+(\.\d+)? s\)", "in ? s)", value)
        return value
    return strip(record)


def check_records(out: str) -> None:
    printed = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    text = (REPO / "docs" / "records.md").read_text(encoding="utf-8")
    shown = [json.loads(b.code) for b in blocks(REPO / "docs" / "records.md")
             if b.lang == "json" and b.code.lstrip().startswith('{\n  "schema_version"')]
    assert len(printed) == len(shown) == 2, (len(printed), len(shown))
    for run, doc in zip(printed, shown):
        assert comparable(run) == comparable(doc), (
            f"docs/records.md's example record {doc['pair_id']} is not what its block prints: "
            "run .venv/bin/python scripts/regen_records_example.py")
    assert "scripts/regen_records_example.py" in text


CHECKS = {"README.md": check_readme, "metric.md": check_metric, "records.md": check_records}


# ---------------------------------------------------------------------------- names


NAMED_DOCS = [*DOCS, REPO / "serve" / "README.md"]
# The other project's command: a bare `radmatch` followed by one of our subcommands
# (never `radmatch-audit`, nor the metric's name in `evaluate.load("radmatch")`).
OTHER_PROJECTS_COMMAND = re.compile(
    r"(?<![\w./-])radmatch\s+(?:" + "|".join(map(re.escape, COMMANDS)) + r")\b"
)


SERVE_HELP = (["bash", "serve/start_vllm.sh", "--help"], ["bash", "serve/install.sh", "--help"],
              [sys.executable, "serve/check_judge.py", "--help"])


def help_texts() -> dict[str, str]:
    """`radmatch-audit --help` and every command's, as printed."""
    parser = build_parser()
    (subparsers,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {"radmatch-audit": parser.format_help(),
            **{f"radmatch-audit {name}": p.format_help() for name, p in subparsers.choices.items()}}


def serve_help_texts() -> dict[str, str]:
    """The --help of the serve scripts hospital IT runs (they print it and exit 0)."""
    texts = {}
    for cmd in SERVE_HELP:
        result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False, timeout=60)
        assert result.returncode == 0, (cmd, result.stderr[-2000:])
        texts[" ".join(cmd[1:])] = result.stdout + result.stderr
    return texts


def test_the_old_name_pattern_tells_the_other_projects_commands_from_ours():
    assert OTHER_PROJECTS_COMMAND.search("as `radmatch\n    compare`")
    assert OTHER_PROJECTS_COMMAND.search("run radmatch evaluate pairs.jsonl")
    for ours in ("radmatch-audit compare A B", 'evaluate.load("radmatch")', "pip install radmatch",
                 "radmatch_audit.evaluate", "radmatch evaluates"):
        assert not OTHER_PROJECTS_COMMAND.search(ours), ours


def test_no_help_text_names_the_other_projects_commands():
    texts = {**help_texts(), **serve_help_texts()}
    found = {where: match[0] for where, text in texts.items()
             if (match := OTHER_PROJECTS_COMMAND.search(" ".join(text.split())))}
    assert len(texts) == len(COMMANDS) + 1 + len(SERVE_HELP)
    assert not found, f"help text names the other project's command (ours is radmatch-audit): {found}"


@pytest.mark.parametrize("doc", NAMED_DOCS, ids=doc_id)
def test_no_doc_names_the_other_projects_commands(doc):
    text = doc.read_text(encoding="utf-8")
    found = [f"{doc_id(doc)}:{text.count(chr(10), 0, m.start()) + 1}: {m[0]!r}"
             for m in OTHER_PROJECTS_COMMAND.finditer(text)]
    assert not found, f"the other project's command (ours is radmatch-audit): {found}"


def test_the_metric_docs_state_the_concurrency_the_code_uses():
    row = next(line for line in (REPO / "docs" / "metric.md").read_text(encoding="utf-8").splitlines()
               if line.startswith("| `concurrency` |"))
    assert "judge calls in flight" in row and f"{SERVER_CONCURRENCY} per server" in row, row
