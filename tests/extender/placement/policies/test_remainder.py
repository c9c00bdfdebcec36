"""What a share's remainder is worth against the mix of share sizes (remainder.py)."""

from __future__ import annotations

import numpy as np
from builders import gpu_node, inventory

from bench.sim.trace import make_demand
from extender.interference import default_matrix
from extender.placement import ClusterState, assign, fit, node_costs, reservation_for
from extender.placement.policies.fgd import TypicalTasks
from extender.placement.policies.remainder import remainder_cost, waste_table
from extender.placement.policies.sparse import Sparse


def tasks(*sizes):
    return TypicalTasks.of([(4000, m, 1, None, 1.0) for m in sizes])


def test_one_size_leaves_the_modulo_and_a_mix_fills_between():
    one = waste_table(tasks(300))
    assert [one[r] for r in (0, 299, 300, 700, 1000)] == [0, 299, 0, 100, 100]
    mix = waste_table(tasks(500, 300, 200))
    assert mix[150] == 150  # nothing fits
    assert np.isclose(mix[300], 50)  # a 300 (0 left) or a 200 (100 left)
    assert np.isclose(mix[500], 50 / 3)  # a 500, a 300 then a 200, or a 200 then as at 300


def test_remainder_cost_prices_what_the_coming_pods_cannot_use():
    waste = waste_table(tasks(500))
    # 300 on 800 left leaves 500, which the next 500 fills; on 700 it leaves 400, never filled
    cost = remainder_cost(waste, np.array([800, 700, 1000]), 300)
    assert np.allclose(cost, [-0.3, 0.2, 0.2])


def place_on(state, d, node, policy):
    a = assign(state, d, node, policy)
    state.apply(reservation_for(d, a, state, 0.0, None))


def test_sparse_puts_a_share_where_the_mix_fills_its_remainder_not_the_tightest():
    """Only 500-milli shares are coming: a 300 share goes beside the 200 (500 left, a 500
    fills it), not beside the 300 (best fit: 400 left, which no coming pod can use)."""
    state = ClusterState.build(inventory(gpu_node("n1", 1, "G2"), gpu_node("n2", 1, "G2")),
                               default_matrix())
    policy = Sparse(adaptive=False, frag_weight=0.0, order_weight=0.0, drain_weight=0.0,
                    remainder_weight=1.0)
    policy.set_workload(tasks(500))

    def share(uid, milli):
        return make_demand(uid, 1000, 1024, 1, milli, "", {"G2"})

    place_on(state, share("a", 200), "n1", policy)
    place_on(state, share("b", 300), "n2", policy)
    d = share("c", 300)
    result = fit(state, d, state.node_names)
    costs = node_costs(state, d, result, policy)
    assert result.names[int(np.argmin(costs))] == "n1"
    plain = Sparse(adaptive=False, frag_weight=0.0, order_weight=0.0, drain_weight=0.0,
                   fit_weight=1.0)
    costs = node_costs(state, d, result, plain)
    assert result.names[int(np.argmin(costs))] == "n2"  # best fit alone: the tighter GPU
