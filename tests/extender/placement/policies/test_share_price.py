"""What a GPU's free milli is worth to the mix, priced by the mix's best packing
(share_price.py), and the sparse term built on it."""

from __future__ import annotations

import numpy as np
from builders import gpu_node, inventory

from bench.sim.trace import make_demand
from extender.interference import default_matrix
from extender.placement import ClusterState, assign, fit, node_costs, reservation_for
from extender.placement.policies.common import HostView
from extender.placement.policies.fgd import TypicalTasks
from extender.placement.policies.share_price import (
    host_share,
    price_cost,
    share_prices,
    value_table,
)
from extender.placement.policies.sparse import Sparse


def tasks(**popularity):
    return TypicalTasks.of([(4000, int(m[1:]), 1, None, float(p))
                            for m, p in popularity.items()])


def test_prices_are_a_shares_part_of_a_gpu_in_the_best_packing():
    assert np.allclose(share_prices(np.array([500]), np.array([1.0]))[0], [0.5])
    assert np.allclose(share_prices(np.array([300]), np.array([1.0]))[0], [1 / 3])
    pair, packings = share_prices(np.array([400, 600]), np.array([1.0, 1.0]))
    assert np.isclose(pair.sum(), 1.0)  # every GPU holds one of each
    assert {400: 1, 600: 1} in packings


def test_a_warm_start_gives_the_prices_of_a_cold_one():
    mix = tasks(s810=10, s160=1, s470=10, s320=5, s650=5, s230=3, s590=2)
    cold, packings = value_table(mix)
    moved = tasks(s810=9, s160=1, s470=11, s320=5, s650=4, s230=3, s550=2)
    assert np.allclose(value_table(moved, packings)[0], value_table(moved)[0])


def test_a_size_scarce_beside_the_gaps_it_fills_is_worth_nothing():
    """Ten 810s for every 160: the 810s' gaps take every 160 there is, so a 190 gap (or any
    gap only a 160 fits) is worth nothing, while a 530 gap still takes a 470."""
    mix = tasks(s810=10, s160=1, s470=10, s320=5, s650=5)
    value, _ = value_table(mix)
    assert value[190] == 0 and value[210] == 0
    assert np.isclose(value[530], 0.5) and np.isclose(value[1000], 1.0)
    # a 320 beside a 470 spends the 470's partner slot on a gap nobody fills: costs more
    # than opening an empty GPU or joining a 650 (the best packing's 320 + 650)
    cost = price_cost(value, np.array([530, 1000, 350]), 320)
    assert cost[0] > cost[1] and np.isclose(cost[1], cost[2])


def place_on(state, d, node, policy):
    a = assign(state, d, node, policy)
    state.apply(reservation_for(d, a, state, 0.0, None))


def best_node(state, d, policy):
    result = fit(state, d, state.node_names)
    return result.names[int(np.argmin(node_costs(state, d, result, policy)))]


def test_sparse_keeps_a_gap_for_the_share_that_fills_it_when_fillers_are_scarce():
    """A 470 waits on n1 for its partner; a 320 comes. Filling by popularity (remainder term)
    puts it beside the 470, as if 160s would close the 210 left; but every 160 is needed
    beside the 810s, so the price term opens n2 and keeps n1's gap for the next 470."""
    state = ClusterState.build(inventory(gpu_node("n1", 1, "G2"), gpu_node("n2", 1, "G2")),
                               default_matrix())
    mix = tasks(s810=10, s160=1, s470=10, s320=5, s650=5)
    off = dict(adaptive=False, frag_weight=0.0, order_weight=0.0, drain_weight=0.0)
    priced = Sparse(**off, remainder_weight=0.0, price_weight=1.0)
    filled = Sparse(**off, remainder_weight=1.0, price_weight=0.0)
    for policy in (priced, filled):
        policy.set_workload(mix)

    def share(uid, milli):
        return make_demand(uid, 1000, 1024, 1, milli, "", {"G2"})

    place_on(state, share("a", 470), "n1", priced)
    d = share("b", 320)
    assert best_node(state, d, priced) == "n2"
    assert best_node(state, d, filled) == "n1"


def test_a_gap_the_nodes_cpu_cannot_serve_is_worth_nothing():
    """Two empty one-GPU nodes; n1 has CPU for this share only. The 680 milli a 320 leaves
    there could take a 650, but no 650 pod can come for lack of CPU: placing it on n1
    strands the GPU's worth, on n2 it leaves a gap the mix fills."""
    state = ClusterState.build(inventory(gpu_node("n1", 1, "G2"), gpu_node("n2", 1, "G2")),
                               default_matrix())
    cpu = np.array([4000, 64000])
    mem = np.array([1 << 20, 1 << 20])
    state.host = HostView(cpu.copy(), cpu, mem.copy(), mem, np.zeros(2, np.int64))
    policy = Sparse(adaptive=False, frag_weight=0.0, order_weight=0.0, drain_weight=0.0,
                    remainder_weight=0.0, price_weight=1.0)
    policy.set_workload(tasks(s320=1, s650=1))
    d = make_demand("a", 4000, 1024, 1, 320, "", {"G2"})
    assert best_node(state, d, policy) == "n2"
    state.host = None  # no host view: both gaps look alike, the first node wins the tie
    assert best_node(state, d, policy) == "n1"
    assert np.allclose(host_share(tasks(s320=1, s650=3), np.array([0, 4000]),
                                  np.array([0, 1 << 20])), [0.0, 1.0])


def test_a_gap_is_worth_only_what_the_shares_allowed_on_its_model_make_of_it():
    """650s may only use G2 GPUs, 320s any. A 320 opening a GPU leaves 680 that a 650 would
    fill on the G2 node but only 320s can reach on the G3 node: it goes to G3 and keeps the
    G2 GPU for the pods that need that model. Without model lists both look alike."""
    state = ClusterState.build(inventory(gpu_node("n1", 1, "G2"), gpu_node("n2", 1, "G3")),
                               default_matrix())
    d = make_demand("a", 4000, 1024, 1, 320, "", {"G2", "G3"})
    for models, want in ((frozenset({"G2"}), "n2"), (None, "n1")):
        policy = Sparse(adaptive=False, frag_weight=0.0, order_weight=0.0, drain_weight=0.0,
                        remainder_weight=0.0, price_weight=1.0)
        policy.set_workload(TypicalTasks.of([(4000, 650, 1, models, 1.0),
                                             (4000, 320, 1, None, 1.0)]))
        assert best_node(state, d, policy) == want
