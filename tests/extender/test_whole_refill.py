"""A refill of the whole inventory (a shape's first filter, or any filter after a re-read of
the learned mix) answers what fit and node_costs answer without any cache: its masks, kept
per state and the demand fields they read and shared by shapes of other job classes, its
term values read without gathers, and its costs stored without scatters."""

from __future__ import annotations

import random

import numpy as np
from builders import (
    bind_pod,
    container,
    filter_alike,
    filter_args,
    pod,
    random_bind_or_release,
    without_node_verdicts,
)

from bench.latency.cluster import half_occupancy, synthetic_inventory
from extender import protocol
from extender.demand import pod_demand
from extender.interference import default_matrix
from extender.ledger.memory import MemoryLedger
from extender.placement import ClusterState
from extender.placement.fit import fit, gpu_fits, gpu_masks, masks_key, node_fits
from extender.placement.policies.common import HostView
from extender.placement.policies.sparse import Sparse
from extender.placement.policies.sparse_mix import DemandMix
from extender.service import Scheduler

INVENTORY = synthetic_inventory(24, 4)
NAMES = sorted(INVENTORY.nodes)
# Shapes alike but for the job class (they share masks) or the share's memory (they must
# not: GPUs with 2-12 GiB free take the first and not the second).
SHAPES = [dict(mem=2048, milli=200, job_class="cnn"),
          dict(mem=2048, milli=200, job_class="recommendation"),
          dict(mem=2048, milli=200, job_class="transformer"),
          dict(mem=12288, milli=200, job_class="cnn"),
          dict(mem=12288, milli=200, job_class="recommendation"),
          dict(mem=4096, milli=500, job_class="rnn"), dict(mem=6144, milli=300)]
BIG = [dict(mem=14336, milli=600), dict(mem=10240, milli=700, job_class="gan")]


def scheduler() -> Scheduler:
    # A mix that forgets fast and is re-read every few pods: every shape refills the
    # whole inventory again and again.
    policy = Sparse(_mix=DemandMix(half_life=4.0, refresh=3))
    return Scheduler(inventory=INVENTORY, ledger=MemoryLedger(), matrix=default_matrix(),
                     policy=policy)


async def test_whole_inventory_refills_answer_as_without_any_cache() -> None:
    rng = random.Random(3)
    cached, plain = scheduler(), without_node_verdicts(scheduler())
    shared = 0
    real = cached.node_verdicts._every_masks

    def counting(state, demand, nodes):  # type: ignore[no-untyped-def]
        nonlocal shared
        held = cached.node_verdicts._masks
        shared += held[0] is state and masks_key(demand) in held[2]
        return real(state, demand, nodes)

    cached.node_verdicts._every_masks = counting  # type: ignore[method-assign]
    bound: list[dict] = []
    for step in range(260):
        p = pod(**rng.choice(SHAPES if step % 5 else BIG))
        # mostly the whole inventory in some order, sometimes a window of it
        names = rng.sample(NAMES, len(NAMES) if rng.random() < 0.7 else rng.randint(3, 12))
        a = await filter_alike(cached, plain, p, names, step)
        await random_bind_or_release(rng, (cached, plain), p, a.NodeNames, bound)
    assert shared > 20  # masks were shared across shapes, and the answers stayed exact


async def test_kept_masks_are_not_read_after_a_booking() -> None:
    s = scheduler()
    first = pod(mem=2048, milli=200, job_class="cnn")
    await s.filter(filter_args(first, NAMES))
    state = s.state
    demand = pod_demand(protocol.pod_from_dict(pod(mem=2048, milli=200, job_class="rnn")))
    every = np.arange(len(NAMES))
    kept = s.node_verdicts._every_masks(state, demand, every)
    assert s.node_verdicts._every_masks(state, demand, every) is kept  # same state: shared
    await bind_pod(s, first, NAMES[0])  # a booking: a new stamp, the masks are made again
    assert s.state is state  # the same state object, its arrays changed in place
    again = s.node_verdicts._every_masks(state, demand, every)
    assert again is not kept
    fresh = gpu_masks(state, demand, every)
    assert again.share.tolist() == fresh.share.tolist()
    assert again.free.tolist() == fresh.free.tolist()


def test_the_masks_key_tells_apart_every_field_the_masks_read() -> None:
    state = ClusterState.build(INVENTORY, default_matrix(), half_occupancy(INVENTORY, 0.5))
    every = np.arange(len(NAMES))
    base = dict(mem=2048, milli=200, job_class="cnn")
    alike = pod_demand(protocol.pod_from_dict(pod(**{**base, "job_class": "gan"})))
    first = pod_demand(protocol.pod_from_dict(pod(**base)))
    assert masks_key(first) == masks_key(alike)
    for other in (dict(mem=81920, milli=200), dict(mem=2048, milli=1000),
                  dict(gpus=1), dict(**base, models="A100-80GB")):
        demand = pod_demand(protocol.pod_from_dict(pod(**other)))
        assert masks_key(demand) != masks_key(first), other
        a, b = gpu_masks(state, first, every), gpu_masks(state, demand, every)
        assert (a.share.tolist(), a.free.tolist()) != (b.share.tolist(), b.free.tolist())


def test_fits_from_state_indexes_equal_fit_by_names() -> None:
    """``node_fits`` (a refill's, no name lookups) answers ``fit``'s fits on any nodes, in
    any order, a node twice, with host CPU and memory short on some."""
    rng = random.Random(9)
    state = ClusterState.build(INVENTORY, default_matrix(), half_occupancy(INVENTORY, 0.6))
    n = len(NAMES)
    cpu = np.array([rng.choice([1000, 4000, 64000]) for _ in range(n)], dtype=np.int64)
    mem = np.array([rng.choice([4096, 65536]) for _ in range(n)], dtype=np.int64)
    state.host = HostView(cpu, cpu.copy(), mem, mem.copy(), np.zeros(n, dtype=np.int64))
    shapes = [*SHAPES, *BIG, dict(gpus=1), dict(gpus=2), dict(mem=30000, milli=300),
              dict(containers=[container("a", gpus=1), container("b", mem=4096, milli=200)]),
              dict(**SHAPES[0], models="A100-80GB")]
    short = 0
    for step in range(60):
        demand = pod_demand(protocol.pod_from_dict(pod(**rng.choice(shapes))))
        nodes = (np.arange(n) if step % 4 == 0
                 else np.array(rng.choices(range(n), k=rng.randint(1, 2 * n))))
        expected = fit(state, demand, [NAMES[i] for i in nodes.tolist()], explain=False)
        got = node_fits(state, demand, nodes)
        assert got.tolist() == expected.fits.tolist(), step
        assert node_fits(state, demand, nodes, gpu_masks(state, demand, nodes)).tolist() == (
            expected.fits.tolist())
        short += int((gpu_fits(demand, expected.masks, len(nodes)) & ~got).sum())
    assert short > 0  # host CPU or memory did turn nodes away


def test_masks_kept_at_once_are_bounded(monkeypatch) -> None:
    import extender.verbs.nodecache as nodecache

    monkeypatch.setattr(nodecache, "KEPT_MASKS", 3)
    s = scheduler()
    state = s.state
    every = np.arange(len(NAMES))
    demands = [pod_demand(protocol.pod_from_dict(pod(mem=1024 * (i + 1), milli=100)))
               for i in range(5)]
    for demand in demands:
        s.node_verdicts._every_masks(state, demand, every)
    kept = s.node_verdicts._masks[2]
    assert len(kept) == 3 and masks_key(demands[-1]) in kept
    again = s.node_verdicts._every_masks(state, demands[0], every)  # dropped: made again
    assert again.share.tolist() == gpu_masks(state, demands[0], every).share.tolist()
