"""`radmatch-audit redteam`: run the red-team set through the judge and check each pair.

The pairs go through the normal pipeline (`Evaluator.from_config`, as `evaluate` builds
it; every RADMATCH_* variable applies); records are written owner-only as they finish.
The expectations are checked by radmatch_audit.read.redteam, from the records alone.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from radmatch_audit.cli.common import EXIT_OK, fail
from radmatch_audit.cli.judge_options import add_judge_arguments, judge_config
from radmatch_audit.files.paths import checkout_file
from radmatch_audit.read.redteam import check_records, format_results, load_pairs

PAIRS = "redteam/pairs.jsonl"  # in the source checkout; a wheel does not hold it

HELP = "run the red-team set through the judge, or check its records, pair by pair"
DESCRIPTION = (
    "Run the red-team set (redteam/pairs.jsonl) through the judge and check each "
    "pair's expectations, or check the records of an earlier run (--records) without a "
    "judge. Prints a table: pair, behaviour, pass / fail / judge-failed, and why "
    "(finding ids and the set's own patterns, never report text). Exits 0 whatever the "
    "pass rate; 2 on a usage error (bad options or files, a judge that cannot serve)."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pairs", metavar="PAIRS.jsonl", help=f"the red-team set (default {PAIRS} of the source checkout)")
    p.add_argument("-o", "--output", metavar="RECORDS.jsonl", help="records file to write (needed to run the judge)")
    p.add_argument("--records", metavar="RECORDS.jsonl", help="check these records instead of running a judge")
    p.add_argument("--limit", type=int, help="run only the first N pairs")
    p.add_argument("--pair", action="append", metavar="ID", help="run only this pair (repeatable)")
    add_judge_arguments(p, "judge (as radmatch-audit evaluate; RADMATCH_* variables apply)")


def run(args: argparse.Namespace) -> int:
    if bool(args.records) == bool(args.output):
        return fail("give either -o RECORDS (run the judge) or --records RECORDS (check only)")
    if args.limit is not None and args.limit < 1:
        return fail("--limit must be at least 1")
    pairs_path = args.pairs or checkout_file(PAIRS)
    if pairs_path is None:
        return fail(f"the red-team set ({PAIRS}) comes with a source checkout, not with "
                    "the installed package: name its file with --pairs")
    records_path = args.records or args.output
    try:
        pairs = _select(load_pairs(pairs_path), args, pairs_path)
        if args.output:
            _run_judge(pairs, args)
        records = list(_read_records(records_path))
    except OSError as exc:
        return fail(f"cannot read {exc.filename or records_path}: {exc.strerror or exc}")
    except ValueError as exc:
        return fail(str(exc))
    results, missing = check_records(records, pairs)
    print(format_results(results, missing))
    return EXIT_OK


def _select(pairs: list[dict], args: argparse.Namespace, pairs_path: Path | str) -> list[dict]:
    if args.pair:
        unknown = set(args.pair) - {p["pair_id"] for p in pairs}
        if unknown:
            raise ValueError(f"no pair {', '.join(sorted(unknown))} in {pairs_path}")
        pairs = [p for p in pairs if p["pair_id"] in args.pair]
    return pairs[: args.limit] if args.limit else pairs


def _read_records(path: str):
    from radmatch_audit.files.record_io import read_records

    try:
        yield from read_records(path)
    except ValueError as exc:  # "line N: ..." without the file
        raise ValueError(f"{path}: {exc}") from None


def _run_judge(pairs: list[dict], args: argparse.Namespace) -> None:
    """Evaluate the pairs into args.output, the way `radmatch-audit evaluate` does."""
    from radmatch_audit.core.records import PairInput
    from radmatch_audit.files.record_io import RecordWriter
    from radmatch_audit.judges.base import JudgeUnavailable
    from radmatch_audit.run.pipeline import Evaluator

    config = judge_config(args)
    if config.is_small_local_model:
        print("note: no judge server configured; the embedded SmolLM2-135M judge runs on the CPU "
              "(about a minute per pair). It checks the plumbing: its pass rate means nothing.", file=sys.stderr)
    inputs = [PairInput(reference=p["reference"], candidate=p["candidate"], pair_id=p["pair_id"],
                        study_id=p.get("study_id"), modality=p["modality"], indication=p["indication"])
              for p in pairs]
    with Evaluator.from_config(config) as evaluator:
        try:
            evaluator.check()
        except JudgeUnavailable as exc:
            raise ValueError(str(exc)) from None
        with RecordWriter(args.output) as writer:
            def on_record(record) -> None:
                writer.write(record)
                print(f"  {record.pair_id}: {'judge failed' if record.error else 'scored'} "
                      f"in {record.timings_s.total:.0f} s", file=sys.stderr, flush=True)

            evaluator.run(inputs, on_record=on_record)
