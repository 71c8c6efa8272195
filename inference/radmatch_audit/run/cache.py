"""Content-addressed store of judge answers, plus in-flight sharing within a run.

Key: sha256 over the canonical JSON of (model, backend, prompt version, exemplars sent,
the pair's own message, schema, max_tokens): the prompt version hashes the instructions
and exemplars, so with the exemplar count it stands for the static prefix. A rerun with the same inputs costs no judge call; a reference
shared by many candidates is extracted once even when its calls overlap in time.

The store is one SQLite file (`answers.sqlite3`, WAL mode): an answer costs one
small insert instead of a file of its own, a 100,000-report audit leaves one file, not
350,000, and several processes can share it. The store holds judge answers, which are derived from report
text: it lives on the user's machine (default ~/.cache/radmatch/judge, owner-only) and
can be moved or turned off.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import sqlite3
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Awaitable, Callable, Optional

log = logging.getLogger(__name__)

CACHE_FORMAT = "radmatch-judge-cache-v2"
MEMO_ENTRIES = 2048  # answers kept in memory; the disk store holds the rest
STORE_FILE = "answers.sqlite3"
BUSY_TIMEOUT_MS = 30_000  # another process writing the same store: wait, do not fail


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
        self._db: Optional[sqlite3.Connection] = None
        self._broken = False
        self._db_lock = threading.Lock()  # a connection is used by one thread at a time

    def _store(self) -> sqlite3.Connection:
        if self._db is None:
            assert self.directory is not None
            # owner-only: the entries derive from report text (SQLite gives its WAL
            # and shared-memory files the database file's permissions)
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            path = self.directory / STORE_FILE
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                                 timeout=BUSY_TIMEOUT_MS / 1000)
            try:  # WAL: readers never wait for a writer (not available on some network file systems)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")  # a crash may lose the last answers, never corrupt
            except sqlite3.Error:
                pass
            db.execute("CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, entry TEXT NOT NULL) WITHOUT ROWID")
            self._db = db
        return self._db

    def _execute(self, sql: str, args: tuple) -> Optional[tuple]:
        """Run one statement; the first row of a query. A store that fails is turned off
        (a warning, once): the run goes on with the in-memory memo, never fails for it."""
        with self._db_lock:
            if self._broken:
                return None
            try:
                return self._store().execute(sql, args).fetchone()
            except (sqlite3.Error, OSError) as exc:
                self._broken = True
                log.warning("the answer cache at %s failed (%s); going on without it",
                            self.directory, type(exc).__name__)
                return None

    def close(self) -> None:
        with self._db_lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def _remember(self, key: str, entry: dict[str, Any]) -> None:
        self._memo[key] = entry
        self._memo.move_to_end(key)
        while len(self._memo) > self.memo_entries:
            self._memo.popitem(last=False)

    def get(self, key: str) -> Optional[dict[str, Any]]:
        if key in self._memo:
            self._memo.move_to_end(key)
            return self._memo[key]
        if self.directory is None:
            return None
        row = self._execute("SELECT entry FROM answers WHERE key = ?", (key,))
        if row is None:
            return None
        try:
            entry = json.loads(row[0])
        except ValueError:
            return None
        self._remember(key, entry)
        return entry

    def put(self, key: str, entry: dict[str, Any]) -> None:
        self._remember(key, entry)
        if self.directory is None:
            return
        data = json.dumps(entry, ensure_ascii=False)
        self._execute("INSERT OR REPLACE INTO answers VALUES (?, ?)", (key, data))

    def discard(self, key: str) -> None:
        self._memo.pop(key, None)
        if self.directory is not None:
            self._execute("DELETE FROM answers WHERE key = ?", (key,))

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
