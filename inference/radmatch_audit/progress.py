"""The pairs' progress bar on stderr (tqdm), shown by `radmatch-audit evaluate` and the metric."""

from __future__ import annotations

import sys


class _Silent:
    def update(self, n: int) -> None: ...
    def set_postfix(self, **kw) -> None: ...
    def close(self) -> None: ...


def progress_bar(total: int, *, quiet: bool):
    """A tqdm bar over `total` pairs, or one that shows nothing (quiet, or no tqdm)."""
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        tqdm = None
    if quiet or tqdm is None:
        return _Silent()
    return tqdm(total=total, unit="pair", file=sys.stderr, dynamic_ncols=True)
