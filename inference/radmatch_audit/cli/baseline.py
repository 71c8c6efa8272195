"""`radmatch-audit baseline`: the paper's single-call baselines (count, enumerate) as records."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from radmatch_audit.stages.baselines import METHODS
from radmatch_audit.cli.common import EXIT_OK, EXIT_SOME_FAILED, existing_output, fail, output_problem
from radmatch_audit.cli.judge_options import (
    add_judge_arguments, add_pairs_arguments, judge_config, note_small_judge, pair_rows,
)

HELP = "the paper's single-call baselines (count, enumerate) as records"
DESCRIPTION = (
    "Ask the judge, once per pair, for the number of clinically significant "
    "errors (--method count: a bare integer) or for the list of them (--method enumerate: "
    "the count is its length), schema-constrained, and write one baseline record per pair "
    "(docs/agreement.md), which `radmatch-audit agreement` reads beside RadMatch's records. "
    "Judge options and RADMATCH_* variables are those of `radmatch-audit evaluate`."
)


def run(args: argparse.Namespace) -> int:
    from radmatch_audit.judges.base import JudgeUnavailable
    from radmatch_audit.run.pipeline import Evaluator
    from radmatch_audit.files.record_io import open_private
    from radmatch_audit.core.records import BaselineRecord, PairInput, failed_input

    try:
        config = judge_config(args)
        jobs, bad = [], []
        for pair_id, where, item in pair_rows(args):
            if isinstance(item, PairInput):
                jobs.append((pair_id, item, where))
            else:
                bad.append((pair_id, where, item))
    except (ValueError, OSError) as exc:
        return fail(str(exc))
    if not jobs and not bad:
        return fail(f"{args.input} holds no pairs")
    output = Path(args.output)
    problem = output_problem(output, args.input) or existing_output(output, force=args.force)
    if problem:
        return fail(problem)
    note_small_judge(config)
    try:
        runner = Evaluator.from_config(config, method=args.method)
    except Exception as exc:  # bad URL, refused endpoint, missing extra
        return fail(str(exc))
    done = failed = 0
    errors_total = 0.0
    started = time.perf_counter()
    with runner:
        try:
            runner.check()
        except JudgeUnavailable as exc:  # before OUT is created
            return fail(str(exc))
        try:
            with open_private(output, "w") as out:
                for pair_id, where, item in bad:  # nothing is lost: a bad row becomes a failed record
                    failure = failed_input(pair_id, f"{where}: {item.message}", source=where,
                                           method=args.method, **item.inputs)
                    out.write(failure.to_json() + "\n")
                    failed += 1

                def on_record(record: BaselineRecord) -> None:
                    nonlocal done, failed, errors_total
                    out.write(record.to_json() + "\n")
                    out.flush()
                    if record.errors is None:
                        failed += 1
                    else:
                        done += 1
                        errors_total += record.errors

                runner.run(jobs, on_record=on_record)
        except OSError as exc:  # a full disk, a quota: say what failed
            return fail(f"writing the baseline records to {output} failed "
                        f"({exc.strerror or type(exc).__name__}); run the command again once it can write")
    elapsed = time.perf_counter() - started
    mean = f"{errors_total / done:.2f}" if done else "n/a"
    print(f"{args.method}: {done} pair(s) scored, {failed} failed, mean errors {mean}, "
          f"{elapsed:.1f} s ({elapsed / max(1, len(jobs)):.2f} s per pair); records in {output}")
    return EXIT_SOME_FAILED if failed else EXIT_OK


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", metavar="INPUT", help="pairs: .jsonl, .csv, or a saved `datasets` folder")
    p.add_argument("--method", required=True, choices=list(METHODS))
    p.add_argument("-o", "--output", required=True, metavar="RECORDS.jsonl",
                   help="baseline records, created owner-only (they hold report text)")
    p.add_argument("--force", action="store_true",
                   help="replace RECORDS.jsonl when it exists (without --force an existing one that "
                        "holds records is refused)")
    add_pairs_arguments(p, "run only the first N rows")
    add_judge_arguments(p, "judge (as for `radmatch-audit evaluate`)")
