"""`radmatch-audit compare A.jsonl B.jsonl`: is system B better than system A?

The statistics are radmatch_audit.read.compare's; this module reads the two files and prints.
"""

from __future__ import annotations

import argparse
import json

from radmatch_audit.cli.common import (
    EXIT_OK, EXIT_SOME_FAILED, check_records_file, checked_lines, fail, no_record_read, open_input,
    report_bad,
)
from radmatch_audit.read.compare import N_PERMUTATIONS, compare_records, dropped_line, format_comparison
from radmatch_audit.core.records import Record
from radmatch_audit.read.resampling import MIN_STUDIES, N_RESAMPLES, SEED


HELP = "is B better than A? paired difference in actionable errors, with interval and p"
DESCRIPTION = (
    "Compare two records files of the same pairs (matched by pair_id): the "
    "mean difference in actionable errors per pair (B minus A), per significance tier "
    "and in total, with a 95% paired bootstrap interval resampling studies and a "
    "two-sided permutation p-value (sign flips by study). Pairs held by one run only, "
    "failed in either run, or with a different reference are dropped and counted. "
    "The same for significant errors (the error adjudication's count), shown first, over "
    "the pairs whose adjudication stands in both runs. "
    f"It warns below {MIN_STUDIES} studies and when a run was scored by the embedded "
    "small judge."
)


def _read(path: str) -> tuple[list[Record], int, set[str]]:
    """Records of a records file (or SystemExit with the CLI's message), bad lines, judges."""
    from radmatch_audit.read.reading import read_file

    with open_input(path) as src:
        try:
            read = read_file(checked_lines(src, path))
        except UnicodeDecodeError:
            raise SystemExit(fail(f"cannot read {path}: it is not UTF-8 text"))
    report_bad(path, read.bad)
    if not read.records:
        raise SystemExit(no_record_read(path))
    return read.records, len(read.bad), read.judges()


def run(args: argparse.Namespace) -> int:
    for path in (args.a, args.b):
        problem = check_records_file(path)
        if problem:
            return fail(problem)
    if args.resamples < 1 or args.permutations < 1:
        return fail("--resamples and --permutations must be at least 1")
    try:
        records_a, bad_a, judges_a = _read(args.a)
        records_b, bad_b, judges_b = _read(args.b)
    except SystemExit as stop:
        return int(stop.code)
    result = compare_records(records_a, records_b, n_resamples=args.resamples,
                             n_permutations=args.permutations, seed=args.seed)
    if not result["n_compared"]:
        common = result["n_dropped"] - result["dropped"]["only_in_a"] - result["dropped"]["only_in_b"]
        if not common:
            return fail(f"{args.a} and {args.b} have no pair_id in common: nothing to compare")
        return fail(f"no pair was scored by both {args.a} and {args.b} ({dropped_line(result['dropped'])})")
    result.update(label_a=args.a, label_b=args.b, judges={"A": sorted(judges_a), "B": sorted(judges_b)})
    result["warnings"] = comparison_warnings(result)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(format_comparison(result))
        for warning in result["warnings"]:
            print(f"warning: {warning}")
    return EXIT_SOME_FAILED if bad_a or bad_b else EXIT_OK


def comparison_warnings(result: dict) -> list[str]:
    """Why the comparison says less than it seems to: too few studies, or a run scored by
    the embedded small judge."""
    from radmatch_audit.judges.judge_notice import EMBEDDED_MODEL, is_embedded_small

    warnings = []
    studies = result["n_studies"]
    if studies < MIN_STUDIES:
        counted = f"{studies} {'study' if studies == 1 else 'studies'}"
        warning = f"{counted}, fewer than {MIN_STUDIES}: the interval is not a reliable 95% interval"
        if result["permutation"]["method"] == "exact":  # a sign vector and its mirror tie
            warning += f"; an exact p over {counted} cannot be below {2.0 ** (1 - studies):.3g}"
        warnings.append(warning)
    small = [side for side, labels in result["judges"].items() if any(map(is_embedded_small, labels))]
    if small:
        warnings.append(
            f"the scores of {' and '.join(small)} come from the embedded small judge ({EMBEDDED_MODEL}), "
            "which only exercises the pipeline: they are not clinical, and neither is their difference"
        )
    return warnings


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", metavar="A.jsonl", help="records of system A (the baseline)")
    p.add_argument("b", metavar="B.jsonl", help="records of system B")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("--resamples", type=int, default=N_RESAMPLES,
                   help=f"bootstrap resamples (default {N_RESAMPLES})")
    p.add_argument("--permutations", type=int, default=N_PERMUTATIONS,
                   help=f"random sign-flip draws when exact enumeration is too large "
                   f"(default {N_PERMUTATIONS})")
    p.add_argument("--seed", type=int, default=SEED, help=f"random seed (default {SEED})")
