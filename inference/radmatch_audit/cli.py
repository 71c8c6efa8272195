"""The `radmatch` command line.

Exit codes: 0 all went well; 1 some lines or pairs failed (the rest were processed);
2 the command could not run (bad arguments, unreadable file, bad configuration, a
file that is not a records file); 130 interrupted; 141 (128 + SIGPIPE) the reader of
the output went away (`radmatch ... | head`), which is left quiet.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from typing import Callable, Iterator, Optional, Sequence

from radmatch_audit.corpus import CorpusSummary, format_summary
from radmatch_audit.record_io import BadLine, iter_lines, loads, same_file

EXIT_OK, EXIT_SOME_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 130, 141  # 128 + SIGINT, 128 + SIGPIPE
WRITE_BUFFER = 1 << 20  # bytes; output records are ~10-20 kB each


def _report_bad(path: str, bad: list[BadLine]) -> None:
    for item in bad:
        print(f"{path}:{item.line_no}: {item.message}", file=sys.stderr)
    if bad:
        print(f"{len(bad)} line(s) of {path} could not be processed", file=sys.stderr)


def _open_input(path: str):
    try:
        return open(path, encoding="utf-8")
    except OSError as exc:
        raise SystemExit(fail(f"cannot read {path}: {exc.strerror}"))


def not_records(path: str, detail: str) -> str:
    return f"{path} is not a records file ({detail})"


PAIRS_DETAIL = "it looks like input pairs: run `radmatch-audit evaluate` on it first"


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


def _checked_lines(handle, path: str) -> Iterator[str]:
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


def _nothing_but_junk(bad: list[BadLine], summary: CorpusSummary) -> bool:
    """Lines were read, none is a record and none is even meant as one."""
    return bool(bad) and not summary.to_dict()["n_pairs"] and not any(
        _record_like(item.raw) for item in bad
    )


def no_record_read(path: str) -> int:
    """For a file with lines, none of which is a readable record: the message and exit 2."""
    return fail(not_records(path, "no line of it could be read as a record"))


class _Summary(CorpusSummary):
    """The corpus summary, plus which judges (backend/model) answered."""

    def __init__(self) -> None:
        super().__init__()
        self.judges: set[str] = set()

    def add(self, record) -> None:
        super().add(record)
        judge = record.judge
        if judge.backend or judge.model:
            loaded = judge.loaded_model
            weights = f" ({loaded})" if loaded and loaded != judge.model else ""
            self.judges.add(f"{judge.backend or '?'}/{judge.model or '?'}{weights}")


def fail(message: str) -> int:
    print(f"radmatch-audit: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def cmd_recompute(args: argparse.Namespace) -> int:
    from radmatch_audit.recompute import recompute_lines

    summary = _Summary()
    if same_file(args.output, args.input):
        return fail(f"the output {args.output} is the input file {args.input} (the same file, "
                    "maybe under another name or a hard link); name another file")
    with _open_input(args.input) as src:
        lines = _checked_lines(src, args.input)  # before OUT is created
        try:
            dst = open(args.output, "w", encoding="utf-8", buffering=WRITE_BUFFER)
        except OSError as exc:
            return fail(f"cannot write {args.output}: {exc.strerror}")
        try:
            with dst:
                bad = recompute_lines(lines, dst.write, summary)
        except UnicodeDecodeError:
            return fail(f"cannot read {args.input}: it is not UTF-8 text")
    _report_bad(args.input, bad)
    if _nothing_but_junk(bad, summary):
        return no_record_read(args.input)
    print_summary(summary, as_json=args.json)
    return EXIT_SOME_FAILED if bad else EXIT_OK


def cmd_summary(args: argparse.Namespace) -> int:
    from radmatch_audit.recompute import ensure_scored

    summary = _Summary()
    bad: list[BadLine] = []
    with _open_input(args.input) as src:
        try:
            for line_no, item in iter_lines(_checked_lines(src, args.input)):
                if not isinstance(item, BadLine):
                    try:
                        summary.add(ensure_scored(item))
                        continue
                    except ValueError as exc:
                        item = BadLine(line_no, str(exc), "")
                bad.append(item)
        except UnicodeDecodeError:
            return fail(f"cannot read {args.input}: it is not UTF-8 text")
    _report_bad(args.input, bad)
    if _nothing_but_junk(bad, summary):
        return no_record_read(args.input)
    print_summary(summary, as_json=args.json)
    return EXIT_SOME_FAILED if bad else EXIT_OK


def print_summary(summary: CorpusSummary, *, as_json: bool) -> None:
    data = summary.to_dict()
    judges = getattr(summary, "judges", None)
    if judges is not None:
        data["judges"] = sorted(judges)
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        print(format_summary(data))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="radmatch-audit",
        description="Score AI-written radiology reports against reference reports by "
        "counting clinically actionable errors, with a finding-level audit record.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "recompute",
        help="re-derive scores of every record from its stored stages (no judge)",
        description="Re-derive `scores` and `repairs` of every record from its stored "
        "stages, without any judge, write them to OUT and print the corpus summary.",
    )
    p.add_argument("input", metavar="IN.jsonl")
    p.add_argument("-o", "--output", required=True, metavar="OUT.jsonl")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_recompute)

    p = sub.add_parser(
        "summary",
        help="print the corpus summary of a records file",
        description="Print the corpus summary (pooled safety with 95% Wilson intervals, "
        "outcome counts, mean actionable errors) of a records file. Stored scores are "
        "used; a record stored without scores is scored from its stages.",
    )
    p.add_argument("input", metavar="IN.jsonl")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_summary)

    for register in _extra_commands():
        register(sub)
    return parser


def _extra_commands() -> list[Callable[[argparse._SubParsersAction], None]]:
    """Commands defined next to their code; each module imports only what parsing needs."""
    from radmatch_audit.agreement.cli import add_agreement_parser
    from radmatch_audit.baselines import add_baseline_parser
    from radmatch_audit.cli_evaluate import add_evaluate_parser
    from radmatch_audit.compare import add_compare_parser
    from radmatch_audit.dashboard import add_dashboard_parser
    from radmatch_audit.metric_install import add_install_metric_parser

    return [add_evaluate_parser, add_dashboard_parser, add_install_metric_parser,
            add_agreement_parser, add_baseline_parser, add_compare_parser]


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return code
    except KeyboardInterrupt:
        print("radmatch-audit: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader went away (`radmatch ... | head`): stop quietly. Python's recipe:
        # point stdout at devnull so that the flush at exit cannot fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
