"""What every command shares: exit codes, the error line, reading a records file, the summary.

Exit codes: 0 all went well; 1 some lines or pairs failed (the rest were processed);
2 the command could not run (bad arguments, unreadable file, bad configuration, a
file that is not a records file); 130 interrupted (Ctrl-C); 143 terminated (SIGTERM,
during `evaluate`: cli.interrupt); 141 (128 + SIGPIPE) the reader of
the output went away (`radmatch-audit ... | head`), which is left quiet.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from pathlib import Path
from typing import Iterator, Optional, Union

from radmatch_audit.read.corpus import EXPLAIN_POINTER, EXPLANATION, CorpusSummary, format_summary
from radmatch_audit.read.reading import judge_label
from radmatch_audit.files.record_io import BadLine, iter_lines, loads, lock_problem, same_file
from radmatch_audit.core.records import Record

EXIT_OK, EXIT_SOME_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 130, 141  # 128 + SIGINT, 128 + SIGPIPE
WRITE_BUFFER = 1 << 20  # bytes; output records are ~10-20 kB each
PAIRS_DETAIL = "it looks like input pairs: run `radmatch-audit evaluate` on it first"


def fail(message: str) -> int:
    """Print the command's one error line; returns EXIT_USAGE."""
    print(f"radmatch-audit: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def report_bad(path: str, bad: list[BadLine]) -> None:
    for item in bad:
        print(f"{path}:{item.line_no}: {item.message}", file=sys.stderr)
    if bad:
        print(f"{len(bad)} line(s) of {path} could not be processed", file=sys.stderr)


def open_input(path: str):
    try:
        return open(path, encoding="utf-8")
    except OSError as exc:
        raise SystemExit(fail(f"cannot read {path}: {exc.strerror}"))


def output_problem(output: Union[str, Path], input_path: str, *, folder: bool = True) -> Optional[str]:
    """Why `output` cannot be written for `input_path` (its folder is missing, it is the
    input itself, or it lies in the input's folder: a saved dataset), or None."""
    output = Path(output)
    if folder and not output.parent.is_dir():
        return f"cannot write {output}: the folder {output.parent} does not exist"
    if same_file(output, input_path):
        return (f"the output {output} is the input file {input_path} (the same file, "
                "maybe under another name or a hard link); name another file")
    if os.path.isdir(input_path) and _inside_folder(output, Path(input_path)):
        return (f"the output {output} is inside the input folder {input_path} (a saved "
                "dataset, whose files must stay as they are); name a file outside it")
    return None


def _inside_folder(path: Path, folder: Path) -> bool:
    """`path` lies in `folder` (through any link), or is a hard link to a file in it."""
    if path.resolve().is_relative_to(folder.resolve()):
        return True
    return path.is_file() and any(same_file(path, inner) for inner in folder.rglob("*") if inner.is_file())


def existing_output(output: Union[str, Path], *, force: bool, resume: Optional[bool] = None) -> Optional[str]:
    """Why OUT must not be written as asked, or None when it may be: another run is
    writing it; it holds records and neither --force (replace them) nor, for a command
    that has it, --resume (keep them) was given; --resume was given but it is no records
    file (--resume rewrites OUT, and would lose whatever is not a record)."""
    path = Path(output)
    in_use = lock_problem(path)
    if in_use or force or not path.is_file() or path.stat().st_size == 0:
        return in_use
    if resume:
        return _resume_problem(str(output))
    keep = "add --resume to keep them and evaluate the rest, or " if resume is not None else "add "
    return f"{output} exists and holds records: {keep}--force to replace it"


def _resume_problem(output: str) -> Optional[str]:
    """Why --resume must not rewrite `output`: it holds input pairs, or no record."""
    problem = check_records_file(output)
    try:
        if problem is None and not any(
            isinstance(item, Record) or _record_like(item.raw) for _, item in iter_lines(output)
        ):
            problem = not_records(output, "no line of it is a record")
    except UnicodeDecodeError:
        problem = f"cannot read {output}: it is not UTF-8 text"
    if problem is None:
        return None
    return f"--resume keeps only the records of {output}, and {problem}; name the records file, or --force to replace it"


def note_replacing(output: Union[str, Path]) -> None:
    """Say that an existing regular file at `output` is about to be replaced."""
    if Path(output).is_file():
        print(f"note: replacing {output}, which exists", file=sys.stderr)


def not_records(path: str, detail: str) -> str:
    return f"{path} is not a records file ({detail})"


def _looks_like_pair(raw: str) -> bool:
    """An input pair row (reference and candidate, no stages, scores or error)."""
    try:
        data = loads(raw)
    except ValueError:
        return False
    return (
        isinstance(data, dict)
        and "reference" in data
        and "candidate" in data
        and not {"stages", "scores", "error"} & data.keys()
    )


def _check_head(handle, path: str) -> tuple[list[str], Optional[str]]:
    """Read up to the first non-blank line: (lines read, why this is no records file or None)."""
    head: list[str] = []
    try:
        for raw in handle:
            head.append(raw)
            if raw.strip():
                break
    except UnicodeDecodeError:
        return head, f"cannot read {path}: it is not UTF-8 text"
    if not head or not head[-1].strip():
        return head, f"{path} holds no records"
    if _looks_like_pair(head[-1]):
        return head, not_records(path, PAIRS_DETAIL)
    return head, None


def checked_lines(handle, path: str) -> Iterator[str]:
    """The lines of an open records file, once its first line shows it is one.

    The file is read once (it may be a pipe); a file that holds no records or holds
    input pairs stops the command (SystemExit with EXIT_USAGE).
    """
    head, problem = _check_head(handle, path)
    if problem:
        raise SystemExit(fail(problem))
    return itertools.chain(head, handle)


def check_records_file(path: str) -> Optional[str]:
    """Why `path` cannot be read as a records file (one line), or None.

    A regular file has its first line looked at; a pipe or device is only opened by
    the command that reads it (reading it here would use it up).
    """
    try:
        if os.path.isdir(path):
            return f"cannot read {path}: it is a folder"
        if not os.path.isfile(path):
            os.stat(path)  # a missing file raises here
            return None
        with open(path, encoding="utf-8") as handle:
            return _check_head(handle, path)[1]
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror}"


def _record_like(raw: str) -> bool:
    """A bad line that is still meant as a record (a newer schema, a missing stage):
    "" (a line read as a record but not scorable) or an object with stages or a version."""
    if not raw:
        return True
    try:
        data = loads(raw)
    except ValueError:
        return False
    return isinstance(data, dict) and bool({"schema_version", "stages"} & data.keys())


def nothing_but_junk(bad: list[BadLine], summary: CorpusSummary) -> bool:
    """Lines were read, none is a record and none is even meant as one."""
    return bool(bad) and not summary.to_dict()["n_pairs"] and not any(
        _record_like(item.raw) for item in bad
    )


def no_record_read(path: str) -> int:
    """For a file with lines, none of which is a readable record: the message and exit 2."""
    return fail(not_records(path, "no line of it could be read as a record"))


class JudgedSummary(CorpusSummary):
    """The corpus summary, plus which judges (backend/model) answered."""

    def __init__(self) -> None:
        super().__init__()
        self.judges: set[str] = set()

    def add(self, record) -> None:
        super().add(record)
        label = judge_label(record.judge, weights=True)
        if label:
            self.judges.add(label)


def print_summary(
    summary: CorpusSummary, *, as_json: bool, judge: Optional[dict] = None, explain: bool = False
) -> None:
    """The summary; `judge` (judge_notice.judge_identity of the run's judge) is named
    after it, or under "judge" in the JSON. Records of the embedded small judge get a
    warning that their counts are not clinical; `explain` explains every line."""
    from radmatch_audit.judges.judge_notice import NOT_CLINICAL, describe, is_embedded_small

    data = summary.to_dict()
    judges = getattr(summary, "judges", None)
    if judges is not None:
        data["judges"] = sorted(judges)
    if judge is not None:
        data["judge"] = judge
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        print(format_summary(data))
        if judge is not None:
            print(describe(judge))
        elif any(is_embedded_small(label) for label in judges or ()):
            print(f"warning: {NOT_CLINICAL}")
        print()
        print(EXPLANATION if explain else EXPLAIN_POINTER)
