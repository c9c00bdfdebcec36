"""reserve_many on both backends: all or nothing, amounts add up, release-and-book in one."""

from __future__ import annotations

import pytest

from extender.errors import ReservationConflict
from extender.ledger.memory import MemoryLedger
from extender.ledger.redis import RedisLedger
from extender.ledger.rules import Allocation, GpuCapacity, Reservation

CAPS = {"g0": GpuCapacity(16384), "g1": GpuCapacity(16384)}


@pytest.fixture(params=["memory", "redis"])
async def ledger(request):
    if request.param == "memory":
        store = MemoryLedger()
    else:
        store = RedisLedger.from_url(request.getfixturevalue("redis_url"))
    yield store
    await store.close()


def res(uid, *allocs, node="n", expires=None):
    return Reservation(pod_uid=uid, namespace="ml", name=uid, node=node,
                       allocations=tuple(Allocation(g, "c", m, c) for g, m, c in allocs),
                       expires_at=expires)


async def booked(ledger):
    _, all_res = await ledger.snapshot()
    out: dict[str, list[int]] = {}
    for r in all_res.values():
        for gpu, (m, c) in r.per_gpu().items():
            acc = out.setdefault(gpu, [0, 0])
            acc[0] += m
            acc[1] += c
    return out


async def test_books_all_and_logs_each(ledger):
    await ledger.reserve_many([res("warm-up", ("g1", 1, 1))], CAPS)  # numbering starts
    await ledger.release("warm-up")
    v0 = await ledger.version()
    gang = [res("s0", ("g0", 8000, 400)), res("s1", ("g0", 8000, 400)),
            res("s2", ("g1", 1000, 100), expires=50.0)]
    v = await ledger.reserve_many(gang, CAPS)
    assert v == v0 + 3
    assert await booked(ledger) == {"g0": [16000, 800], "g1": [1000, 100]}
    _, changes = await ledger.changes(v0)
    assert [uid for uid, _ in changes] == ["s0", "s1", "s2"]
    assert [r.pod_uid for r in await ledger.expire(60.0)] == ["s2"]


async def test_amounts_of_one_call_add_up(ledger):
    await ledger.reserve(res("x", ("g1", 10000, 100)), CAPS)
    gang = [res("s0", ("g0", 9000, 100)), res("s1", ("g0", 9000, 100))]
    with pytest.raises(ReservationConflict) as err:
        await ledger.reserve_many(gang, CAPS)
    assert err.value.gpu_uuid == "g0"
    assert await ledger.get("s0") is None and await ledger.get("s1") is None
    assert await booked(ledger) == {"g1": [10000, 100]}


async def test_retry_is_a_noop_and_partial_overlap_refused(ledger):
    gang = [res("s0", ("g0", 1000, 100)), res("s1", ("g1", 1000, 100))]
    v = await ledger.reserve_many(gang, CAPS)
    assert await ledger.reserve_many(gang, CAPS) == v
    with pytest.raises(ReservationConflict):
        await ledger.reserve_many([res("s1", ("g1", 1000, 100)), res("s9", ("g1", 1, 1))],
                                  CAPS)
    with pytest.raises(ReservationConflict):
        await ledger.reserve_many([res("s0", ("g1", 1000, 100))], CAPS)
    assert await ledger.get("s9") is None


async def test_release_and_book_atomically(ledger):
    """A bind consuming a gang slot: the slot's GPUs pass to the pod even when full."""
    await ledger.reserve(res("slot", ("g0", 16384, 1000), expires=10.0), CAPS)
    pod = res("pod", ("g0", 16384, 1000))
    with pytest.raises(ReservationConflict):
        await ledger.reserve(pod, CAPS)
    await ledger.reserve_many([pod], CAPS, release=["slot"])
    assert await ledger.get("slot") is None
    assert (await ledger.get("pod")).node == "n"
    assert await booked(ledger) == {"g0": [16384, 1000]}
    assert await ledger.expire(20.0) == []  # the slot's deadline went with it


async def test_failed_call_releases_nothing(ledger):
    await ledger.reserve(res("slot", ("g0", 1000, 100)), CAPS)
    with pytest.raises(ReservationConflict):
        await ledger.reserve_many([res("pod", ("g1", 99999, 1))], CAPS, release=["slot"])
    assert await ledger.get("slot") is not None


async def test_bad_calls(ledger):
    with pytest.raises(ReservationConflict):
        await ledger.reserve_many([], CAPS)
    with pytest.raises(ReservationConflict):
        await ledger.reserve_many([res("a", ("g0", 1, 1)), res("a", ("g1", 1, 1))], CAPS)
    with pytest.raises(ReservationConflict):
        await ledger.reserve_many([res("a", ("gX", 1, 1))], CAPS)


async def test_epoch_base_starts_a_fresh_counter(redis_url):
    """The script can number from an epoch base on a wiped Redis (versions never repeat)."""
    from extender.ledger.redis_many import script_args

    ledger = RedisLedger.from_url(redis_url)
    try:
        args = script_args([res("s0", ("g0", 1, 1)), res("s1", ("g1", 1, 1))], [], CAPS,
                           epoch_base=5_000_000)
        reply = await ledger._reserve_many(keys=ledger._keys, args=args)
        assert reply[0] == b"ok" and int(reply[1]) == 5_000_002
        assert await ledger.version() == 5_000_002
        assert await ledger.reserve_many([res("s2", ("g0", 1, 1))], CAPS) == 5_000_003
    finally:
        await ledger.close()
