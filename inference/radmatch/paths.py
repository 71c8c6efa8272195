"""Where RadMatch keeps what it caches on the user's machine."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_DIR_ENV = "RADMATCH_CACHE_DIR"


def cache_root() -> Path:
    """Models and judge answers live here: $RADMATCH_CACHE_DIR, else ~/.cache/radmatch."""
    root = os.environ.get(CACHE_DIR_ENV)
    return Path(root).expanduser() if root else Path.home() / ".cache" / "radmatch"
