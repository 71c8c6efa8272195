"""The `radmatch` command line.

Exit codes: 0 all went well; 1 some lines or pairs failed (the rest were processed);
2 the command could not run (bad arguments, unreadable file, bad configuration).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable, Optional, Sequence

from radmatch.corpus import CorpusSummary, format_summary
from radmatch.record_io import BadLine, iter_lines

EXIT_OK, EXIT_SOME_FAILED, EXIT_USAGE = 0, 1, 2
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


def fail(message: str) -> int:
    print(f"radmatch: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def cmd_recompute(args: argparse.Namespace) -> int:
    from radmatch.recompute import recompute_lines

    summary = CorpusSummary()
    if Path(args.output).resolve() == Path(args.input).resolve():
        return fail("the output must be a different file from the input")
    with _open_input(args.input) as src, open(
        args.output, "w", encoding="utf-8", buffering=WRITE_BUFFER
    ) as dst:
        bad = recompute_lines(src, dst.write, summary)
    _report_bad(args.input, bad)
    print_summary(summary, as_json=args.json)
    return EXIT_SOME_FAILED if bad else EXIT_OK


def cmd_summary(args: argparse.Namespace) -> int:
    from radmatch.recompute import ensure_scored

    summary = CorpusSummary()
    bad: list[BadLine] = []
    with _open_input(args.input) as src:
        for line_no, item in iter_lines(src):
            if not isinstance(item, BadLine):
                try:
                    summary.add(ensure_scored(item))
                    continue
                except ValueError as exc:
                    item = BadLine(line_no, str(exc), "")
            bad.append(item)
    _report_bad(args.input, bad)
    print_summary(summary, as_json=args.json)
    return EXIT_SOME_FAILED if bad else EXIT_OK


def print_summary(summary: CorpusSummary, *, as_json: bool) -> None:
    data = summary.to_dict()
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        print(format_summary(data))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="radmatch",
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
        description="Print the corpus summary (pooled safety with 95%% Wilson intervals, "
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
    from radmatch.cli_evaluate import add_evaluate_parser
    from radmatch.dashboard import add_dashboard_parser
    from radmatch.metric_install import add_install_metric_parser

    return [add_evaluate_parser, add_dashboard_parser, add_install_metric_parser]


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("radmatch: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
