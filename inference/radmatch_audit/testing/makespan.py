"""The ideal makespan of a call graph on a server with a fixed number of slots.

A benchmark divides it by the wall time it measured: the share of the server's capacity
the client kept busy.
"""

from __future__ import annotations

import heapq
from typing import Hashable, Mapping, Sequence

Calls = Mapping[Hashable, tuple[float, Sequence[Hashable]]]


def ideal_makespan(calls: Calls, capacity: int) -> float:
    """Seconds to serve `calls` on `capacity` identical slots, scheduled greedily.

    `calls` maps each call to (its duration, the calls whose answers it needs). A call is
    ready once those have finished. The schedule is critical-path list scheduling, an
    event simulation with no client overhead: at time 0 and whenever a call finishes, free
    slots take ready calls, longest remaining chain first (the call's duration plus the
    longest chain of calls waiting on it), ties in the order `calls` lists them. Greedy
    is not always optimal but is within a factor 2 of it (Graham), and never below
    max(longest chain, total work / capacity), which it meets when the calls are many and
    alike, as in a benchmark's workload.
    """
    if capacity < 1:
        raise ValueError("capacity must be at least 1")
    order = {call: i for i, call in enumerate(calls)}
    waiting_on = {call: 0 for call in calls}
    dependents: dict[Hashable, list[Hashable]] = {call: [] for call in calls}
    for call, (_, needs) in calls.items():
        for need in set(needs):
            if need not in calls:
                raise ValueError(f"{call!r} needs {need!r}, which is not a call")
            dependents[need].append(call)
            waiting_on[call] += 1

    tail: dict[Hashable, float] = {}  # duration plus the longest chain behind the call
    topo = [c for c in calls if not waiting_on[c]]
    remaining = dict(waiting_on)
    for call in topo:  # Kahn's order; `topo` grows as calls become free
        for nxt in dependents[call]:
            remaining[nxt] -= 1
            if not remaining[nxt]:
                topo.append(nxt)
    if len(topo) != len(calls):
        raise ValueError("the calls depend on each other in a cycle")
    for call in reversed(topo):
        tail[call] = calls[call][0] + max((tail[d] for d in dependents[call]), default=0.0)

    ready = [(-tail[c], order[c], c) for c in calls if not waiting_on[c]]
    heapq.heapify(ready)
    running: list[tuple[float, int, Hashable]] = []
    now = 0.0
    while ready or running:
        while ready and len(running) < capacity:
            _, i, call = heapq.heappop(ready)
            heapq.heappush(running, (now + calls[call][0], i, call))
        now = running[0][0]
        while running and running[0][0] == now:  # every call finishing now frees its slot
            _, _, done = heapq.heappop(running)
            for nxt in dependents[done]:
                waiting_on[nxt] -= 1
                if not waiting_on[nxt]:
                    heapq.heappush(ready, (-tail[nxt], order[nxt], nxt))
    return now
