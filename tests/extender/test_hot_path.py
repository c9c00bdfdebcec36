"""The scheduling path does no avoidable work: pair estimates are read in the background,
the ledger is followed in one read, and prioritize reuses filter's costs, re-costing only the
nodes booked in between (the scores equal a fresh computation)."""

from __future__ import annotations

import asyncio
import logging

import numpy as np
from builders import gpu_node, inventory, pod

from extender.interference import default_matrix
from extender.ledger.memory import MemoryLedger
from extender.ledger.rules import Allocation, Reservation
from extender.livepairs import LivePairs
from extender.placement import make_policy
from extender.protocol import decode_extender_args, encode
from extender.service import Scheduler

NAMES = [f"gpu-{i}" for i in range(6)]


def _scheduler(ledger: MemoryLedger | None = None, **kwargs) -> Scheduler:
    return Scheduler(inventory=inventory(*(gpu_node(n, 4) for n in NAMES)),
                     ledger=ledger or MemoryLedger(), matrix=default_matrix(),
                     policy=make_policy("sparse"), **kwargs)


def _args(uid: str, mem: int = 4096, milli: int = 300, job_class: str = "cnn"):
    body = pod(mem=mem, milli=milli, job_class=job_class, uid=uid)
    return decode_extender_args(encode({"Pod": body, "NodeNames": NAMES}))


async def _book(s: Scheduler, uid: str, node: str, gpu: int = 0, milli: int = 600) -> None:
    g = f"GPU-{node}-{gpu}"
    await s.ledger.reserve(Reservation(uid, "ml", uid, node, (
        Allocation(g, "main", 16000, milli),), job_class="recommendation"),
        s.state.capacities([g]))


async def test_prioritize_after_filter_re_costs_nodes_booked_in_between() -> None:
    s = _scheduler()
    await _book(s, "old", "gpu-2")
    args = _args("p-1")
    assert (await s.filter(args)).NodeNames == NAMES
    filtered = s.cost_cache.computed_nodes
    terms = sum(t.key is not None  # the cached ones
                for t in s.policy.cost_terms(s.state, s.pending_demand("p-1")))
    # Other pods are booked on two candidates between this pod's filter and prioritize.
    await _book(s, "new-a", "gpu-0", milli=700)
    await _book(s, "new-b", "gpu-4", gpu=1, milli=900)
    await s.view()
    reused = await s.prioritize(args)
    assert s.cycle_costs.hits == 1
    shape_misses = s.cost_cache.computed_nodes
    # The same question with nothing cached: the scores must be the same.
    s.cycle_costs.take("p-1", s.clock())
    fresh = await s.prioritize(args)
    assert [(h.Host, h.Score) for h in reused] == [(h.Host, h.Score) for h in fresh]
    assert len({h.Score for h in reused}) > 1  # the booked nodes do score differently
    assert filtered == terms * len(NAMES)  # filter costed all nodes (each term) ...
    assert shape_misses == filtered + terms * 2  # ... prioritize only the two booked


async def test_prioritize_reuses_filter_costs_unchanged_when_nothing_was_booked() -> None:
    s = _scheduler()
    await _book(s, "old", "gpu-1")
    args = _args("p-2")
    await s.filter(args)
    computed = s.cost_cache.computed_nodes
    scores = await s.prioritize(args)
    assert s.cycle_costs.hits == 1 and s.cost_cache.computed_nodes == computed
    s.cycle_costs.take("p-2", s.clock())
    assert [h.Score for h in scores] == [h.Score for h in await s.prioritize(args)]


class _CountingRedis:
    """Stands in for the predictions' Redis client: counts reads, fails when told to."""

    def __init__(self) -> None:
        self.gets = 0
        self.down = False

    async def get(self, key: str) -> bytes | None:
        self.gets += 1
        if self.down:
            raise ConnectionError("connection refused")
        return None

    async def hgetall(self, key: str) -> dict:
        return {}


async def test_view_reads_no_pair_estimates_while_they_are_polled() -> None:
    client = _CountingRedis()
    live = LivePairs(client, default_matrix())
    s = _scheduler(live_pairs=live)
    await s.view()
    assert client.gets == 1  # no poller: one read per view
    live.polling = True
    for _ in range(5):
        await s.view()
    assert client.gets == 1
    # What a poll read is taken by the next view, once.
    fresh = default_matrix()
    live._fresh = fresh
    assert (await s.view()).matrix is fresh and live.take() is None


async def test_poll_keeps_placing_and_warns_once_while_redis_is_down(caplog) -> None:
    client = _CountingRedis()
    client.down = True
    live = LivePairs(client, default_matrix())
    with caplog.at_level(logging.WARNING, logger="sparse.livepairs"):
        for _ in range(50):
            assert await live.refresh() is None
        task = asyncio.ensure_future(live.poll(interval_s=0))
        while client.gets < 60:
            await asyncio.sleep(0)
        assert live.polling
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert not live.polling
    warnings = [r for r in caplog.records if "unavailable" in r.getMessage()]
    assert len(warnings) == 1 and live.failures >= 60
    client.down = False
    with caplog.at_level(logging.WARNING, logger="sparse.livepairs"):
        assert await live.refresh() is None
    assert any("readable again" in r.getMessage() for r in caplog.records)


async def test_view_follows_the_ledger_in_one_read_per_call() -> None:
    class Counting(MemoryLedger):
        reads = 0

        async def version(self) -> int:
            Counting.reads += 1
            return await super().version()

        async def changes(self, since: int):
            Counting.reads += 1
            return await super().changes(since)

    s = _scheduler(ledger=Counting())
    await s.view()
    Counting.reads = 0
    await s.view()  # nothing changed
    await _book(s, "x", "gpu-3")
    state = await s.view()  # one change
    assert Counting.reads == 2
    assert "x" in state.reservations and state.version == await s.ledger.version()
    assert np.count_nonzero(state.mem_used) == 1


def test_shape_cache_keeps_what_its_memory_budget_holds() -> None:
    from extender.placement import fit, node_costs
    from extender.verbs.costcache import CachedPolicy, CostCache

    s = _scheduler()
    state = s.state
    per_gpu = 8 * len(state.gpu_uuid)  # one float per GPU
    policy = make_policy("sparse")
    for budget, shapes in ((per_gpu * 12, 10), (per_gpu * 40, 10), (10**9, 10), (10**9, 6)):
        cache = CostCache(shapes=shapes, budget_bytes=budget)
        for milli in range(100, 1000, 50):  # 18 shapes: 18 interference and 18 frag terms
            d = _demand(milli)
            r = fit(state, d, NAMES, explain=False)
            got = node_costs(state, d, r, CachedPolicy(policy, cache))
            np.testing.assert_allclose(got, node_costs(state, d, r, policy), rtol=1e-12)
            held = list(cache._entries.values())
            assert sum(e.nbytes for e in held) <= budget and len(held) <= shapes
        assert len(cache._entries) == shapes or budget < 10**9


def _demand(milli: int):
    from extender.demand import ContainerRequest, PodDemand

    c = ContainerRequest("main", 0, milli, 2000)
    return PodDemand(uid=f"d-{milli}", namespace="ml", name="d", containers=(c,), whole_gpus=0,
                     share_milli=milli, share_mem_mib=2000, job_class="cnn",
                     share_containers=(c,))


async def test_prioritize_of_filters_whole_request_scores_the_failed_nodes_as_afresh() -> None:
    s = _scheduler()
    for gpu in range(4):  # gpu-3's compute all booked: the pod fails there
        await _book(s, f"full-{gpu}", "gpu-3", gpu=gpu, milli=1000)
    await _book(s, "old", "gpu-1")
    args = _args("p-3")
    assert (await s.filter(args)).NodeNames == [n for n in NAMES if n != "gpu-3"]
    reused = await s.prioritize(args)  # the request filter got, gpu-3 in it
    assert s.cycle_costs.hits == 1
    s.cycle_costs.take("p-3", s.clock())
    fresh = await s.prioritize(args)
    assert [(h.Host, h.Score) for h in reused] == [(h.Host, h.Score) for h in fresh]
    scores = {h.Host: h.Score for h in reused}
    assert scores["gpu-3"] == 0 and max(scores.values()) == 10
