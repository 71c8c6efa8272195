"""A semaphore whose waiters are served lowest priority value first.

The run loop keeps more pairs open than the judge has call slots, so that the judge
always has a call ready; this gate then hands each free slot to the oldest pair's
waiting call. Older pairs finish first, and the number of half-done pairs stays small.

Once the run has read its input to the end (`by_chain`), nothing new will arrive to fill
the slots, and the run ends when its longest chain of calls does. From then on a free slot
goes to the call with the most calls still to follow it in its pair (`chain`), oldest
first among equals: the newest pairs' first calls start at once instead of after every
older pair's last one, and the tail of the run is as short as the calls allow.

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
        # (key, arrival, future, priority, chain); the key is what `by_chain` switches
        self._waiters: list[tuple[tuple[float, ...], int, asyncio.Future, float, int]] = []
        self._arrival = itertools.count()  # ties: first come, first served
        self._chain_first = False
        self._room: list[asyncio.Future] = []  # `has_room` callers

    @property
    def waiting(self) -> int:
        """Calls waiting for a slot (a cancelled waiter stays in the heap until popped)."""
        return sum(not entry[2].done() for entry in self._waiters)

    async def has_room(self) -> None:
        """Return once a slot is free and no call waits for one: the judge could take more."""
        while self._free == 0 or self.waiting:
            room = asyncio.get_running_loop().create_future()
            self._room.append(room)
            await room

    def by_age(self) -> None:
        """Serve the lowest priority value (the oldest pair) first: the default."""
        self._order(chain_first=False)

    def by_chain(self) -> None:
        """Serve the longest remaining chain first (then the lowest priority value)."""
        self._order(chain_first=True)

    def _order(self, chain_first: bool) -> None:
        if chain_first != self._chain_first:
            self._chain_first = chain_first
            self._waiters = [(self._key(p, c), n, w, p, c) for _, n, w, p, c in self._waiters]
            heapq.heapify(self._waiters)

    def _key(self, priority: float, chain: int) -> tuple[float, ...]:
        return (-chain, priority) if self._chain_first else (priority,)

    async def acquire(self, priority: float = 0.0, chain: int = 1) -> None:
        """Wait for a slot; `chain` counts this call and the calls that must follow it."""
        if self._free and not self._waiters:
            self._free -= 1
            return
        waiter = asyncio.get_running_loop().create_future()
        entry = (self._key(priority, chain), next(self._arrival), waiter, priority, chain)
        heapq.heappush(self._waiters, entry)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # handed a slot as it was cancelled
                self.release()
            raise

    def release(self) -> None:
        while self._waiters:
            waiter = heapq.heappop(self._waiters)[2]
            if not waiter.done():  # the slot passes straight to the next waiter
                waiter.set_result(None)
                return
        self._free += 1
        room, self._room = self._room, []
        for future in room:
            if not future.done():
                future.set_result(None)
