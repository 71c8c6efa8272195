"""Run the red-team set (redteam/pairs.jsonl) through the judge and check each pair's expectations.

    .venv/bin/python scripts/redteam.py --base-url http://127.0.0.1:8000/v1 -o redteam-records.jsonl
    .venv/bin/python scripts/redteam.py --limit 3 -o small.jsonl        # embedded SmolLM2 (plumbing only)
    .venv/bin/python scripts/redteam.py --records redteam-records.jsonl  # re-check, no judge

The pairs go through the normal pipeline (`Evaluator.from_config`, as `radmatch-audit
evaluate` builds it; every RADMATCH_* variable applies); records are written owner-only
as they finish. Then each pair's expectations are checked from its record
(radmatch_audit.read.redteam) and a table is printed: pair, behaviour, pass / fail / judge-failed,
and why (finding ids and the set's own patterns, never report text). Exits 0 whatever
the pass rate; 2 on a usage error (bad options or files, a judge that cannot serve).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

from radmatch_audit import Evaluator, PairInput, read_records
from radmatch_audit.cli.judge_options import add_judge_arguments, judge_config
from radmatch_audit.read.redteam import PairResult, check_records, load_pairs

DEFAULT_PAIRS = Path(__file__).resolve().parents[1] / "redteam" / "pairs.jsonl"
BEHAVIOUR_WIDTH = 60
EXIT_USAGE = 2


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", default=str(DEFAULT_PAIRS), help="the red-team set (default redteam/pairs.jsonl)")
    p.add_argument("-o", "--output", metavar="RECORDS.jsonl", help="records file to write (needed to run the judge)")
    p.add_argument("--records", metavar="RECORDS.jsonl", help="check these records instead of running a judge")
    p.add_argument("--limit", type=int, help="run only the first N pairs")
    p.add_argument("--pair", action="append", metavar="ID", help="run only this pair (repeatable)")
    add_judge_arguments(p, "judge (as radmatch-audit evaluate; RADMATCH_* variables apply)")
    args = p.parse_args(argv)
    if bool(args.records) == bool(args.output):
        p.error("give either -o RECORDS (run the judge) or --records RECORDS (check only)")
    if args.limit is not None and args.limit < 1:
        p.error("--limit must be at least 1")
    return args


def select(pairs: list[dict], args: argparse.Namespace) -> list[dict]:
    if args.pair:
        unknown = set(args.pair) - {p["pair_id"] for p in pairs}
        if unknown:
            raise ValueError(f"no pair {', '.join(sorted(unknown))} in {args.pairs}")
        pairs = [p for p in pairs if p["pair_id"] in args.pair]
    return pairs[: args.limit] if args.limit else pairs


def run_judge(pairs: list[dict], args: argparse.Namespace) -> None:
    """Evaluate the pairs into args.output, the way `radmatch-audit evaluate` does."""
    from radmatch_audit.judges.base import JudgeUnavailable
    from radmatch_audit.files.record_io import RecordWriter

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


def print_table(results: list[PairResult], missing: list[str], out=sys.stdout) -> None:
    rows = [("pair", "behaviour", "result", "why")]
    for r in results:
        behaviour = r.behaviour if len(r.behaviour) <= BEHAVIOUR_WIDTH else r.behaviour[: BEHAVIOUR_WIDTH - 3] + "..."
        rows.append((r.pair_id, behaviour, r.status, r.why))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:3])) + "  " + row[3], file=out)
    passed = sum(r.status == "pass" for r in results)
    failed_judge = sum(r.status == "judge-failed" for r in results)
    share = f" ({100 * passed / len(results):.0f} %)" if results else ""
    print(f"\npass rate: {passed}/{len(results)}{share}; judge-failed: {failed_judge}", file=out)
    if missing:
        print(f"{len(missing)} pair(s) of the set have no record: {', '.join(missing)}", file=out)


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    try:
        pairs = select(load_pairs(args.pairs), args)
        if args.output:
            run_judge(pairs, args)
        records = list(read_records(args.records or args.output))
    except (ValueError, OSError) as exc:
        print(f"redteam: {exc}", file=sys.stderr)
        return EXIT_USAGE
    results, missing = check_records(records, pairs)
    print_table(results, missing)
    return 0


if __name__ == "__main__":
    sys.exit(main())
