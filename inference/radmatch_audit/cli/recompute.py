"""`radmatch-audit recompute`: re-derive every record's scores from its stored stages (no judge)."""

from __future__ import annotations

import argparse

from radmatch_audit.cli.common import (
    EXIT_OK, EXIT_SOME_FAILED, WRITE_BUFFER, JudgedSummary, checked_lines, fail, no_record_read,
    note_replacing, nothing_but_junk, open_input, output_problem, print_summary, report_bad,
)

HELP = "re-derive scores of every record from its stored stages (no judge)"
DESCRIPTION = (
    "Re-derive `scores` and `repairs` of every record from its stored "
    "stages, without any judge, write them to OUT and print the corpus summary."
)


def run(args: argparse.Namespace) -> int:
    from radmatch_audit.read.recompute import recompute_lines
    from radmatch_audit.files.record_io import open_private

    summary = JudgedSummary()
    problem = output_problem(args.output, args.input, folder=False)
    if problem:
        return fail(problem)
    with open_input(args.input) as src:
        lines = checked_lines(src, args.input)  # before OUT is created
        note_replacing(args.output)
        try:  # owner-only, as records: they hold report text
            dst = open_private(args.output, "w", buffering=WRITE_BUFFER)
        except OSError as exc:
            return fail(f"cannot write {args.output}: {exc.strerror}")
        try:
            with dst:
                bad = recompute_lines(lines, dst.write, summary)
        except UnicodeDecodeError:
            return fail(f"cannot read {args.input}: it is not UTF-8 text")
    report_bad(args.input, bad)
    if nothing_but_junk(bad, summary):
        return no_record_read(args.input)
    print_summary(summary, as_json=args.json)
    return EXIT_SOME_FAILED if bad else EXIT_OK


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", metavar="IN.jsonl")
    p.add_argument("-o", "--output", required=True, metavar="OUT.jsonl",
                   help="records with the re-derived scores, written owner-only (replaced, "
                   "with a note, when it exists)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
