"""Replicas sharing one Redis ledger follow each other's bookings through the change log,
without re-reading every reservation."""

from __future__ import annotations

import numpy as np
from builders import gpu_node, inventory, place_pod, pod

from extender.interference import default_matrix
from extender.ledger.redis import RedisLedger
from extender.placement import ClusterState, make_policy
from extender.service import Scheduler


def replica(redis_url: str, inv) -> Scheduler:  # noqa: ANN001
    return Scheduler(inventory=inv, ledger=RedisLedger.from_url(redis_url, prefix="follow:"),
                     matrix=default_matrix(), policy=make_policy("sparse"))


def same_bookings(a: ClusterState, b: ClusterState) -> bool:
    # class fractions are floats summed in a different order: equal up to rounding
    return (set(a.reservations) == set(b.reservations)
            and all(np.array_equal(getattr(a, k), getattr(b, k))
                    for k in ("mem_used", "milli_used", "residents"))
            and np.allclose(a.class_frac, b.class_frac))


async def test_replica_follows_the_other_through_the_change_log(redis_url) -> None:
    inv = inventory(gpu_node("n", 4))
    a, b = replica(redis_url, inv), replica(redis_url, inv)
    try:
        await a.ledger._r.delete(*(f"follow:{k}" for k in
                                   ("res", "mem", "milli", "exp", "ver", "log")))
        await a.release(await place_pod(a, pod(mem=100, milli=10), "n"))  # numbering starts
        await b.view()
        reads = []
        original = b.ledger.snapshot

        async def counting():  # noqa: ANN202
            reads.append(1)
            return await original()

        b.ledger.snapshot = counting
        uids = [await place_pod(a, pod(mem=8000, milli=300, job_class="cnn"), "n")
                for _ in range(3)]
        own = pod(mem=4000, milli=100, job_class="recommendation")
        await place_pod(b, own, "n")  # b's own change
        await a.release(uids[1])
        await a.confirm(uids[0])

        state = await b.view()
        assert reads == []  # followed incrementally
        version, everything = await b.ledger.snapshot()
        fresh = ClusterState.build(inv, default_matrix(), everything.values(), version)
        assert state.version == version
        assert same_bookings(state, fresh)
        assert set(state.reservations) == {uids[0], uids[2], *[
            u for u in everything if u not in uids]}
    finally:
        await a.ledger.close()
        await b.ledger.close()
