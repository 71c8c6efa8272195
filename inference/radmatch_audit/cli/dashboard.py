"""`radmatch-audit dashboard RECORDS.jsonl -o report.html [--compare OTHER.jsonl]`."""

from __future__ import annotations

import argparse
from pathlib import Path

from radmatch_audit.cli.common import EXIT_OK, check_records_file, fail, note_replacing

HELP = "write an offline HTML audit page from a records file"
DESCRIPTION = (
    "Write one self-contained HTML page (no network access when opened) with the "
    "corpus scores, a sortable and filterable table of pairs, and a finding-level "
    "view of each pair. With --compare, also show the per-pair difference in "
    "actionable errors against a second records file of the same pairs, and the "
    "paired difference per tier with its 95% interval and p-value (as `radmatch-audit "
    "compare`)."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "records", help="records file (JSONL) written by `radmatch-audit evaluate` (or `recompute`)"
    )
    p.add_argument(
        "-o", "--output", default="report.html",
        help="HTML file to write, owner-only: it quotes the reports (default: report.html; "
        "replaced, with a note, when it exists)",
    )
    p.add_argument(
        "--compare",
        metavar="OTHER.jsonl",
        default=None,
        help="records of the same pairs from another system or judge",
    )


def run(args: argparse.Namespace) -> int:
    """Handler of `radmatch-audit dashboard`: build the page, print one line.

    Returns the CLI's exit code: 0, or 2 (with one line on stderr) when an input
    cannot be read, holds no records, or is not a records file.
    """
    from radmatch_audit.dashboard import build_dashboard
    from radmatch_audit.files.record_io import same_file

    inputs = [args.records] + ([args.compare] if args.compare is not None else [])
    for path in inputs:
        problem = check_records_file(path)
        if problem:
            return fail(problem)
        if same_file(args.output, path):  # by device and inode: a hard link is the same file
            return fail(f"the output {args.output} is the input file {path}; name another file")
    note_replacing(args.output)
    try:
        result = build_dashboard(args.records, args.output, compare_path=args.compare)
    except UnicodeDecodeError:
        return fail(f"cannot read {' or '.join(inputs)}: not UTF-8 text")
    except OSError as exc:
        if exc.filename is not None and str(exc.filename) in inputs:
            return fail(f"cannot read {exc.filename}: {exc.strerror}")
        return fail(f"cannot write {args.output}: {exc.strerror}")
    summary = result["summary"]
    for path, counted in ((args.records, summary), (args.compare, result["compare_summary"])):
        if counted is not None and not counted.get("n_pairs"):  # a pipe checked only now
            mark = f"{Path(path).name}: " if path is args.compare else "line "
            own = [line[len(mark) if path is args.compare else 0:]
                   for line in result["bad_lines"] if line.startswith(mark)]
            if own:  # (the page lists them all)
                return fail(f"no line of {path} could be read as a record ({own[0]})")
            return fail(f"{path} holds no records")
    print(
        f"wrote {result['output']} ({result['bytes'] / 1e6:.1f} MB): "
        f"{summary.get('n_pairs')} pairs, {summary.get('n_failed')} failed"
    )
    return EXIT_OK
