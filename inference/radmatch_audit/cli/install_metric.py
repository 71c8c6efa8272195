"""`radmatch-audit install-metric`: make evaluate.load("radmatch") work, offline included."""

from __future__ import annotations

import argparse
from pathlib import Path

from radmatch_audit.cli.common import EXIT_OK, fail

HELP = "make evaluate.load(\"radmatch\") work, offline included"
DESCRIPTION = (
    "Copy the RadMatch metric script into the Hugging Face evaluate "
    "modules cache, so that evaluate.load(\"radmatch\") finds it from any directory, "
    "with HF_EVALUATE_OFFLINE=1 and without the Hub. Run it again after upgrading "
    "radmatch. Without it, load the metric with "
    "evaluate.load(radmatch_audit.hf.metric.script_path())."
)


def run(args: argparse.Namespace) -> int:
    from radmatch_audit.hf.metric_install import install_metric

    try:
        target = install_metric(Path(args.modules_cache) if args.modules_cache else None)
    except (OSError, ImportError) as exc:
        return fail(str(exc))
    print(f"installed the RadMatch metric at {target}")
    print("load it with: evaluate.load(\"radmatch\")  (works with HF_EVALUATE_OFFLINE=1)")
    return EXIT_OK


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--modules-cache",
        metavar="DIR",
        help="evaluate's modules cache (default: $HF_MODULES_CACHE, else $HF_HOME/modules, "
        "else ~/.cache/huggingface/modules)",
    )
