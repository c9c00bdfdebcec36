"""The Redis client waits for a pooled connection instead of failing, and tells a busy replica
(every connection in use past the wait) from an unreachable store."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from extender.errors import LedgerBusy
from extender.ledger.connect import RedisOptions
from extender.ledger.health import LedgerHealth
from extender.ledger.redis import RedisLedger
from extender.ledger.rules import Allocation, GpuCapacity, Reservation

CAPS = {f"g{i}": GpuCapacity(10**6, 10**6) for i in range(4)}


def res(i: int) -> Reservation:
    return Reservation(pod_uid=f"p{i}", namespace="ml", name=f"p{i}", node="n",
                       allocations=(Allocation(f"g{i % 4}", "c", 10, 1),))


async def test_many_concurrent_changes_wait_for_a_few_connections(redis_url) -> None:
    ledger = RedisLedger.from_url(redis_url, options=RedisOptions(pool_size=3, pool_wait_s=3600))
    try:
        results = await asyncio.gather(*(ledger.reserve_change(res(i), CAPS)
                                         for i in range(300)))
        assert len({a.version for a in results}) == 300
        assert len((await ledger.snapshot())[1]) == 300
    finally:
        await ledger.close()


async def test_a_pool_busy_past_its_wait_is_busy_not_down(redis_url) -> None:
    ledger = RedisLedger.from_url(redis_url, options=RedisOptions(
        pool_size=1, pool_wait_s=0.05, socket_timeout_s=60))
    health = LedgerHealth()
    try:
        hold = asyncio.create_task(ledger._r.blpop(["nothing-comes"], timeout=0))
        pool = ledger._r.connection_pool
        while not pool._in_use_connections:  # until the only connection is taken
            await asyncio.sleep(0.01)
        with pytest.raises(LedgerBusy) as err:
            await ledger.get("p1")
        health.failed(err.value)
        assert health.ok and ledger.disruptions == 0
        other = Redis.from_url(redis_url)
        try:
            await other.rpush("nothing-comes", "go")  # frees the held connection
        finally:
            await other.aclose()
        await hold
    finally:
        await ledger.close()
