"""Holds for the waiting gang at the head of the queue (extender/placement/holds.py)."""

from __future__ import annotations

import math

import numpy as np
from builders import gpu_node, inventory

from extender.demand import ContainerRequest, PodDemand
from extender.interference import default_matrix
from extender.ledger.rules import Allocation, Reservation
from extender.placement import ClusterState
from extender.placement.holds import MARGIN, HoldBook


def whole(uid: str, n: int, predicted_s: float | None = None) -> PodDemand:
    return PodDemand(uid=uid, namespace="ml", name=uid,
                     containers=(ContainerRequest("c", n, 0, 0),), whole_gpus=n,
                     share_milli=0, share_mem_mib=0, predicted_s=predicted_s)


def share(uid: str, predicted_s: float | None) -> PodDemand:
    return PodDemand(uid=uid, namespace="ml", name=uid,
                     containers=(ContainerRequest("c", 0, 300, 8000),), whole_gpus=0,
                     share_milli=300, share_mem_mib=8000, predicted_s=predicted_s)


def booked(uid: str, node: str, gpus: list[int]) -> Reservation:
    return Reservation(pod_uid=uid, namespace="ml", name=uid, node=node, allocations=tuple(
        Allocation(f"GPU-{node}-{i}", "c", 32768, 1000) for i in gpus))


def cluster(book: HoldBook) -> ClusterState:
    """Two 4-GPU nodes, all GPUs busy: on ``a`` the last GPU frees at t = 100, on ``b`` at
    t = 500 (predicted)."""
    state = ClusterState.build(inventory(gpu_node("a", 4), gpu_node("b", 4)), default_matrix())
    for node, ends in (("a", (50, 60, 80, 100)), ("b", (100, 200, 300, 500))):
        for i, end in enumerate(ends):
            uid = f"{node}{i}"
            state.apply(booked(uid, node, [i]))
            book.started(uid, 0.0, float(end))
    return state


def test_the_gang_holds_the_node_where_it_starts_soonest():
    book = HoldBook()
    state = cluster(book)
    hold = book.place(state, "gang", 4, 0.0, np.ones(2, dtype=bool))
    assert hold is not None
    assert state.node_names[hold.node] == "a" and hold.start_s == 100.0
    # not eligible (e.g. the wrong GPU model): the other node
    hold = book.place(state, "gang", 4, 0.0, np.array([False, True]))
    assert state.node_names[hold.node] == "b" and hold.start_s == 500.0
    assert book.place(state, "one", 1, 0.0, np.ones(2, dtype=bool)) is None  # no gang


def test_a_pod_predicted_to_end_after_the_hold_is_kept_off_the_held_node():
    book = HoldBook()
    state = cluster(book)
    book.finished("a0")
    state.unapply("a0")  # a GPU of the held node frees at t = 10
    book.place(state, "gang", 4, 10.0, np.ones(2, dtype=bool))
    nodes = np.array([state.node_index["a"], state.node_index["b"]])
    late = whole("late", 1, predicted_s=60.0)  # x margin: ends at 130 > 100
    assert book.refused(state, late, nodes, 10.0).tolist() == [True, False]
    early = whole("early", 1, predicted_s=(100.0 - 10.0) / MARGIN)  # ends at 100
    assert book.refused(state, early, nodes, 10.0).tolist() == [False, False]
    unknown = share("unknown", None)  # no prediction: never ends before the hold
    assert book.refused(state, unknown, nodes, 10.0).tolist() == [True, False]
    assert book.refused(state, whole("gang", 4), nodes, 10.0).tolist() == [False, False]
    assert book.refusals == 2


def test_gpus_beyond_what_the_gang_needs_stay_usable():
    book = HoldBook()
    state = cluster(book)
    for uid in ("a0", "a1"):  # two GPUs of a free now
        book.finished(uid)
        state.unapply(uid)
    book.place(state, "gang", 2, 0.0, np.ones(2, dtype=bool))
    assert book.hold.start_s == 0.0  # (the gang's own placement failed for another reason)
    long = whole("long", 1, predicted_s=1e6)
    assert book.keeps_off(state, long, 0.0)  # 2 free - 1 taken < 2
    assert HoldBook(hold=None).keeps_off(state, long, 0.0) is False


def test_the_hold_ends_when_its_owner_starts_and_overdue_pods_end_now():
    book = HoldBook()
    state = cluster(book)
    book.place(state, "gang", 4, 0.0, np.ones(2, dtype=bool))
    # at t = 150 every pod of ``a`` is past its predicted end: the hold starts now
    hold = book.place(state, "gang", 4, 150.0, np.ones(2, dtype=bool))
    assert hold.start_s == 150.0
    assert book.keeps_off(state, whole("x", 1, predicted_s=1.0), 150.0)
    book.started("gang", 150.0, 30.0)
    assert book.hold is None
    book.started("no-prediction", 0.0, None)
    state.apply(booked("no-prediction", "b", [0]))
    assert math.isinf(book.free_at(state, state.node_index["b"], 0.0)[0])


def test_the_hold_follows_its_node_by_name_when_the_inventory_changes():
    book = HoldBook()
    state = cluster(book)
    book.place(state, "gang", 4, 0.0, np.array([False, True]))  # node b, start 500
    grown = ClusterState.build(inventory(gpu_node("a", 4), gpu_node("aa", 4), gpu_node("b", 4)),
                               default_matrix(), state.reservations.values())
    assert book.node_of(grown) == grown.node_index["b"] == 2
    nodes = np.arange(3)
    assert book.refused(grown, whole("late", 1, 1e4), nodes, 0.0).tolist() == [False, False,
                                                                               True]
    gone = ClusterState.build(inventory(gpu_node("a", 4)), default_matrix())
    assert book.node_of(gone) is None and not book.keeps_off(gone, whole("x", 1, 1e4), 0.0)
