"""Where RadMatch keeps what it caches on the user's machine, and where it was installed
from (for the pip lines that error messages print)."""

from __future__ import annotations

import json
import os
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

CACHE_DIR_ENV = "RADMATCH_CACHE_DIR"


def cache_root() -> Path:
    """Models and judge answers live here: $RADMATCH_CACHE_DIR, else ~/.cache/radmatch."""
    root = os.environ.get(CACHE_DIR_ENV)
    return Path(root).expanduser() if root else Path.home() / ".cache" / "radmatch"


DISTRIBUTION = "radmatch-audit"  # not `radmatch`: on PyPI that name is the paper's own package


def install_command(extra: str) -> str:
    """A pip line that installs `extra` of this RadMatch, from where it came.

    A bare `pip install radmatch` resolves to the paper authors' package, so the line
    names this checkout (or the URL pip recorded when it installed us: PEP 610's
    direct_url.json), never a package name.
    """
    return f"pip install '{_source()}[{extra}]'"


def _source() -> str:
    """This checkout, else the URL pip recorded, else a placeholder to fill in."""
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "inference").is_dir():
        return str(checkout)
    try:
        recorded = json.loads(distribution(DISTRIBUTION).read_text("direct_url.json") or "{}")
    except (PackageNotFoundError, ValueError, OSError):
        recorded = {}
    url = recorded.get("url", "")
    if url.startswith("file://"):
        return url.removeprefix("file://")
    if "vcs_info" in recorded:
        return f"{DISTRIBUTION} @ {recorded['vcs_info'].get('vcs', 'git')}+{url}"
    return "/path/to/your/radmatch-audit/checkout"
