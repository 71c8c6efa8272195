"""The pairs' progress bar on stderr (tqdm), shown by `radmatch-audit evaluate` and the metric."""

from __future__ import annotations

import sys
from collections.abc import Callable


class _Silent:
    def update(self, n: int) -> None: ...
    def set_postfix(self, **kw) -> None: ...
    def set_description_str(self, desc: str) -> None: ...
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


def stage_reporter(bar) -> Callable[[str, str], None]:
    """A `JudgeCalls.on_call` hook that shows the judge's current stage before the bar
    (`extract running`, `extract done in 95 s`): an in-process judge takes minutes a
    pair, and the bar would otherwise show no sign of life until the pair's record."""

    def on_call(stage: str, event: str) -> None:
        bar.set_description_str(f"{stage} {event}")

    return on_call
