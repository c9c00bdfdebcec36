"""sparse's own pod mix (a decayed histogram of the pods it scores) and what it protects."""

from __future__ import annotations

import numpy as np
from builders import gpu_node, inventory

from bench.sim.trace import make_demand
from extender.interference import default_matrix
from extender.placement import ClusterState, assign, fit, node_costs, reservation_for
from extender.placement.policies.common import HostView
from extender.placement.policies.fgd import TypicalTasks
from extender.placement.policies.sparse import Sparse
from extender.placement.policies.sparse_mix import DemandMix, shape_of

MODELS = {"G2"}


def demand(uid, milli=1000, num=1, cpu=4000):
    return make_demand(uid, cpu, 1024, num, milli, "", MODELS)


def place(state, d, policy):
    """The simulator's and the extender's path: fit, node costs, best node, assignment."""
    result = fit(state, d, state.node_names)
    costs = node_costs(state, d, result, policy)
    if not np.isfinite(costs).any():
        return None
    node = result.names[int(np.argmin(costs))]
    a = assign(state, d, node, policy)
    state.apply(reservation_for(d, a, state, 0.0, None))
    return node


def test_each_pod_counts_once_and_old_pods_fade():
    mix = DemandMix(half_life=10, refresh=1000)
    mix.seed(TypicalTasks.of([(4000, 500, 1, None, 1.0)]))
    d = demand("a", 1000, 4)
    mix.observe(d)
    mix.observe(d)  # node costs, then the assignment: the same pod
    # the prior is worth one half-life (10 pods), decayed by one pod's step
    assert np.isclose(mix.popularity()[shape_of(d)], 1 / (1 + 10 * 2 ** -0.1))
    for i in range(100):
        mix.observe(demand(f"b{i}", 1000, 4))
    assert mix.popularity()[(4000, 500, 1, None, 0)] < 0.01


def test_multi_gpu_shapes_weigh_by_their_gpu_demand():
    mix = DemandMix(half_life=1000, refresh=1, weigh="gpus")
    mix.seed(TypicalTasks.of([(4000, 500, 1, None, 1.0)]))
    for i in range(200):  # 190 shares of half a GPU, 10 pods of 8 GPUs
        mix.observe(demand(f"p{i}", 1000, 8) if i % 20 == 0
                    else demand(f"p{i}", 500))
    tasks = mix.tasks()
    eight = float(tasks.p[tasks.num == 8].sum())
    by_count = mix.popularity()[shape_of(demand("x", 1000, 8))]
    assert by_count < 0.01  # a few pods among the prior's and the shares
    assert eight > 5 * by_count  # but a large part of the GPUs asked for
    assert np.isclose(tasks.p.sum(), 1.0)


def test_mix_follows_the_pods_it_is_asked_to_place():
    state = ClusterState.build(inventory(gpu_node("n1", 8, "G2")), default_matrix())
    policy = Sparse()
    assert not (policy._mix.tasks().num == 4).any()  # the generic prior has no 4-GPU pods
    for i in range(300):  # the mix is re-read every 256 pods
        d = demand(f"q{i}", 1000, 4)
        node_costs(state, d, fit(state, d, state.node_names), policy)
    assert (policy._mix.tasks().num == 4).any()


def used_nodes(state):
    return {state.node_names[state.gpu_node[state.gpu_index[g]]]
            for r in state.reservations.values() for g in r.gpus}


def test_multi_gpu_pod_still_finds_a_whole_node_after_a_stream_of_shares():
    """A policy that has seen 8-GPU pods among the recent ones keeps a node whole through a
    stream of shares that fits in the other nodes; with FGD's generic mix (no 8-GPU task) it
    strands two GPUs on every node and the next 8-GPU pod finds no room (FGD's measure; the
    fill measure keeps the node whole with either mix)."""
    nodes = [gpu_node(f"n{i}", 8, "G2") for i in range(5)]
    learned = Sparse(fill=False, _mix=DemandMix(half_life=40, refresh=4))
    generic = Sparse(adaptive=False, fill=False)
    fill_generic = Sparse(adaptive=False)
    scratch = ClusterState.build(inventory(*nodes), default_matrix())
    for i in range(40):  # recent pods, scored by the same core call: one in four of 8 GPUs
        d = demand(f"h{i}", 1000, 8) if i % 4 == 0 else demand(f"h{i}", 400)
        node_costs(scratch, d, fit(scratch, d, scratch.node_names), learned)
    outcome = {}
    for name, policy in (("learned", learned), ("generic", generic),
                         ("fill generic", fill_generic)):
        state = ClusterState.build(inventory(*nodes), default_matrix())
        for i in range(2):
            assert place(state, demand(f"b{i}", 1000, 8), policy) is not None
        for i in range(28):  # 14 GPUs' worth of 400-milli shares on the 24 GPUs left
            assert place(state, demand(f"s{i}", 400), policy) is not None
        outcome[name] = (len(used_nodes(state)), place(state, demand("big", 1000, 8), policy))
    assert outcome["learned"][0] == 4
    assert outcome["learned"][1] is not None
    assert outcome["generic"] == (5, None)
    assert outcome["fill generic"][0] == 4 and outcome["fill generic"][1] is not None


def test_adaptive_mix_can_be_switched_off():
    policy = Sparse(adaptive=False)
    state = ClusterState.build(inventory(gpu_node("n1", 8, "G2")), default_matrix())
    before = policy._frag.model.tasks
    d = demand("x", 1000, 4)
    for _ in range(3):
        node_costs(state, d, fit(state, d, state.node_names), policy)
    assert policy._frag.model.tasks is before


def test_shapes_carry_host_memory_rounded_up_unless_left_out():
    d = make_demand("m", 4000, 40_000, 1, 1000, "", MODELS)
    assert shape_of(d)[4] == 40_960  # 10 x 4 GiB
    assert shape_of(d, mem_step=0)[4] == 0
    mix = DemandMix(refresh=1, mem_step=0)
    mix.observe(d)
    assert mix.tasks().mem is None  # no memory test when no shape carries any


def test_node_whose_host_memory_is_gone_keeps_no_room_for_the_mix():
    """Two 2-GPU nodes; the first has too little host memory left for a second one-GPU pod of
    the mix (48 GiB each). A small pod goes to the second node only when the mix knows the
    pods' memory: on the first it would strand a whole GPU (FGD's measure; under the fill
    measure either node loses one slot of the mix's shape, a tie)."""
    nodes = [gpu_node("a", 2, "G2"), gpu_node("b", 2, "G2")]
    chosen = {}
    for step in (4096, 0):
        policy = Sparse(mem_step=step, fill=False, _mix=DemandMix(half_life=50, refresh=1))
        state = ClusterState.build(inventory(*nodes), default_matrix())
        cpu = np.array([64_000, 64_000])
        mem = np.array([60_000, 200_000])
        state.host = HostView(cpu, cpu.copy(), mem, mem.copy(), np.zeros(2, dtype=np.int64))
        for i in range(20):  # recent pods: one GPU and 48 GiB of host memory each
            d = make_demand(f"h{i}", 4000, 49_152, 1, 1000, "", MODELS)
            node_costs(state, d, fit(state, d, state.node_names), policy)
        small = make_demand("small", 1000, 16_384, 1, 300, "", MODELS)
        chosen[step] = place(state, small, policy)
    assert chosen[4096] == "b"
    assert chosen[0] == "a"  # the fixed node order decides


def test_cpu_weight_sends_cpu_heavy_pods_where_no_gpu_needs_the_cpu():
    """Node a still has free GPUs, node b's are all booked: a pod without GPUs goes to a by
    the node order alone under FGD's measure, to b once its CPU is charged for the GPUs it
    would strand: by ``cpu_weight``, or by the fill measure without any weight."""
    nodes = [gpu_node("a", 2, "G2"), gpu_node("b", 2, "G2")]
    picks = {}
    for weight, fill in ((0.0, False), (1.0, False), (0.0, True)):
        policy = Sparse(cpu_weight=weight, fill=fill)
        state = ClusterState.build(inventory(*nodes), default_matrix())
        cpu = np.array([32_000, 32_000])
        mem = np.array([200_000, 200_000])
        state.host = HostView(cpu, cpu.copy(), mem, mem.copy(), np.zeros(2, dtype=np.int64))
        full = demand("full", 1000, 2)
        state.apply(reservation_for(full, assign(state, full, "b", policy), state, 0.0, None))
        cpu_pod = make_demand("cpu", 16_000, 1024, 0, 0, "", MODELS)
        costs = policy.host_costs(state, cpu_pod, np.arange(2))
        picks[weight, fill] = state.node_names[int(np.argmin(costs))]
    assert picks == {(0.0, False): "a", (1.0, False): "b", (0.0, True): "b"}


def test_fill_measure_counts_remainders_and_cpu_stranded_gpus():
    """Per shape, the free capacity repeated pods of it could not take: GPU remainders, and
    GPUs whose node runs out of CPU first."""
    from extender.placement.policies.fgd import FragModel

    tasks = TypicalTasks.of([(4000, 470, 1, None, 0.5), (8000, 1000, 2, None, 0.5)])
    fm = FragModel(tasks, fill=True)
    left = np.array([1000.0, 1000.0, 530.0])  # one node, three GPUs: 2530 milli free
    slots, _ = fm.aggregates(left, np.zeros(3, dtype=np.int64), 1)
    ok = np.ones((1, 2), dtype=bool)
    u = np.array([2530.0])
    # plenty of CPU: 470s fill 5 slots (60 left on each GPU: 180); 2 whole GPUs -> 1 pod (530)
    assert fm.frag(slots, None, u, np.array([10**9]), ok) == 0.5 * 180 + 0.5 * 530
    # 8 cores: two 470-milli pods, or one 2-GPU pod
    assert fm.frag(slots, None, u, np.array([8000]), ok) == 0.5 * (2530 - 940) + 0.5 * 530
    fgd = FragModel(tasks)  # FGD: one more pod of each fits, only the sub-470 remainders count
    ge, lt = fgd.aggregates(left, np.zeros(3, dtype=np.int64), 1)
    assert fgd.frag(ge, lt, u, np.array([8000]), ok) == 0.5 * 530  # CPU not seen
