"""The cost cache answers exactly what the policy computes, as bookings come and go."""

from __future__ import annotations

import random

import numpy as np
import pytest
from builders import pod

from bench.latency.cluster import half_occupancy, synthetic_inventory
from extender.demand import pod_demand
from extender.interference import default_matrix
from extender.placement import ClusterState, assign, fit, make_policy, node_costs, reservation_for
from extender.protocol import pod_from_dict
from extender.verbs.costcache import CachedPolicy, CostCache


@pytest.mark.parametrize("policy_name", ["sparse", "fgd", "best-fit"])
def test_cached_costs_equal_the_policy_through_bookings_and_releases(policy_name: str) -> None:
    rng = random.Random(7)
    inv = synthetic_inventory(40, 4)
    state = ClusterState.build(inv, default_matrix(), half_occupancy(inv, 0.3))
    policy = make_policy(policy_name)
    cache = CostCache()
    cached = CachedPolicy(policy, cache)
    names = sorted(inv.nodes)
    shapes = [dict(mem=2048, milli=200, job_class="cnn"), dict(mem=4096, milli=300),
              dict(gpus=1), dict(gpus=2), dict(mem=1024, milli=100, job_class="recommendation")]
    booked: list[str] = []
    for step in range(120):
        demand = pod_demand(pod_from_dict(pod(**rng.choice(shapes))))
        candidates = rng.sample(names, rng.randint(1, len(names)))
        view = state
        if step % 7 == 0:  # own_excluded hands in copies without the pod's own booking
            view = state.copy()
            if booked:
                view.unapply(booked[-1])
        result = fit(view, demand, candidates)
        expected = node_costs(view, demand, result, policy)
        # Equal up to the last bit of a dot product: the interference term's matrix product
        # rounds by the length of the block it is given (so does the policy's own answer,
        # which varies with the candidate list in the same way).
        np.testing.assert_allclose(node_costs(view, demand, result, cached), expected,
                                   rtol=1e-12, atol=1e-12)
        fitting = [result.names[i] for i in np.flatnonzero(result.fits)]
        if booked and rng.random() < 0.3:
            state.unapply(booked.pop(rng.randrange(len(booked))))
        elif fitting:
            choice = assign(state, demand, rng.choice(fitting), policy)
            assert choice is not None
            r = reservation_for(demand, choice, state, 0.0, None)
            state.apply(r)
            booked.append(r.pod_uid)
    if policy_name in ("sparse", "fgd"):
        assert cache.reused_gpus > 4 * cache.computed_nodes  # it did save work


def test_a_new_inventory_starts_afresh() -> None:
    inv = synthetic_inventory(10, 2)
    policy = make_policy("sparse")
    cache = CostCache()
    demand = pod_demand(pod_from_dict(pod(mem=2048, milli=200)))
    for occupancy in (0.2, 0.6):
        state = ClusterState.build(inv, default_matrix(), half_occupancy(inv, occupancy))
        result = fit(state, demand, sorted(inv.nodes))
        np.testing.assert_allclose(
            node_costs(state, demand, result, CachedPolicy(policy, cache)),
            node_costs(state, demand, result, policy), rtol=1e-12, atol=1e-12)
