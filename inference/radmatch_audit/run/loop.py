"""One event loop in one thread, owned by one object, for all of its async work; and
`stream`, the windowed scheduler a run's pairs go through on it.

An HTTP client belongs to the loop it was made on; a loop per call (`asyncio.run`)
would strand it. So an `Evaluator` owns a `LoopThread` and runs every coroutine on
it, from any caller: a script, a notebook with its own running loop, a training loop,
the CLI. `close()` stops the loop and joins the thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections import deque
from typing import Any, Awaitable, Callable, Coroutine, Iterable, Optional, TypeVar

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


async def stream(
    jobs: Iterable[Any],
    handle: Callable[[Any, int], Awaitable[None]],
    window: int,
    *,
    on_input_end: Optional[Callable[[], None]] = None,
    room: Optional[Callable[[], Awaitable[None]]] = None,
    floor: int = 0,
    read_ahead: Optional[int] = None,
) -> None:
    """`await handle(job, position)` for every job, at most `window` at once.

    With `room`, a job beyond the first `floor` running is opened only once `await
    room()` returns (the judge has a free slot no call is waiting for): jobs are opened
    as fast as the judge can take their calls, not `window` at once. Candidates of one
    reference share its calls, so a fixed number of open pairs can leave the judge half
    idle; opening on demand keeps it full without holding more pairs than it needs.

    Jobs are read up to `read_ahead` (default `window`) ahead. Once the input is
    exhausted, `on_input_end()` is called and the jobs left are opened without waiting
    for room: the run's tail is then known, and its chains of calls can start together
    rather than one by one.

    Memory stays flat however long `jobs` is. The first exception (say, a full disk
    when a record is written) stops reading jobs, cancels the running ones and
    propagates.
    """
    slots = asyncio.Semaphore(window)
    running: set[asyncio.Task] = set()
    broken: list[BaseException] = []
    ahead: deque[tuple[int, Any]] = deque()
    numbered = enumerate(jobs)
    exhausted = False

    def read_on() -> None:
        nonlocal exhausted
        while not exhausted and len(ahead) < (read_ahead or window):
            try:
                ahead.append(next(numbered))
            except StopIteration:
                exhausted = True
                if on_input_end is not None:
                    on_input_end()

    async def one(job: Any, position: int) -> None:
        try:
            await handle(job, position)
        except BaseException as exc:
            broken.append(exc)
            raise
        finally:
            slots.release()

    try:
        read_on()
        while ahead:
            await slots.acquire()
            if room is not None and not exhausted and len(running) >= floor:
                await room()
            if broken:
                raise broken[0]
            position, job = ahead.popleft()
            task = asyncio.ensure_future(one(job, position))
            running.add(task)
            task.add_done_callback(running.discard)
            read_on()
            if room is not None and not exhausted:
                await asyncio.sleep(0)  # the job runs up to its first judge call before the next is weighed
        await asyncio.gather(*running)
    except BaseException:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        raise
