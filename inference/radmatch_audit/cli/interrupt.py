"""Ctrl-C and SIGTERM during a judge run: stop at once, keep every record, say how to go on.

Cancelling a run waits for the calls in flight, and an in-process judge's prefill cannot
stop mid-way: tens of seconds on a busy CPU, then asyncio's complaints about tasks it
had to drop. Nothing is worth that wait: every record is written and flushed as its
pair finishes, and `--resume` drops a torn last line. So on either signal the handler
lets the record being written finish (the writes are serialized by `guard`), prints one
line, the resume hint, and ends the process: exit 130 (SIGINT) or 143 (SIGTERM).
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

T = TypeVar("T")
SIGNALS = (signal.SIGINT, signal.SIGTERM)
WRITE_WAIT_S = 1.0  # the longest wait for a record being written (a write takes milliseconds)


class RunStopper:
    """Signal handlers for one run; `message` is the line printed when a signal ends it."""

    def __init__(self, message: str) -> None:
        self.message = message
        self._writing = threading.Lock()
        self._stopped = False

    def guard(self, write: Callable[[T], None]) -> Callable[[T], None]:
        """`write` (a record sink), run under the lock the handler takes before exiting."""
        def guarded(item: T) -> None:
            with self._writing:
                if not self._stopped:
                    write(item)
        return guarded

    @contextmanager
    def installed(self) -> Iterator["RunStopper"]:
        """SIGINT and SIGTERM end the process while the body runs (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {signum: signal.signal(signum, self._stop) for signum in SIGNALS}
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _stop(self, signum: int, frame: object) -> None:
        self._writing.acquire(timeout=WRITE_WAIT_S)  # held from here to the exit
        self._stopped = True
        # os.write, not print: another thread may hold stderr's buffer (the progress bar)
        os.write(2, f"\n{self.message}\n".encode("utf-8", "replace"))
        os._exit(128 + signum)
