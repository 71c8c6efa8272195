"""The `radmatch-audit` command line: the parser of every command, and `main`.

Each command is a module of this package: its HELP and DESCRIPTION, `add_arguments`
and `run`. What they share is in `common` (exit codes, the error line, reading
records), `judge_options` (the judge's options) and `interrupt` (Ctrl-C). Library
modules never import from here.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from radmatch_audit.cli import (
    agreement, baseline, compare, dashboard, evaluate, install_metric, recompute, redteam, summary,
)
from radmatch_audit.cli.common import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED

# each command module: HELP, DESCRIPTION, add_arguments(parser) and run(args) -> exit code
COMMANDS = {"recompute": recompute, "summary": summary, "evaluate": evaluate, "dashboard": dashboard,
            "install-metric": install_metric, "agreement": agreement, "baseline": baseline,
            "compare": compare, "redteam": redteam}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="radmatch-audit",
        description="Score AI-written radiology reports against reference reports by "
        "counting clinically actionable errors, with a finding-level audit record.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        p = sub.add_parser(name, help=command.HELP, description=command.DESCRIPTION)
        command.add_arguments(p)
        p.set_defaults(func=command.run)
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
