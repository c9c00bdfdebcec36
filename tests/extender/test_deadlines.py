"""The read-only verbs' deadline: asyncio's own timeout, armed by one shared tick."""

from __future__ import annotations

import asyncio

import pytest

from extender.http.deadlines import Deadlines


async def test_a_block_past_its_deadline_gets_timeout_error_and_is_forgotten() -> None:
    deadlines = Deadlines(tick_s=0.01)
    with pytest.raises(TimeoutError):
        async with deadlines.within(0.02):
            await asyncio.sleep(30)  # a frozen store
    assert deadlines.open == 0
    assert asyncio.current_task().cancelling() == 0  # the cancel was taken back


async def test_blocks_within_their_deadline_are_untouched_and_no_tick_stays_armed() -> None:
    deadlines = Deadlines(tick_s=0.01)
    for _ in range(3):
        async with deadlines.within(30):
            await asyncio.sleep(0.02)  # ticks run meanwhile and find nothing due
        async with deadlines.within(None):  # no deadline (bind)
            pass
    assert deadlines.open == 0
    await asyncio.sleep(0.05)
    assert deadlines._tick is None  # nothing open: the tick stopped


async def test_only_the_overdue_request_is_cut_among_concurrent_ones() -> None:
    deadlines = Deadlines(tick_s=0.01)

    async def request(seconds: float, work: asyncio.Event) -> str:
        try:
            async with deadlines.within(seconds):
                await work.wait()
        except TimeoutError:
            return "cut"
        return "done"

    slow, fast = asyncio.Event(), asyncio.Event()
    cut = asyncio.create_task(request(0.02, slow))
    kept = asyncio.create_task(request(30, fast))
    assert await cut == "cut"
    fast.set()
    assert await kept == "done"


async def test_a_cancel_from_outside_stays_a_cancel() -> None:
    deadlines = Deadlines(tick_s=0.01)
    entered = asyncio.Event()

    async def request() -> None:
        async with deadlines.within(30):
            entered.set()
            await asyncio.sleep(30)

    task = asyncio.create_task(request())
    await entered.wait()
    task.cancel()  # e.g. the client went away
    with pytest.raises(asyncio.CancelledError):
        await task
    assert deadlines.open == 0
