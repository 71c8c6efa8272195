"""A semaphore whose waiters are served lowest priority value first.

The run loop keeps more pairs open than the judge has call slots, so that the judge
always has a call ready; this gate then hands each free slot to the oldest pair's
waiting call. Older pairs finish first, and the number of half-done pairs stays small.

>>> import asyncio
>>> async def demo():
...     gate, order = CallGate(1), []
...     await gate.acquire(0)
...     async def call(priority):
...         await gate.acquire(priority)
...         order.append(priority)
...         gate.release()
...     tasks = [asyncio.ensure_future(call(p)) for p in (5, 2, 9)]
...     await asyncio.sleep(0)
...     gate.release()
...     await asyncio.gather(*tasks)
...     return order
>>> asyncio.run(demo())
[2, 5, 9]
"""

from __future__ import annotations

import asyncio
import heapq
import itertools


class CallGate:
    """At most `slots` holders; a freed slot goes to the waiter with the lowest priority value."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"a call gate needs at least one slot; got {slots}")
        self.slots = slots
        self._free = slots
        self._waiters: list[tuple[float, int, asyncio.Future]] = []
        self._arrival = itertools.count()  # ties: first come, first served

    @property
    def in_use(self) -> int:
        return self.slots - self._free

    async def acquire(self, priority: float = 0.0) -> None:
        if self._free and not self._waiters:
            self._free -= 1
            return
        waiter = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._arrival), waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # handed a slot as it was cancelled
                self.release()
            raise

    def release(self) -> None:
        while self._waiters:
            _, _, waiter = heapq.heappop(self._waiters)
            if not waiter.done():  # the slot passes straight to the next waiter
                waiter.set_result(None)
                return
        self._free += 1

    async def __aenter__(self) -> None:  # priority 0; use acquire(p) for another
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()
