"""A replica's view follows the Redis ledger through the background reader of its change log:
what the reader has read is applied without a round trip; holes, wipes and a reader that is
not live send the view back to the store; binds never book a GPU twice on a stale view."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import numpy as np
from builders import bind_args, filter_args, gpu_node, inventory, place_pod, pod

from extender.interference import default_matrix
from extender.ledger.redis import RedisLedger
from extender.placement import ClusterState, make_policy
from extender.service import Scheduler

KEYS = ("res", "mem", "milli", "exp", "ver", "log")


def replica(redis_url: str, inv) -> Scheduler:  # noqa: ANN001
    return Scheduler(inventory=inv, ledger=RedisLedger.from_url(redis_url, prefix="fol:"),
                     matrix=default_matrix(), policy=make_policy("sparse"))


def counting_round_trips(s: Scheduler) -> list[int]:
    reads: list[int] = []
    for name in ("changes", "snapshot"):
        original = getattr(s.ledger, name)

        async def counted(*a, _original=original):  # noqa: ANN002, ANN202
            reads.append(1)
            return await _original(*a)

        setattr(s.ledger, name, counted)
    return reads


async def store_state(s: Scheduler, inv) -> ClusterState:  # noqa: ANN001
    version, everything = await s.ledger.snapshot()
    return ClusterState.build(inv, default_matrix(), everything.values(), version)


def same_bookings(a: ClusterState, b: ClusterState) -> bool:
    return (a.version == b.version and set(a.reservations) == set(b.reservations)
            and all(np.array_equal(getattr(a, k), getattr(b, k))
                    for k in ("mem_used", "milli_used", "residents")))


@contextlib.asynccontextmanager
async def replicas(redis_url: str, inv, started: bool = True  # noqa: ANN001
                   ) -> AsyncIterator[tuple[Scheduler, Scheduler]]:
    """Two replicas on one emptied ledger, closed after; ``started``: a first change numbered
    the log and b's follower has read it."""
    a, b = replica(redis_url, inv), replica(redis_url, inv)
    try:
        await a.ledger._r.delete(*(f"fol:{k}" for k in KEYS))
        if started:
            await a.release(await place_pod(a, pod(mem=100, milli=10), "n"))  # the numbering starts
            await b.view()
            await b.ledger.follower.read_once(block=False)
        yield a, b
    finally:
        await a.ledger.close()
        await b.ledger.close()


async def test_view_applies_what_the_reader_read_without_a_round_trip(redis_url) -> None:
    inv = inventory(gpu_node("n", 4))
    async with replicas(redis_url, inv) as (a, b):
        uids = [await place_pod(a, pod(mem=8000, milli=300, job_class="cnn"), "n")
                for _ in range(3)]
        await a.release(uids[1])
        await a.confirm(uids[0])
        await b.ledger.follower.read_once(block=False)
        reads = counting_round_trips(b)
        state = await b.view()
        assert reads == []
        assert same_bookings(state, await store_state(a, inv))
        assert set(state.reservations) == {uids[0], uids[2]}


async def test_a_change_the_reader_has_not_read_yet_is_not_seen_until_it_reads(redis_url
                                                                              ) -> None:
    inv = inventory(gpu_node("n", 4))
    async with replicas(redis_url, inv) as (a, b):
        before = (await b.view()).version
        uid = await place_pod(a, pod(mem=8000, milli=300), "n")
        assert uid not in (await b.view()).reservations  # the follower's, a moment behind
        assert uid in (await b.view(fresh=True)).reservations  # the store's
        await b.ledger.follower.read_once(block=False)
        assert (await b.view()).version > before


async def test_a_hole_in_the_log_sends_the_view_to_the_store(redis_url) -> None:
    inv = inventory(gpu_node("n", 4))
    async with replicas(redis_url, inv) as (a, b):
        first = await place_pod(a, pod(mem=8000, milli=300), "n")
        version = int(await a.ledger._r.get("fol:ver"))
        await a.ledger._r.xdel("fol:log", f"{version}-0")  # its log write was lost
        second = await place_pod(a, pod(mem=4000, milli=100), "n")
        await b.ledger.follower.read_once(block=False)
        reads = counting_round_trips(b)
        state = await b.view()
        assert reads  # the follower cannot bridge the hole: the store is read
        assert {first, second} <= set(state.reservations)
        assert same_bookings(state, await store_state(a, inv))


async def test_a_wiped_store_counts_a_disruption_and_the_view_is_rebuilt(redis_url) -> None:
    inv = inventory(gpu_node("n", 4))
    async with replicas(redis_url, inv) as (a, b):
        await place_pod(a, pod(mem=8000, milli=300), "n")
        await b.ledger.follower.read_once(block=False)
        assert (await b.view()).reservations
        disruptions = b.ledger.disruptions
        await a.ledger._r.delete(*(f"fol:{k}" for k in KEYS))
        await b.ledger.follower.read_once(block=False)
        assert b.ledger.disruptions == disruptions + 1
        assert (await b.view()).reservations == {}


async def test_a_reader_that_never_read_leaves_the_view_to_the_store(redis_url) -> None:
    inv = inventory(gpu_node("n", 4))
    async with replicas(redis_url, inv, started=False) as (a, b):
        await b.view()
        uid = await place_pod(a, pod(mem=8000, milli=300), "n")
        assert not b.ledger.follower.live
        assert uid in (await b.view()).reservations


async def test_bind_on_a_stale_view_never_books_a_gpu_twice(redis_url) -> None:
    inv = inventory(gpu_node("n", 1, memory_mib=16000))
    async with replicas(redis_url, inv) as (a, b):
        held = await place_pod(a, pod(mem=12000, milli=500), "n")  # b's reader has not read it
        late = pod(mem=8000, milli=300)
        filtered = await b.filter(filter_args(late, ["n"]))
        assert filtered.NodeNames == ["n"]  # on the stale view it fits
        bound = await b.bind(bind_args(late, "n"))
        assert "no longer fits" in bound.Error  # re-planned on the store
        state = await store_state(a, inv)
        assert set(state.reservations) == {held}
        assert int(state.mem_used.max()) <= 16000


async def test_the_running_reader_carries_a_burst_of_changes_in_few_reads(redis_url) -> None:
    """After a read that brought changes the reader waits a moment before the next: the
    changes written meanwhile arrive in one read, and the view catches up."""
    inv = inventory(gpu_node("n", 8))
    async with replicas(redis_url, inv) as (a, b):
        follower = b.ledger.follower
        follower.coalesce_s = 1.0  # long enough for a busy machine to write several

        async def caught_up() -> int:
            version = int(await a.ledger._r.get("fol:ver"))
            for _ in range(1000):  # whatever the machine's speed
                if follower.head >= version:
                    break
                await asyncio.sleep(0.01)
            assert follower.head == version
            return version

        task = asyncio.create_task(follower.run())
        try:
            await place_pod(a, pod(mem=100, milli=10), "n")
            first = await caught_up()  # that read brought it: the reader now waits
            reads = follower.reads
            uids = [await place_pod(a, pod(mem=100, milli=10), "n") for _ in range(11)]
            assert await caught_up() - first >= 11
            assert follower.reads - reads < 11  # several changes per read
            assert set(uids) <= set((await b.view()).reservations)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
