"""The audit dashboard: one offline, self-contained HTML page from a records file.

    radmatch dashboard RECORDS.jsonl -o report.html [--compare OTHER.jsonl]

`build_dashboard` writes the page; `add_dashboard_parser` adds the subcommand to the
`radmatch` CLI and `run_dashboard` is its handler.
"""

from __future__ import annotations

import argparse
from typing import Any

from radmatch.dashboard.build import build_dashboard, embed_json, locate_evidence

__all__ = [
    "add_dashboard_parser",
    "build_dashboard",
    "embed_json",
    "locate_evidence",
    "run_dashboard",
]


def add_dashboard_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `dashboard` to an argparse subparsers object; its handler is `run_dashboard`."""
    parser = subparsers.add_parser(
        "dashboard",
        help="write an offline HTML audit page from a records file",
        description=(
            "Write one self-contained HTML page (no network access when opened) with the "
            "corpus scores, a sortable and filterable table of pairs, and a finding-level "
            "view of each pair. With --compare, also show the per-pair difference in "
            "actionable errors against a second records file of the same pairs."
        ),
    )
    parser.add_argument("records", help="records file (JSONL) written by radmatch")
    parser.add_argument(
        "-o", "--output", default="report.html", help="HTML file to write (default: report.html)"
    )
    parser.add_argument(
        "--compare",
        metavar="OTHER.jsonl",
        default=None,
        help="records of the same pairs from another system or judge",
    )
    parser.set_defaults(func=run_dashboard)
    return parser


def run_dashboard(args: argparse.Namespace) -> int:
    """Handler of `radmatch dashboard`: build the page, print one line, return 0."""
    result = build_dashboard(args.records, args.output, compare_path=args.compare)
    summary = result["summary"]
    print(
        f"wrote {result['output']} ({result['bytes'] / 1e6:.1f} MB): "
        f"{summary.get('n_pairs')} pairs, {summary.get('n_failed')} failed"
    )
    return 0
