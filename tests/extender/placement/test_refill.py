"""A node changed by a bind or a release is priced again on its own: the patched per-node
state equals a full rebuild, bit for bit, after random bookings and releases."""

from __future__ import annotations

import random

import numpy as np
import pytest
from builders import pod, random_book_or_release

from bench.latency.cluster import half_occupancy, synthetic_inventory
from extender.demand import pod_demand
from extender.interference import default_matrix
from extender.placement import ClusterState, fit, make_policy
from extender.placement.fit import gpu_masks
from extender.placement.policies.fgd import FEW_GPUS, FragModel
from extender.protocol import pod_from_dict

SHAPES = [dict(mem=2048, milli=200, job_class="cnn"), dict(mem=4096, milli=300),
          dict(gpus=1), dict(mem=1024, milli=100, job_class="recommendation"),
          dict(mem=8192, milli=700)]


def random_steps(seed: int, steps: int, nodes: int = 30, gpus: int = 4):
    """(state, policy, demand) after each random booking or release on a half-full cluster."""
    rng = random.Random(seed)
    inv = synthetic_inventory(nodes, gpus)
    state = ClusterState.build(inv, default_matrix(), half_occupancy(inv, 0.3))
    policy = make_policy("sparse")
    names = sorted(inv.nodes)
    booked: list[str] = []
    for _ in range(steps):
        demand = pod_demand(pod_from_dict(pod(**rng.choice(SHAPES))))
        yield state, policy, demand
        result = fit(state, demand, names, explain=False)
        fitting = [result.names[i] for i in np.flatnonzero(result.fits)]
        random_book_or_release(rng, state, demand, fitting, policy, booked)


@pytest.mark.parametrize("fill", [True, False])
def test_patched_fragmentation_aggregates_equal_a_full_pass(fill: bool) -> None:
    tasks = make_policy("sparse")._frag.model.tasks
    model = FragModel(tasks, fill)
    for state, _, _ in random_steps(3, 80):
        patched = model.state_aggregates(state)  # only the nodes changed since the last call
        fresh = FragModel(tasks, fill).state_aggregates(state)  # every node from scratch
        for a, b in zip(patched, fresh, strict=True):
            np.testing.assert_array_equal(a, b)


def test_a_few_share_gpus_priced_row_by_row_equal_the_folded_pass() -> None:
    steps = 0
    for state, policy, demand in random_steps(5, 60):
        if not demand.has_share:
            continue
        frag = policy._frag
        everything = np.arange(len(state.node_names))
        whole = gpu_masks(state, demand, everything)
        assert whole.share.sum() > FEW_GPUS  # the folded pass (GPUs alike in value shared)
        share_all, _ = frag.deltas(state, demand, whole, per_task=True)
        for node in (0, 7, len(everything) - 1):  # one node: row by row
            one = gpu_masks(state, demand, np.array([node]))
            share_one, _ = frag.deltas(state, demand, one, per_task=True)
            np.testing.assert_array_equal(share_one[one.share],
                                          share_all[one.gpus[one.share]])
        steps += 1
    assert steps > 20
