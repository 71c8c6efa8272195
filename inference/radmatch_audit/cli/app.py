"""The `radmatch-audit` command line: the parser of every command, and `main`.

Each command is a module of this package (`add_<command>_parser` and its handler);
what they share is in `common` (exit codes, the error line, reading records) and
`judge_options` (the judge's options). Library modules never import from here.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from radmatch_audit.cli.agreement import add_agreement_parser
from radmatch_audit.cli.baseline import add_baseline_parser
from radmatch_audit.cli.common import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED
from radmatch_audit.cli.compare import add_compare_parser
from radmatch_audit.cli.dashboard import add_dashboard_parser
from radmatch_audit.cli.evaluate import add_evaluate_parser
from radmatch_audit.cli.install_metric import add_install_metric_parser
from radmatch_audit.cli.recompute import add_recompute_parser
from radmatch_audit.cli.summary import add_summary_parser

COMMANDS = (add_recompute_parser, add_summary_parser, add_evaluate_parser, add_dashboard_parser,
            add_install_metric_parser, add_agreement_parser, add_baseline_parser, add_compare_parser)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="radmatch-audit",
        description="Score AI-written radiology reports against reference reports by "
        "counting clinically actionable errors, with a finding-level audit record.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in COMMANDS:
        register(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return code
    except KeyboardInterrupt:
        print("radmatch-audit: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader went away (`radmatch-audit ... | head`): stop quietly. Python's recipe:
        # point stdout at devnull so that the flush at exit cannot fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
