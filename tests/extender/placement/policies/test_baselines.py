"""Each trace baseline picks exactly the node and GPU its formula says (hand-computed below).

Cluster (cpu left / GPUs' milli left):
  n1: 2 x T4,      cpu 8000 of 32000,  GPU0 700 booked (left 300), GPU1 free      U = 1300
  n2: 4 x V100M32, cpu 60000 of 64000, all free                                   U = 4000
  n3: 8 x G2,      cpu 20000 of 96000, GPU0 whole (left 0), GPU1 300 booked (left 700)  U = 6700
Pod: a 500-milli share (8192 MiB), 4000 milli CPU.
"""

from __future__ import annotations

import numpy as np
import pytest
from builders import gpu_node, inventory

from bench.sim.trace import make_demand
from extender.interference import default_matrix
from extender.ledger.rules import Allocation, Reservation
from extender.placement import ClusterState, assign, fit, make_policy, node_costs
from extender.placement.policies.common import HostView
from extender.placement.policies.fgd import FGD, TypicalTasks, fgd_score
from extender.placement.policies.random_fit import RandomFit

MODELS = {"T4", "V100M32", "G2"}


def booked(uid, gpu, milli, node, mem=None):
    return Reservation(pod_uid=uid, namespace="t", name=uid, node=node,
                       allocations=(Allocation(gpu, "c", mem if mem is not None else milli * 16,
                                               milli),))


@pytest.fixture
def state():
    inv = inventory(gpu_node("n1", 2, "T4", 16384), gpu_node("n2", 4, "V100M32", 32768),
                    gpu_node("n3", 8, "G2", 32768))
    st = ClusterState.build(inv, default_matrix(), [
        booked("a", "GPU-n1-0", 700, "n1"),
        booked("b", "GPU-n3-0", 1000, "n3", mem=32768),
        booked("c", "GPU-n3-1", 300, "n3"),
    ])
    cap = np.array([32000, 64000, 96000])
    mem = np.array([262144] * 3)
    tags = np.zeros((3, 65), dtype=np.int64)
    tags[0, 0] = 1  # n1: one share pod
    tags[2, 0] = tags[2, 1] = 1  # n3: a share pod and a 1-GPU pod
    st.host = HostView(cap, np.array([8000, 60000, 20000]), mem, mem.copy(),
                       np.array([1, 0, 2]), tags)
    return st


def share_pod(milli=500, cpu=4000):
    return make_demand("p", cpu, 1024, 1, milli, "", MODELS)


def choose(state, demand, policy):
    """Node costs (100 - score) rounded to whole points, first minimum wins (the simulator's
    rule)."""
    result = fit(state, demand, state.node_names)
    costs = node_costs(state, demand, result, policy)
    rounded = np.round(costs / getattr(policy, "score_step", 1.0))
    best = result.names[int(np.argmin(rounded))]
    return rounded.tolist(), assign(state, demand, best, policy)


def test_share_memory_is_proportional_to_smallest_model():
    assert share_pod().share_mem_mib == 500 * 16384 // 1000
    assert make_demand("q", 0, 0, 1, 500, "G2", MODELS).share_mem_mib == 500 * 32768 // 1000
    d = make_demand("e", 0, 0, 1, 500, "", MODELS, exclusive=True)
    assert (d.whole_gpus, d.has_share) == (1, False)


def test_best_fit(state):
    # n1: 1 - (0.5*4000/128000 + 0.5*800/8000) = 0.934 -> 93; n2: 0.5625 -> 56; n3: 0.55 -> 55
    costs, a = choose(state, share_pod(), make_policy("best-fit"))
    assert costs == [7, 44, 45]
    assert (a.node, a.share) == ("n1", "GPU-n1-1")


def test_dot_product_prefers_smallest_product(state):
    # dp/2: n1 0.00605 -> 99; n2 0.02295 -> 97; n3 0.02861 -> 97
    costs, a = choose(state, share_pod(), make_policy("dot-product"))
    assert costs == [1, 3, 3]
    assert (a.node, a.share) == ("n1", "GPU-n1-1")


def test_gpu_packing(state):
    # n1: needs a fully free GPU -> case 2: 50 - 1 = 49; n2: all free -> case 3: 33 - 4 = 29;
    # n3: GPU1 (700 left) fits -> case 1: 100 - (700*100//1000)//10 = 93
    costs, a = choose(state, share_pod(), make_policy("gpu-packing"))
    assert costs == [51, 71, 7]
    assert (a.node, a.share) == ("n3", "GPU-n3-1")


def test_gpu_packing_best_gpu_is_least_left(state):
    # a 200-milli share fits n1's GPU0 (300 left): case 1, 100 - 30//10 = 97 beats n3's 93,
    # and inside n1 "best" takes GPU0 (least left), not the free GPU1
    costs, a = choose(state, share_pod(milli=200), make_policy("gpu-packing"))
    assert costs == [3, 71, 7]
    assert (a.node, a.share) == ("n1", "GPU-n1-0")


def test_gpu_clustering(state):
    # n1 only shares: 75 + 25*6700//8000 = 75 + 20; n2 empty: 25 + 12; n3 mixed: 50 + 4
    costs, a = choose(state, share_pod(), make_policy("gpu-clustering"))
    assert costs == [5, 63, 46]
    assert a.node == "n1"


def test_fgd(state):
    tasks = TypicalTasks.of([(1000, 500, 1, None, 1.0), (1000, 1000, 1, None, 1.0)])
    policy = FGD(tasks)
    # F: n1 300 -> 550 (score 43); n2 0 -> 250 (43);
    # n3 350 -> 200 on GPU1 (score int(100 sigmoid(0.15)) = 53), -> 600 on a free GPU (43)
    assert fgd_score(np.array([-250.0, 150.0])).tolist() == [43, 53]
    costs, a = choose(state, share_pod(), policy)
    assert costs == [57, 57, 47]
    assert (a.node, a.share) == ("n3", "GPU-n3-1")
    # a whole GPU changes no node's F (n1: 300 -> 300 left, all of it a fragment either way):
    # score 50 everywhere, the first node wins and gets its only free GPU
    w = make_demand("w", 1000, 1024, 1, 1000, "", MODELS)
    costs, a = choose(state, w, policy)
    assert costs == [50, 50, 50]
    assert a.node == "n1" and a.whole == ("GPU-n1-1",)


def test_fgd_cpu_only_pod_avoids_starving_typical_tasks(state):
    tasks = TypicalTasks.of([(10000, 500, 1, None, 1.0)])
    policy = FGD(tasks)
    cpu_pod = make_demand("c", 15000, 0, 0, 0, "", MODELS)
    costs = policy.host_costs(state, cpu_pod, np.arange(3))
    # n3 (20000 left) drops below 10000: its 6.7 idle GPUs become fragments -> score 0;
    # n1 cannot run the task before or after (cpu 8000 < 15000 is filtered by the simulator)
    assert costs[2] == -fgd_score(np.array([-6700.0]))[0] == 0
    assert costs[1] == -50.0  # n2: 60000 -> 45000, still fits the task: no change


def test_random_fit_draws_uniformly_among_feasible(state):
    d = share_pod()
    for seed in range(5):
        expected = np.random.default_rng(seed).choice(np.arange(3))
        policy = RandomFit(seed)
        _, a = choose(state, d, policy)
        assert a.node == f"n{expected + 1}"


def test_kube_exclusive_spreads_on_cpu_and_memory(state):
    d = make_demand("x", 4000, 1024, 1, 500, "", MODELS, exclusive=True)
    # least allocated: n1 (4000*100//32000 + 261120*100//262144)//2 = (12 + 99)//2 = 55
    # n2 (56000*100//64000=87 + 99)//2 = 93; n3 (16000*100//96000=16 + 99)//2 = 57
    costs, a = choose(state, d, make_policy("kube-exclusive"))
    assert costs == [45, 7, 43]
    assert a.node == "n2" and a.whole == ("GPU-n2-0",) and a.share is None


def test_kube_shared_binpacks_gpu_memory_inside_the_node(state):
    d = make_demand("x", 4000, 1024, 1, 200, "", MODELS)
    policy = make_policy("kube-shared")
    a = assign(state, d, "n3", policy)
    assert a.share == "GPU-n3-1"  # the GPU with the least memory left that fits
