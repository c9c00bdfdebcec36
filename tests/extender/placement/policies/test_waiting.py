"""Waiting multi-GPU pods and the drain term of sparse (extender/placement/policies/waiting.py)."""

from __future__ import annotations

from builders import gpu_node, inventory

from extender.demand import ContainerRequest, PodDemand
from extender.interference import default_matrix
from extender.ledger.rules import Allocation, Reservation
from extender.placement import ClusterState, assign, fit, node_costs
from extender.placement.policies.sparse import Sparse
from extender.placement.policies.waiting import WaitingPods, drain_costs


def whole(uid: str, n: int) -> PodDemand:
    return PodDemand(uid=uid, namespace="ml", name=uid,
                     containers=(ContainerRequest("c", n, 0, 0),), whole_gpus=n,
                     share_milli=0, share_mem_mib=0)


def booked(uid: str, node: str, gpus: list[int]) -> Reservation:
    return Reservation(pod_uid=uid, namespace="ml", name=uid, node=node, allocations=tuple(
        Allocation(f"GPU-{node}-{i}", "c", 32768, 1000) for i in gpus))


def cluster() -> ClusterState:
    """Two 4-GPU nodes: ``a`` with 3 GPUs free (nearly able to host a 4-GPU pod), ``b`` with
    one free."""
    state = ClusterState.build(inventory(gpu_node("a", 4), gpu_node("b", 4)), default_matrix())
    state.apply(booked("ra", "a", [0]))
    state.apply(booked("rb", "b", [0, 1, 2]))
    return state


def test_a_pod_waits_once_asked_again_and_stops_once_booked():
    state = cluster()
    pods = WaitingPods()
    big = whole("big", 4)
    pods.observe(big)
    pods.observe(big)  # the same scoring round (costs, then the assignment)
    assert pods.waiting(state) == []  # asked once: the FGD protocol's pods never wait
    pods.observe(whole("small", 1))
    assert pods.waiting(state) == []  # one-GPU pods are not tracked
    pods.observe(big)
    assert [p.gpus for p in pods.waiting(state)] == [4]
    assert pods.waiting(state, exclude="big") == []
    state.apply(booked("big", "b", [3]))
    assert pods.waiting(state) == []


def test_drain_cost_is_highest_on_the_node_nearest_to_the_waiting_pod():
    state = cluster()
    pods = WaitingPods()
    for uid in ("big", "x", "big"):
        pods.observe(whole(uid, 4))
    one = whole("one", 1)
    masks = fit(state, one, ["a", "b"]).masks
    _, cost = drain_costs(state, one, masks, pods.waiting(state))
    on_a = cost[state.gpu_node[masks.gpus] == state.node_index["a"]]
    on_b = cost[state.gpu_node[masks.gpus] == state.node_index["b"]]
    assert on_a.min() > on_b.max() > 0  # a: 3 -> 2 free costs (9 - 4) / 4; b: (1 - 0) / 4
    assert on_a.max() == 5 / 4 and on_b.max() == 1 / 4


def test_sparse_keeps_the_nearly_free_node_for_the_waiting_pod():
    def place(policy: Sparse, state: ClusterState, uid: str = "one") -> str:
        one = whole(uid, 1)
        result = fit(state, one, ["a", "b"])
        costs = node_costs(state, one, result, policy)
        node = result.names[int(costs.argmin())]
        assert assign(state, one, node, policy) is not None
        return node

    quiet = Sparse(drain_weight=0.0)
    assert place(quiet, cluster()) == "a"  # nothing waits: the node order decides
    policy = Sparse()
    state = cluster()
    big = whole("big", 4)
    for _ in range(2):  # kube-scheduler retries the unschedulable 4-GPU pod
        result = fit(state, big, ["a", "b"])
        assert not result.fits.any()
        node_costs(state, big, result, policy)  # nothing fits: the policy learns it waits
        place(policy, state, "other")  # another pod's round in between
    assert place(policy, state) == "b"


def _uncacheable(policy: Sparse, state, demand) -> bool:
    """A cost cache keeps a term only with an epoch; None: it reads more than the nodes."""
    return any(term.epoch is None for term in policy.cost_terms(state, demand))


def test_costs_are_not_cached_while_a_pod_waits():
    state = cluster()
    policy = Sparse()
    one = whole("one", 1)
    policy.note(one)
    assert not _uncacheable(policy, state, one)
    big = whole("big", 4)
    for uid in ("big", "other", "big"):
        policy.unplaced(whole(uid, 4) if uid == "big" else one)
    assert _uncacheable(policy, state, one)  # the drain term reads the waiting pod
    assert not _uncacheable(policy, state, big)  # its own costs do not
    state.apply(booked("big", "b", [3]))
    assert not _uncacheable(policy, state, one)
