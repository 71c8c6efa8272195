"""`radmatch-audit agreement`: records against radiologists' annotations, in one table."""

from __future__ import annotations

import argparse
import json
import sys

from radmatch_audit.agreement import FORMATS
from radmatch_audit.cli.common import EXIT_OK, fail
from radmatch_audit.read.resampling import N_RESAMPLES, SEED

HELP = "agreement of records with radiologists' error counts (tau-b, blocked tau-b, r)"
DESCRIPTION = (
    "Correlate each records file's per-pair error counts (RadMatch records: "
    "significant errors, where the error adjudication ran, and actionable errors, as two "
    "methods; baseline records: their count) with radiologists' annotations: "
    "Kendall's tau-b, blocked tau-b within studies and Pearson r per endpoint, with 95% "
    "intervals from a bootstrap over studies, as a markdown table (or --json). Records "
    "join annotations by pair_id: write a set's pairs with --emit-pairs, evaluate them, "
    "then run agreement on the records."
)


def run(args: argparse.Namespace) -> int:
    from radmatch_audit.agreement import AnnotationError, load_annotations

    try:
        annotations = load_annotations(args.annotations, args.format)
    except (AnnotationError, OSError) as exc:
        return fail(str(exc))
    if args.emit_pairs:
        if _is_an_input(args.emit_pairs, args.annotations):
            return fail(f"--emit-pairs {args.emit_pairs} is a file of the annotation set "
                        f"{args.annotations}; name another file")
        return _emit(annotations, args.emit_pairs)
    if not args.records:
        return fail("give one or more records files (or --emit-pairs PAIRS.jsonl)")
    labels = args.labels.split(",") if args.labels else []
    if labels and len(labels) != len(args.records):
        return fail(f"--labels names {len(labels)} method(s) for {len(args.records)} records file(s)")
    from radmatch_audit.agreement.methods import read_methods
    from radmatch_audit.agreement.report import compare, to_markdown

    methods = []
    for i, path in enumerate(args.records):
        try:
            found = read_methods(path, labels[i] if labels else None)
        except (OSError, UnicodeDecodeError) as exc:
            return fail(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}")
        if not found[-1].errors and not found[-1].failed:
            return fail(f"{path} holds no record with a pair_id (is it a records file?)")
        methods.extend(found)
    seen = set()
    for method in methods:  # two files with one label would overwrite each other
        while method.label in seen:
            method.label += "'"
        seen.add(method.label)
    report = compare(annotations, methods, common=args.common, n_resamples=args.resamples, seed=args.seed)
    print(json.dumps(report, indent=2) if args.json else to_markdown(report))
    if not any(m["scored"] for m in report["methods"]):
        print("radmatch-audit: no record has an error count (every pair failed)", file=sys.stderr)
    elif not any(m["scored"] - m["not_annotated"] for m in report["methods"]):
        print("radmatch-audit: no record's pair_id is in the annotations: see docs/agreement.md, "
              "'Joining records to annotations'", file=sys.stderr)
    return EXIT_OK


def _is_an_input(path: str, annotations: str) -> bool:
    """The annotation path itself, or a file in its folder (compared by device and inode)."""
    from pathlib import Path

    from radmatch_audit.files.record_io import same_file

    root = Path(annotations)
    inputs = [root] + (sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [])
    return any(same_file(path, p) for p in inputs)


def _emit(annotations, path: str) -> int:
    from radmatch_audit.files.record_io import open_private

    try:
        with open_private(path, "w") as out:  # the pairs hold report text: owner-only
            n = 0
            for row in annotations.pair_rows():
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
                n += 1
    except OSError as exc:
        return fail(f"cannot write {path}: {exc.strerror}")
    print(f"wrote {n} {annotations.name} pairs to {path}", file=sys.stderr)
    return EXIT_OK


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("records", nargs="*", metavar="RECORDS.jsonl",
                   help="records files, one per method (RadMatch, baselines)")
    p.add_argument("--annotations", required=True, metavar="PATH",
                   help="the annotation set: a folder (radpref, rexval) or the CSV (radevalexpert)")
    p.add_argument("--format", default="radpref", choices=list(FORMATS),
                   help="annotation set layout (default radpref)")
    p.add_argument("--emit-pairs", metavar="PAIRS.jsonl",
                   help="write the set's pairs (pair_id, study_id, reference, candidate, ...) "
                   "as `radmatch-audit evaluate` input, owner-only, and stop")
    p.add_argument("--labels", help="comma-separated method names, one per records file "
                   "(default: from the records, e.g. 'radmatch (model)')")
    p.add_argument("--common", action="store_true",
                   help="compare every method on the pairs all of them scored")
    p.add_argument("--resamples", type=int, default=N_RESAMPLES,
                   help=f"bootstrap resamples (default {N_RESAMPLES})")
    p.add_argument("--seed", type=int, default=SEED, help=f"bootstrap seed (default {SEED})")
    p.add_argument("--json", action="store_true", help="print the table as JSON")
