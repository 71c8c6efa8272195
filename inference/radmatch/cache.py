"""Content-addressed store of judge answers, plus in-flight sharing within a run.

Key: sha256 over the canonical JSON of (model, backend, prompt version, exemplars sent,
the pair's own message, schema, max_tokens): the prompt version hashes the instructions
and exemplars, so with the exemplar count it stands for the static prefix. A rerun with the same inputs costs no judge call; a reference
shared by many candidates is extracted once even when its calls overlap in time.

The store holds judge answers, which are derived from report text: it lives on the
user's machine (default ~/.cache/radmatch/judge) and can be moved or turned off.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Any, Awaitable, Callable, Optional

CACHE_FORMAT = "radmatch-judge-cache-v2"
MEMO_ENTRIES = 2048  # answers kept in memory; the disk store holds the rest


def cache_key(**parts: Any) -> str:
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(f"{CACHE_FORMAT}\n{canonical}".encode("utf-8")).hexdigest()


class AnswerCache:
    """Disk store (optional, owner-only) and a bounded in-memory memo of judge answers.

    The memo keeps the most recently used `memo_entries` answers, so that memory
    stays flat however many pairs a run has.
    """

    def __init__(self, directory: Optional[Path], *, memo_entries: int = MEMO_ENTRIES) -> None:
        self.directory = Path(directory) if directory else None
        self.memo_entries = memo_entries
        self._memo: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._inflight: dict[str, asyncio.Future] = {}

    def _remember(self, key: str, entry: dict[str, Any]) -> None:
        self._memo[key] = entry
        self._memo.move_to_end(key)
        while len(self._memo) > self.memo_entries:
            self._memo.popitem(last=False)

    def _path(self, key: str) -> Path:
        assert self.directory is not None
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> Optional[dict[str, Any]]:
        if key in self._memo:
            self._memo.move_to_end(key)
            return self._memo[key]
        if self.directory is None:
            return None
        try:
            entry = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        self._remember(key, entry)
        return entry

    def put(self, key: str, entry: dict[str, Any]) -> None:
        self._remember(key, entry)
        if self.directory is None:
            return
        path = self._path(key)
        if not self.directory.is_dir():  # owner-only: entry names derive from report text
            self.directory.mkdir(mode=0o700, parents=True)
        path.parent.mkdir(mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(entry, handle, ensure_ascii=False)
        os.replace(tmp, path)  # atomic: a reader never sees half an entry

    def discard(self, key: str) -> None:
        self._memo.pop(key, None)
        if self.directory is not None:
            self._path(key).unlink(missing_ok=True)

    async def shared(
        self, key: str, compute: Callable[[], Awaitable[dict[str, Any]]]
    ) -> tuple[dict[str, Any], bool]:
        """Run `compute` once per key at a time; concurrent callers await the same result.

        Returns the result and whether this caller ran `compute` (False: it shared a call).
        """
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending), False
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            result = await compute()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        else:
            future.set_result(result)
            return result, True
        finally:
            del self._inflight[key]
