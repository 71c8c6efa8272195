"""One event loop in one thread, owned by one object, for all of its async work.

An HTTP client belongs to the loop it was made on; a loop per call (`asyncio.run`)
would strand it. So an `Evaluator` owns a `LoopThread` and runs every coroutine on
it, from any caller: a script, a notebook with its own running loop, a training loop,
the CLI. `close()` stops the loop and joins the thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Coroutine, Optional, TypeVar

T = TypeVar("T")


class LoopThread:
    """A daemon thread running one event loop; `run` submits a coroutine and waits."""

    def __init__(self, name: str = "radmatch") -> None:
        self._name = name
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=self._loop.run_forever, name=self._name, daemon=True)
                self._thread.start()
            return self._loop

    def submit(self, coro: Coroutine[Any, Any, T]) -> "concurrent.futures.Future[T]":
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the loop and return its result.

        When the caller is interrupted (Ctrl-C), the coroutine is cancelled on the loop
        and waited for, so that its judge calls have stopped when this returns.
        """
        if self._thread is not None and threading.current_thread() is self._thread:
            raise RuntimeError("LoopThread.run was called from its own loop; await the coroutine")
        finished = threading.Event()

        async def tracked() -> T:
            try:
                return await coro
            finally:
                finished.set()

        future = self.submit(tracked())
        try:
            return future.result()
        except BaseException:
            if not future.done():
                future.cancel()  # cancels the task on the loop
                finished.wait(timeout=30)
            raise

    def close(self) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=30)
        if not loop.is_running():
            loop.close()
