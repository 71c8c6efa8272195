"""`radmatch-audit evaluate`: pairs in, one audit record per pair out, then the corpus summary.

Order of work, so that a mistake costs nothing: the options, the input file (read
once through, ids and bad rows only), the output folder, the judge (loaded, then
checked once), and only then the output file is opened. Records stream: each is
written and flushed as its pair finishes; `--resume` keeps what an interrupted run
wrote and evaluates the rest. An existing OUT is never replaced unasked: `--resume`
keeps it, `--force` replaces it. Ctrl-C or SIGTERM stops at once (`cli.interrupt`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Iterator, Optional

from radmatch_audit.cli.common import (
    EXIT_OK, EXIT_SOME_FAILED, existing_output, fail, output_problem, print_summary,
)
from radmatch_audit.cli.interrupt import RunStopper
from radmatch_audit.cli.judge_options import (
    add_judge_arguments, add_pairs_arguments, judge_config, note_small_judge, pair_rows,
)
from radmatch_audit.read.corpus import CorpusSummary

HELP = "score candidate reports against references with the judge"
DESCRIPTION = (
    "Run the judge pipeline over pairs from JSONL, CSV or a `datasets` "
    "dataset saved on disk, write one audit record per pair to OUT as it goes, then "
    "print the corpus summary. Without a judge server the embedded CPU judge runs "
    "(pipeline check only). Every option also has a RADMATCH_* environment variable."
)

SHOWN_PROBLEMS = 20


def _scan(args: argparse.Namespace, modality: str) -> tuple[int, int, dict[str, bytes]]:
    """Read the input once: (rows, bad rows, pair_id -> fingerprint of its row), naming
    the first bad rows on stderr. `--resume` evaluates again a record whose row changed.

    Raises ValueError for a repeated pair_id (`pair_rows`): nothing has been written yet.
    """
    from radmatch_audit.files.record_io import pair_fingerprint

    fingerprints: dict[str, bytes] = {}
    rows = bad = 0
    for pair_id, where, item in pair_rows(args):
        rows += 1
        if _is_pair(item):  # the record's modality is the row's, else the run's
            fingerprints[pair_id] = pair_fingerprint(
                item.reference, item.candidate, item.indication, item.modality or modality)
        else:
            known = item.inputs
            fingerprints[pair_id] = pair_fingerprint(
                known.get("reference"), known.get("candidate"), known.get("indication"),
                known.get("modality"))
            bad += 1
            if bad <= SHOWN_PROBLEMS:
                print(f"{args.input}: {where}: {item.message}", file=sys.stderr)
    return rows, bad, fingerprints


def _is_pair(item: object) -> bool:
    from radmatch_audit.core.records import PairInput

    return isinstance(item, PairInput)


def run(args: argparse.Namespace) -> int:
    stopper = RunStopper("radmatch-audit: interrupted before any record was written")
    with stopper.installed():
        return _evaluate(args, stopper)


def _evaluate(args: argparse.Namespace, stopper: RunStopper) -> int:
    from radmatch_audit.judges.judge_notice import judge_identity
    from radmatch_audit.judges.base import JudgeUnavailable
    from radmatch_audit.run.pipeline import Evaluator, freeze_setup_heap
    from radmatch_audit.files.record_io import RecordsRefused, RecordsWriteError

    try:
        config = judge_config(args)
        rows, bad, fingerprints = _scan(args, config.modality)
    except (ValueError, OSError) as exc:  # InputError is a ValueError
        return fail(str(exc))
    problem = output_problem(args.output, args.input) or existing_output(
        args.output, resume=args.resume, force=args.force)
    if problem:
        return fail(problem)
    if rows == 0:
        return fail(f"{args.input} holds no pairs")
    if bad:
        print(f"{bad} row(s) of {args.input} cannot be evaluated; each gets a failed record", file=sys.stderr)

    note_small_judge(config)
    if config.samples > 1 and config.temperature == 0:
        print(f"note: {config.samples} samples at temperature 0 are greedy and repeat one "
              "another; pass --temperature (e.g. 0.7) to measure stability", file=sys.stderr)
    try:
        evaluator = Evaluator.from_config(config)
    except Exception as exc:  # bad URL, refused endpoint, missing extra: tell the user the fix
        return fail(str(exc))
    with evaluator:
        try:
            evaluator.check()
        except JudgeUnavailable as exc:
            return fail(str(exc))
        freeze_setup_heap()  # this process is ours: no full GC pass re-scans the setup
        judge = judge_identity(evaluator.judge)
        try:
            summary = _write_records(args, evaluator, rows, fingerprints, stopper)
        except (RecordsWriteError, RecordsRefused) as exc:
            return fail(str(exc))
    print_summary(summary, as_json=args.json, judge=judge)
    failed = summary.to_dict()["n_failed"]
    if failed:
        print(f"{failed} pair(s) failed; their records carry the reason", file=sys.stderr)
    return EXIT_SOME_FAILED if failed else EXIT_OK


def _write_records(args: argparse.Namespace, evaluator, rows: int, fingerprints: dict[str, bytes],
                   stopper: RunStopper) -> CorpusSummary:
    from radmatch_audit.run.progress import progress_bar, stage_reporter
    from radmatch_audit.read.reading import RecordReader
    from radmatch_audit.files.record_io import RecordWriter
    from radmatch_audit.core.records import failed_input

    summary = CorpusSummary(streaming=True)
    with RecordWriter(args.output, resume=args.resume, inputs=fingerprints) as writer:
        stopper.message = f"interrupted; records so far are in {args.output}: add --resume to go on"
        resumed = writer.resumed
        if writer.done:
            print(f"resuming: {len(writer.done)} pair(s) of {args.output} are done", file=sys.stderr)
        if resumed.changed:
            print(f"resuming: {resumed.changed} record(s) of {args.output} do not match their "
                  "input row (reference, candidate, indication or modality changed); "
                  "those pairs are evaluated again", file=sys.stderr)
        if resumed.not_in_input:
            print(f"resuming: {len(resumed.not_in_input)} record(s) of {args.output} are of "
                  f"pairs not in {args.input}; they stay in the file but are not counted "
                  "in this summary", file=sys.stderr)
        progress = progress_bar(rows - len(writer.done), quiet=args.quiet)
        evaluator.calls.on_call = stage_reporter(progress)
        failed = [0]  # bad input rows included: the bar counts every failed record

        @stopper.guard  # a signal waits for the record being written, then ends the run
        def on_record(record) -> None:
            writer.write(record)
            summary.add(record)
            failed[0] += record.error is not None
            progress.update(1)
            progress.set_postfix(pairs_per_s=f"{evaluator.stats.pairs_per_s:.3g}", failed=failed[0])

        def jobs() -> Iterator[tuple[str, object, Optional[str]]]:
            for pair_id, where, item in pair_rows(args):
                if pair_id in writer.done:
                    continue
                if _is_pair(item):
                    yield pair_id, item, where
                else:  # nothing is lost: a bad row becomes a failed record
                    on_record(failed_input(pair_id, f"{where}: {item.message}", source=where, **item.inputs))

        try:
            evaluator.run(jobs(), on_record=on_record)
        finally:
            progress.close()
    if writer.done:  # the summary covers the input's pairs in the file, resumed ones included
        records = RecordReader(args.output)
        summary = CorpusSummary(streaming=True).extend(r for r in records if r.pair_id in fingerprints)
    return summary


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", metavar="INPUT", help="pairs: .jsonl, .csv, or a folder from Dataset.save_to_disk")
    p.add_argument("-o", "--output", required=True, metavar="RECORDS.jsonl",
                   help="records file, created owner-only (it holds report text)")
    p.add_argument("--resume", action="store_true",
                   help="keep the complete records already in OUT and evaluate only the rest "
                   "(pairs whose judge failed, or whose input row changed, are evaluated "
                   "again; records of pairs no longer in INPUT stay but are not counted)")
    p.add_argument("--force", action="store_true",
                   help="replace OUT when it exists (without --resume or --force an existing "
                   "OUT with records is refused)")
    add_pairs_arguments(p, "evaluate only the first N rows")
    add_judge_arguments(p, "judge (defaults from RADMATCH_* variables)", run_options=True)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
