"""One contract, both backends: in-memory and Redis (a real redis-server)."""

from __future__ import annotations

import asyncio

import pytest

from extender.errors import ReservationConflict
from extender.ledger.memory import MemoryLedger
from extender.ledger.redis import RedisLedger
from extender.ledger.rules import STATE_BOUND, STATE_RESERVED, Allocation, GpuCapacity, Reservation
from extender.ledger.sqlite import SqliteLedger

CAPS = {"g0": GpuCapacity(16384), "g1": GpuCapacity(16384), "g2": GpuCapacity(40960)}


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def ledger(request, tmp_path):
    if request.param == "memory":
        store = MemoryLedger()
    elif request.param == "sqlite":
        store = SqliteLedger(tmp_path)
    else:
        store = RedisLedger.from_url(request.getfixturevalue("redis_url"))
    yield store
    await store.close()


def res(uid, *allocs, node="n", expires=None):
    return Reservation(pod_uid=uid, namespace="ml", name=uid, node=node,
                       allocations=tuple(Allocation(g, "c", m, c) for g, m, c in allocs),
                       expires_at=expires, job_class="cnn")


async def usage(ledger):
    _, all_res = await ledger.snapshot()
    out = {}
    for r in all_res.values():
        for gpu, (m, c) in r.per_gpu().items():
            pm, pc = out.get(gpu, (0, 0))
            out[gpu] = (pm + m, pc + c)
    return out


async def started(ledger) -> int:
    """The version once numbering has started (a fresh Redis starts at an epoch base)."""
    await ledger.reserve(res("warm-up", ("g2", 1, 1)), CAPS)
    await ledger.release("warm-up")
    return await ledger.version()


async def test_reserve_and_release(ledger):
    v0 = await started(ledger)
    v1 = await ledger.reserve(res("a", ("g0", 8000, 300)), CAPS)
    assert v1 == v0 + 1
    assert (await ledger.get("a")).allocations[0].mem_mib == 8000
    dropped = await ledger.release("a")
    assert dropped.pod_uid == "a"
    assert await ledger.release("a") is None
    assert await usage(ledger) == {}
    assert await ledger.version() == v1 + 1


async def test_all_or_nothing(ledger):
    await ledger.reserve(res("a", ("g1", 16000, 100)), CAPS)
    with pytest.raises(ReservationConflict) as err:
        await ledger.reserve(res("b", ("g0", 1000, 100), ("g1", 1000, 100)), CAPS)
    assert err.value.gpu_uuid == "g1"
    assert await ledger.get("b") is None
    assert await usage(ledger) == {"g1": (16000, 100)}


async def test_memory_and_compute_limits(ledger):
    await ledger.reserve(res("a", ("g0", 8000, 600)), CAPS)
    with pytest.raises(ReservationConflict):
        await ledger.reserve(res("b", ("g0", 8000, 500)), CAPS)  # compute
    with pytest.raises(ReservationConflict):
        await ledger.reserve(res("c", ("g0", 9000, 100)), CAPS)  # memory
    await ledger.reserve(res("d", ("g0", 8384, 400)), CAPS)  # exactly full
    assert await usage(ledger) == {"g0": (16384, 1000)}


async def test_same_booking_twice_is_idempotent_other_booking_conflicts(ledger):
    r = res("a", ("g0", 1000, 100))
    v = await ledger.reserve(r, CAPS)
    assert await ledger.reserve(r, CAPS) == v
    with pytest.raises(ReservationConflict):
        await ledger.reserve(res("a", ("g2", 1000, 100)), CAPS)
    assert await usage(ledger) == {"g0": (1000, 100)}


async def test_unknown_gpu_is_rejected(ledger):
    with pytest.raises(ReservationConflict):
        await ledger.reserve(res("a", ("nope", 1, 1)), CAPS)


async def test_confirm_of_a_known_booking_confirms_what_the_store_holds(ledger):
    """The caller passes what it booked (a store may skip its read); when the store holds
    something else by then, that is what gets confirmed, and nothing when it holds none."""
    mine = res("a", ("g0", 1000, 100), expires=500.0)
    await ledger.reserve(mine, CAPS)
    applied = await ledger.confirm_change("a", mine)
    assert applied.version and applied.reservation == mine.bound()
    assert (await ledger.get("a")) == mine.bound()
    assert (await ledger.confirm_change("a", mine)).version == 0  # bound already
    await ledger.release("a")
    other = res("a", ("g1", 2000, 200), expires=600.0)  # re-booked meanwhile (another try)
    await ledger.reserve(other, CAPS)
    applied = await ledger.confirm_change("a", mine)
    assert applied.reservation == other.bound() and (await ledger.get("a")) == other.bound()
    await ledger.release("a")
    assert (await ledger.confirm_change("a", mine)) == (0, None)


async def test_confirm_and_expiry(ledger):
    await ledger.reserve(res("old", ("g0", 1000, 100), expires=100.0), CAPS)
    await ledger.reserve(res("bound", ("g1", 1000, 100), expires=100.0), CAPS)
    await ledger.reserve(res("fresh", ("g2", 1000, 100), expires=500.0), CAPS)
    confirmed = await ledger.confirm("bound")
    assert confirmed.state == STATE_BOUND and confirmed.expires_at is None
    assert await ledger.confirm("missing") is None
    expired = await ledger.expire(200.0)
    assert [r.pod_uid for r in expired] == ["old"]
    _, left = await ledger.snapshot()
    assert sorted(left) == ["bound", "fresh"]
    assert left["fresh"].state == STATE_RESERVED
    assert await ledger.expire(200.0) == []
    assert await usage(ledger) == {"g1": (1000, 100), "g2": (1000, 100)}


async def test_snapshot_version_is_consistent(ledger):
    await ledger.reserve(res("a", ("g0", 1, 1)), CAPS)
    version, all_res = await ledger.snapshot()
    assert version == await ledger.version() and set(all_res) == {"a"}


async def test_concurrent_reservations_never_overcommit(ledger):
    async def one(i):
        try:
            await ledger.reserve(res(f"p{i}", ("g0", 1000, 50)), CAPS)
            return True
        except ReservationConflict:
            return False

    results = await asyncio.gather(*(one(i) for i in range(40)))
    assert sum(results) == 16  # 16 x 1000 MiB fit in 16384 MiB; compute allows 20
    assert (await usage(ledger))["g0"] == (16000, 800)


async def test_change_log_replays_every_change_in_order(ledger):
    v0 = await started(ledger)
    await ledger.reserve(res("a", ("g0", 100, 10), expires=50.0), CAPS)
    await ledger.reserve(res("b", ("g1", 200, 20)), CAPS)
    await ledger.confirm("a")
    await ledger.release("b")
    version, changes = await ledger.changes(v0)
    assert version == v0 + 4 == await ledger.version()
    assert [(uid, r.state if r else None) for uid, r in changes] == [
        ("a", STATE_RESERVED), ("b", STATE_RESERVED), ("a", STATE_BOUND), ("b", None)]
    assert changes[1][1].allocations[0].mem_mib == 200
    assert await ledger.changes(version) == (version, [])
    assert (await ledger.changes(v0 + 2))[1] == changes[2:]
    assert await ledger.changes(version + 5) is None  # ahead of the ledger: it was reset


async def test_change_log_covers_expiry(ledger):
    v0 = await started(ledger)
    await ledger.reserve(res("a", ("g0", 1, 1), expires=10.0), CAPS)
    await ledger.reserve(res("b", ("g1", 1, 1), expires=10.0), CAPS)
    assert len(await ledger.expire(20.0)) == 2
    version, changes = await ledger.changes(v0)
    assert version == await ledger.version()
    assert sorted(uid for uid, r in changes if r is None) == ["a", "b"]


async def test_redis_change_log_gap_means_snapshot(redis_url):
    store = RedisLedger.from_url(redis_url, prefix="gap:")
    try:
        v0 = await store.reserve(res("a", ("g0", 1, 1)), CAPS) - 1
        await store.reserve(res("b", ("g0", 1, 1)), CAPS)
        assert (await store.changes(v0))[0] == v0 + 2
        await store._r.xdel("gap:log", f"{v0 + 1}-0")  # a lost log write
        assert await store.changes(v0) is None
        assert (await store.changes(v0 + 1))[1][0][0] == "b"
        await store._r.delete("gap:log")  # e.g. a ledger from before the log existed
        assert await store.changes(v0 + 1) is None
        await store.reserve(res("c", ("g1", 1, 1)), CAPS)
        assert [uid for uid, _ in (await store.changes(v0 + 2))[1]] == ["c"]
    finally:
        await store._r.delete(*(f"gap:{k}" for k in ("res", "mem", "milli", "exp", "ver", "log")))
        await store.close()
