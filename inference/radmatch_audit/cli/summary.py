"""`radmatch-audit summary`: the corpus summary of a records file."""

from __future__ import annotations

import argparse

from radmatch_audit.cli.common import (
    EXIT_OK, EXIT_SOME_FAILED, JudgedSummary, checked_lines, fail, no_record_read, nothing_but_junk,
    open_input, print_summary, report_bad,
)

HELP = "print the corpus summary of a records file"
DESCRIPTION = (
    "Print the corpus summary (pooled safety with 95% Wilson intervals, "
    "outcome counts, mean significant errors where the error adjudication ran and mean "
    "actionable errors, each with a 95% bootstrap interval over studies) of a records "
    "file. Stored scores are "
    "used; a record stored without scores is scored from its stages. --explain says "
    "what each line means."
)


def run(args: argparse.Namespace) -> int:
    from radmatch_audit.read.reading import RecordReader

    summary = JudgedSummary()
    with open_input(args.input) as src:
        records = RecordReader(checked_lines(src, args.input))
        try:
            summary.extend(records)
        except UnicodeDecodeError:
            return fail(f"cannot read {args.input}: it is not UTF-8 text")
    report_bad(args.input, records.bad)
    if nothing_but_junk(records.bad, summary):
        return no_record_read(args.input)
    print_summary(summary, as_json=args.json, explain=args.explain)
    return EXIT_SOME_FAILED if records.bad else EXIT_OK


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", metavar="IN.jsonl")
    form = p.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="print the summary as JSON")
    form.add_argument(
        "--explain", action="store_true",
        help="end the text summary with what each of its lines and terms means",
    )
