"""Shutdown stops the app's background loops even when one swallows a cancel (as a Redis call
can when the cancel lands on its timeout): the loop is cancelled again until it ends."""

from __future__ import annotations

import asyncio

from extender.http.app import _stop


async def test_a_loop_that_swallows_one_cancel_is_still_stopped() -> None:
    swallowed = 0

    async def poll() -> None:
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed += 1  # the first cancel is lost, the loop goes on

    task = asyncio.create_task(poll())
    await asyncio.sleep(0)
    await asyncio.wait_for(_stop(task), 60)  # one cancel alone would wait for ever
    assert task.cancelled() and swallowed == 1


async def test_a_loop_that_failed_reports_its_error() -> None:
    async def broken() -> None:
        raise RuntimeError("boom")

    task = asyncio.create_task(broken())
    await asyncio.sleep(0)
    try:
        await _stop(task)
    except RuntimeError as e:
        assert str(e) == "boom"
    else:
        raise AssertionError("the loop's error was not reported")
