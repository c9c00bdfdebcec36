"""bind takes filter's per-GPU pick on a node unchanged since filter priced it, and that pick is
exactly what its own re-plan gives: twin schedulers, one re-planning every bind, book alike over
random filters, binds (not in filter order: other pods book in between) and releases."""

from __future__ import annotations

import random

import pytest
from builders import bind_args, bind_pod, filter_args, gpu_node, inventory, mixed_inventory, pod

from extender import protocol
from extender.interference import default_matrix
from extender.ledger.memory import MemoryLedger
from extender.placement import make_policy
from extender.service import Scheduler

SHAPES = [dict(mem=4000, milli=200, job_class="cnn"), dict(mem=12000, milli=500),
          dict(mem=30000, milli=100, job_class="recommendation"), dict(gpus=1),
          dict(gpus=2), dict(mem=2000, milli=300, job_class="transformer"),
          dict(mem=8000, milli=250, job_class="cnn")]


def alike_inventory():  # type: ignore[no-untyped-def]
    return inventory(*(gpu_node(f"n{i}", 4) for i in range(6)))


def cluster(make_inventory, policy: str, reuse: bool) -> Scheduler:  # type: ignore[no-untyped-def]
    s = Scheduler(inventory=make_inventory(), ledger=MemoryLedger(), matrix=default_matrix(),
                  policy=make_policy(policy))
    s.bind_reuse = reuse
    return s


def bookings(s: Scheduler) -> dict[str, tuple]:
    return {uid: (r.node, r.allocations, r.whole_gpus, r.state)
            for uid, r in s.state.reservations.items()}


@pytest.mark.parametrize("make_inventory", [alike_inventory, mixed_inventory])
@pytest.mark.parametrize("policy", ["sparse", "fgd"])
async def test_twins_book_alike_over_random_filters_binds_and_releases(
        make_inventory, policy: str) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(11)
    reusing, planning = cluster(make_inventory, policy, True), cluster(make_inventory,
                                                                        policy, False)
    names = list(reusing.state.node_names)
    waiting: list[tuple[dict, list[str]]] = []  # filtered, not bound yet
    bound: list[dict] = []
    for step in range(150):
        p = pod(**rng.choice(SHAPES))
        asked = rng.sample(names, rng.randint(1, len(names)))
        a = await reusing.filter(filter_args(p, asked))
        b = await planning.filter(filter_args(p, asked))
        assert protocol.encode(a) == protocol.encode(b), step
        if a.NodeNames:
            waiting.append((p, a.NodeNames))
        if waiting and rng.random() < 0.7:  # any waiting pod: others may have booked since
            q, answer = waiting.pop(rng.randrange(len(waiting)))
            node = rng.choice(answer)
            x = await reusing.bind(bind_args(q, node))
            y = await planning.bind(bind_args(q, node))
            assert x.Error == y.Error, step
            if not x.Error:
                bound.append(q)
        if bound and rng.random() < 0.2:
            gone = bound.pop(rng.randrange(len(bound)))
            for s in (reusing, planning):
                await s.release(gone["metadata"]["uid"])
        assert bookings(reusing) == bookings(planning), step
    assert planning.node_verdicts.bind_reused == 0
    if make_inventory is alike_inventory:  # one-slot pods on alike nodes: picks kept
        assert reusing.node_verdicts.bind_reused > 0


async def test_a_booking_on_the_node_between_filter_and_bind_forces_the_re_plan() -> None:
    s = cluster(alike_inventory, "sparse", True)  # (filter prices two or more nodes)
    share = dict(mem=4000, milli=200, job_class="cnn")
    first, other = pod(**share), pod(**share)
    assert (await s.filter(filter_args(first, ["n0", "n1"]))).NodeNames == ["n0", "n1"]
    assert (await s.filter(filter_args(other, ["n0", "n1"]))).NodeNames == ["n0", "n1"]
    await bind_pod(s, other, "n0")  # filter's pick for n0 was this GPU too
    assert s.node_verdicts.bind_reused == 1
    await bind_pod(s, first, "n0")  # n0 changed since: re-planned, on n0's GPUs as now
    assert s.node_verdicts.bind_reused == 1
    twin = cluster(alike_inventory, "sparse", False)
    for p in (first, other):
        assert (await twin.filter(filter_args(p, ["n0", "n1"]))).NodeNames == ["n0", "n1"]
    await bind_pod(twin, other, "n0")
    await bind_pod(twin, first, "n0")
    assert bookings(s) == bookings(twin)


async def test_no_pick_is_taken_once_the_cost_cache_made_values_again() -> None:
    s = cluster(alike_inventory, "sparse", True)
    p = pod(gpus=1)
    assert (await s.filter(filter_args(p, ["n0", "n1"]))).NodeNames == ["n0", "n1"]
    # A shape never seen makes new cost entries: kept picks no longer hold.
    await s.filter(filter_args(pod(mem=2000, milli=300, job_class="transformer"),
                                 ["n2", "n3"]))
    await bind_pod(s, p, "n1")
    assert s.node_verdicts.bind_reused == 0
    assert s.state.reservations[p["metadata"]["uid"]].node == "n1"
