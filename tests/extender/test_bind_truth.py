"""A bind's answer is the truth: success only with a confirmed booking; a booking cannot expire
while its Binding is in flight; a bind that answers an error leaves no booking behind."""

from __future__ import annotations

import asyncio
import os
import signal

from builders import bind_args, filter_args, gpu_node, inventory, pod

from extender import protocol
from extender.binder import BindError
from extender.interference import default_matrix
from extender.ledger import scripts
from extender.ledger.connect import RedisOptions
from extender.ledger.memory import MemoryLedger
from extender.ledger.redis import RedisLedger
from extender.ledger.rules import STATE_BOUND
from extender.placement import make_policy
from extender.service import Scheduler

INV = inventory(gpu_node("n", 2))


class Clock:
    now = 1_000.0

    def __call__(self) -> float:
        return self.now


class HeldBinder:
    """A Binding call that lasts until the test lets it finish (a slow API server)."""

    binds_pods = True

    def __init__(self, fail: bool = False) -> None:
        self.started = asyncio.Event()
        self.finish = asyncio.Event()
        self.fail = fail

    async def bind(self, args, reservation) -> None:  # noqa: ANN001
        self.started.set()
        await self.finish.wait()
        if self.fail:
            raise BindError("HTTP 500 etcd timeout")

    async def fetch_pod(self, namespace: str, name: str):  # noqa: ANN201
        return None


def scheduler(ledger, binder, clock, ttl: float = 5.0, bind_timeout: float = 30.0) -> Scheduler:  # noqa: ANN001
    return Scheduler(inventory=INV, ledger=ledger, matrix=default_matrix(),
                     policy=make_policy("sparse"), binder=binder, clock=clock,
                     reservation_ttl_s=ttl, bind_timeout_s=bind_timeout)


async def filtered(s: Scheduler, **kw) -> protocol.BindingArgs:  # noqa: ANN003
    p = pod(**kw)
    assert (await s.filter(filter_args(p, ["n"]))).NodeNames == ["n"]
    return bind_args(p, "n")


async def test_booking_outlives_its_ttl_while_the_binding_is_in_flight() -> None:
    clock, binder = Clock(), HeldBinder()
    s = scheduler(MemoryLedger(), binder, clock, ttl=5.0)
    args = await filtered(s, mem=4000, milli=200)
    bind = asyncio.create_task(s.bind(args))
    await binder.started.wait()
    clock.now += 6.0  # the API server is slower than --reservation-ttl
    assert await s.expire() == []
    binder.finish.set()
    assert (await bind).Error == ""
    held = await s.ledger.get(args.pod_uid)
    assert held is not None and held.state == STATE_BOUND
    clock.now += 1_000.0
    assert await s.expire() == []  # bound: never expires


async def test_binding_that_outlives_the_bind_timeout_answers_error_and_books_nothing() -> None:
    binder = HeldBinder()
    s = scheduler(MemoryLedger(), binder, Clock(), bind_timeout=0.05)
    result = await s.bind(await filtered(s, mem=4000, milli=200))
    assert "failed" in result.Error
    assert (await s.ledger.snapshot())[1] == {}


async def test_failed_binding_leaves_nothing_booked() -> None:
    binder = HeldBinder(fail=True)
    binder.finish.set()
    s = scheduler(MemoryLedger(), binder, Clock())
    assert "etcd timeout" in (await s.bind(await filtered(s, gpus=1))).Error
    assert (await s.ledger.snapshot())[1] == {}


async def test_a_booking_lost_before_confirm_is_booked_again_or_the_bind_fails() -> None:
    binder = HeldBinder()
    s = scheduler(MemoryLedger(), binder, Clock())
    args = await filtered(s, mem=4000, milli=200)
    bind = asyncio.create_task(s.bind(args))
    await binder.started.wait()
    await s.ledger.release(args.pod_uid)  # e.g. a store that lost it
    binder.finish.set()
    assert (await bind).Error == ""
    assert (await s.ledger.get(args.pod_uid)).state == STATE_BOUND


async def test_frozen_redis_bind_answers_error_and_its_late_booking_is_reclaimed(
        redis_server) -> None:
    """SIGSTOP: the reserve script is sent, the reply never comes in time; once Redis runs
    again the script does book. The bind answered an error, so the upkeep drops the booking."""
    ledger = RedisLedger.from_url(redis_server.url, prefix="frozen:",
                                  options=RedisOptions(socket_timeout_s=0.3))
    s = scheduler(ledger, HeldBinder(), Clock(), ttl=300.0)
    try:
        args = await filtered(s, mem=4000, milli=200)
        await ledger._r.script_load(scripts.RESERVE)  # else the frozen call is a NOSCRIPT
        reserve = ledger.reserve_change

        async def freeze_then_reserve(*a):  # noqa: ANN002, ANN202
            os.kill(redis_server.proc.pid, signal.SIGSTOP)
            return await reserve(*a)

        ledger.reserve_change = freeze_then_reserve
        try:
            result = await asyncio.wait_for(s.bind(args), 30)
        finally:
            os.kill(redis_server.proc.pid, signal.SIGCONT)
        assert "unavailable" in result.Error
        assert not s.health.ok
        for _ in range(500):  # the script runs once Redis resumes
            if await ledger.get(args.pod_uid) is not None:
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the frozen reserve never ran")
        await s.expire()  # periodic upkeep
        assert await ledger.get(args.pod_uid) is None
        assert s.upkeep.reclaimed == 1
        assert await s.health.check(ledger)  # and ready again
    finally:
        await ledger._r.delete(*(f"frozen:{k}" for k in
                                 ("res", "mem", "milli", "exp", "ver", "log")))
        await ledger.close()
