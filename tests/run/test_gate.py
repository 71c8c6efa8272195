"""The call gate and the run loop's switch to chain-first order for the run's tail."""

from __future__ import annotations

import asyncio

import pytest

from radmatch_audit.stages import CHAIN
from radmatch_audit.run.gate import CallGate
from radmatch_audit.run.loop import stream


async def _served_order(gate: CallGate, waiters: list[tuple[float, int]], switch: bool = False) -> list:
    """Fill the gate, queue `waiters` (priority, chain), optionally switch, then free slots one by one."""
    for _ in range(gate.slots):
        await gate.acquire()
    served: list[tuple[float, int]] = []

    async def call(priority: float, chain: int) -> None:
        await gate.acquire(priority, chain)
        served.append((priority, chain))
        gate.release()

    tasks = [asyncio.ensure_future(call(p, c)) for p, c in waiters]
    await asyncio.sleep(0)  # every waiter is queued
    if switch:
        gate.by_chain()
    for _ in range(gate.slots):
        gate.release()
    await asyncio.gather(*tasks)
    return served


def test_oldest_pair_first_by_default():
    waiters = [(5, 1), (2, 3), (9, 4), (2, 1)]
    served = asyncio.run(_served_order(CallGate(1), waiters))
    assert served == [(2, 3), (2, 1), (5, 1), (9, 4)]  # equal priorities: first come, first served


def test_by_chain_reorders_the_calls_already_waiting():
    waiters = [(5, 1), (2, 3), (9, 4), (1, 1), (7, 3)]
    served = asyncio.run(_served_order(CallGate(1), waiters, switch=True))
    assert served == [(9, 4), (2, 3), (7, 3), (1, 1), (5, 1)]


def test_by_age_restores_the_default_order():
    async def scenario() -> list:
        gate = CallGate(1)
        gate.by_chain()
        gate.by_age()
        return await _served_order(gate, [(3, 4), (1, 1)])

    assert asyncio.run(scenario()) == [(1, 1), (3, 4)]


def test_a_cancelled_waiter_gives_its_slot_on():
    async def scenario() -> list:
        gate = CallGate(1)
        await gate.acquire()
        order: list[str] = []

        async def call(name: str, priority: float) -> None:
            await gate.acquire(priority)
            order.append(name)
            gate.release()

        first = asyncio.ensure_future(call("first", 0))
        second = asyncio.ensure_future(call("second", 1))
        await asyncio.sleep(0)
        first.cancel()
        gate.release()
        await asyncio.gather(first, second, return_exceptions=True)
        await asyncio.wait_for(gate.has_room(), 5)  # no slot is held any more
        return order

    assert asyncio.run(scenario()) == ["second"]


def test_a_pairs_first_stage_has_the_longest_chain():
    assert CHAIN == {"extract": 4, "match": 3, "grade": 2, "adjudicate": 1}


def test_stream_switches_once_the_input_is_read_to_its_end():
    """`on_input_end` runs once the last job is read, before it finishes."""

    async def scenario() -> list[str]:
        events: list[str] = []
        release = asyncio.Event()

        def jobs():
            for job in range(3):
                events.append(f"read {job}")
                yield job

        async def handle(job: int, position: int) -> None:
            if job == 2:
                await release.wait()
            events.append(f"end {job}")

        def last_opened() -> None:
            events.append("last opened")
            release.set()

        await asyncio.wait_for(stream(jobs(), handle, window=2, on_input_end=last_opened), 10)
        return events

    events = asyncio.run(scenario())
    assert events.index("last opened") > events.index("read 2")
    assert events.index("last opened") < events.index("end 2")
    assert events.count("last opened") == 1


def test_stream_does_not_switch_when_a_job_fails():
    async def scenario() -> list[str]:
        called: list[str] = []

        async def handle(job: int, position: int) -> None:
            raise OSError("disk full")

        with pytest.raises(OSError):
            await stream(iter(range(5)), handle, window=1, on_input_end=lambda: called.append("x"))
        return called

    assert asyncio.run(scenario()) == []


def test_has_room_waits_for_a_free_slot_and_ignores_cancelled_waiters():
    async def scenario() -> list[str]:
        gate, events = CallGate(1), []
        await gate.acquire()
        waiter = asyncio.ensure_future(gate.acquire(5))
        room = asyncio.ensure_future(gate.has_room())
        await asyncio.sleep(0)
        assert not room.done()  # the slot is held and a call waits for it
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        await asyncio.sleep(0)
        assert not room.done()  # the slot is still held
        gate.release()  # the cancelled waiter is skipped: the slot is free
        await asyncio.wait_for(room, 5)
        events.append(f"room, {gate.waiting} waiting")
        await asyncio.wait_for(gate.has_room(), 5)  # free and nobody waiting: at once
        return events

    assert asyncio.run(scenario()) == ["room, 0 waiting"]
