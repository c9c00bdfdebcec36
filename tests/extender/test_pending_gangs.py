"""A gang kube-scheduler refused on its own count of nvidia.com/gpu holds a node all the same
(extender/kube/pendinggangs.py, verbs/holdfilter.hold_unscheduled): the pod watch's part."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
from builders import filter_args, gpu_node, inventory, place_pod, pod

from extender.annotations import ANN_GANG_SLOT
from extender.interference import default_matrix
from extender.kube.pendinggangs import PendingGangs, record_predicted_end, unschedulable_gang
from extender.ledger.memory import MemoryLedger
from extender.placement import make_policy
from extender.placement.holds import HoldBook
from extender.service import Scheduler

NOW = [1000.0]


@pytest.fixture
def sched() -> Scheduler:
    NOW[0] = 1000.0
    rack = {"rack": "r1"}
    nodes = (dataclasses.replace(gpu_node("a", 4), labels=rack),
             dataclasses.replace(gpu_node("b", 4), labels=rack), gpu_node("c", 4))
    return Scheduler(inventory=inventory(*nodes), ledger=MemoryLedger(),
                     matrix=default_matrix(), policy=make_policy("sparse"),
                     clock=lambda: NOW[0])


def gpu_pod(name: str, gpus: int, seconds: float | None, refused: bool = False,
            selector: dict[str, str] | None = None) -> dict:
    p = pod(name, gpus=gpus, predicted_s=seconds)
    if refused:  # as kube-scheduler marks a pod no node passed its own filters
        p["status"]["conditions"] = [{"type": "PodScheduled", "status": "False",
                                      "reason": "Unschedulable",
                                      "message": "0/3 nodes are available: 3 Insufficient"
                                                 " nvidia.com/gpu."}]
    if selector:
        p["spec"]["nodeSelector"] = selector
    return p


async def drain(s: Scheduler, a_s: float, b_s: float, c_s: float) -> None:
    """Three of each node's four GPUs taken, predicted to end after a_s, b_s and c_s."""
    for node, seconds in (("a", a_s), ("b", b_s), ("c", c_s)):
        for i in range(3):
            await place_pod(s, gpu_pod(f"{node}{i}", 1, seconds), node)


async def test_a_refused_gang_holds_the_node_where_it_starts_soonest(sched):
    notes = []
    gangs = PendingGangs(sched, lambda p, m: notes.append((p["metadata"]["name"], m)))
    await drain(sched, 5000, 2000, 50)
    gang = gpu_pod("gang", 4, 3600, refused=True, selector={"rack": "r1"})
    assert unschedulable_gang(gang)
    await gangs.seen("MODIFIED", gang)
    hold = sched.holds.hold  # c drains first, but the pod's nodeSelector leaves a and b
    assert (hold.owner, hold.name, hold.gpus, hold.start_s) == (
        gang["metadata"]["uid"], "b", 4, 3000.0)
    assert notes == [("gang", "node b is held for this pod's 4 GPUs (predicted free in 2000 s);"
                               " pods predicted to end later are kept off it")]
    # filter keeps a long pod off b, and lets a short one in
    late = await sched.filter(filter_args(gpu_pod("late", 1, 1500), ["a", "b"]))
    assert late.NodeNames == ["a"] and "held for a waiting gang" in late.FailedNodes["b"]
    early = await sched.filter(filter_args(gpu_pod("early", 1, 40), ["a", "b"]))
    assert sorted(early.NodeNames) == ["a", "b"]
    # renewed while it waits (filter is never asked about it): no lapse, no second event
    for _ in range(3):
        NOW[0] += 300
        await gangs.hold()
    assert sched.holds.hold.owner == gang["metadata"]["uid"] and len(notes) == 1
    # bound (by any replica): the hold ends
    bound = dict(gang, spec={**gang["spec"], "nodeName": "b"})
    await gangs.seen("MODIFIED", bound)
    assert sched.holds.hold is None


async def test_the_next_waiting_gang_takes_the_hold_when_the_first_is_deleted(sched):
    gangs = PendingGangs(sched)
    await drain(sched, 500, 100, 50)
    first = gpu_pod("first", 4, 3600, refused=True)
    second = gpu_pod("second", 3, 3600, refused=True)
    second["metadata"]["creationTimestamp"] = "2026-11-30T10:00:05Z"  # younger
    await gangs.resync([second, first, gpu_pod("running", 1, 10)])
    assert sched.holds.hold.owner == first["metadata"]["uid"]
    await gangs.seen("DELETED", first)
    hold = sched.holds.hold
    assert hold.owner == second["metadata"]["uid"] and hold.name == "c"
    await gangs.resync([])  # gone from a re-list too
    assert sched.holds.hold is None


async def test_no_hold_for_what_is_not_a_gang_refused_for_its_gpus(sched):
    gangs = PendingGangs(sched)
    await drain(sched, 500, 100, 50)
    one = gpu_pod("one", 1, 3600, refused=True)
    assert not unschedulable_gang(one)  # a single GPU: any GPU that frees fits it
    assert not unschedulable_gang(gpu_pod("asked", 4, 3600))  # not refused (yet)
    worker = gpu_pod("worker", 4, 3600, refused=True)
    worker["metadata"]["annotations"][ANN_GANG_SLOT] = "gang/j/0/0"
    assert not unschedulable_gang(worker)  # its gang's request holds, not its pod
    await gangs.seen("ADDED", one)
    assert sched.holds.hold is None
    # refused for something else (CPU, a taint...): a node could take its GPUs now
    fits = gpu_pod("fits", 2, 3600, refused=True)
    for uid in [u for u, r in sched.state.reservations.items() if r.node == "a"]:
        await sched.release(uid)
    await gangs.seen("ADDED", fits)
    assert sched.holds.hold is None


async def test_after_a_restart_the_predicted_ends_come_from_the_bound_pods(sched):
    """A restarted replica (or one that did not bind them) takes each bound pod's predicted
    end from its annotation and the time it was bound; without them no node would ever
    drain and no hold could be set."""
    bound = "2026-11-30T10:00:00Z"
    t0 = dt.datetime.fromisoformat(bound).timestamp()
    pods = {}
    for node, seconds in (("a", 5000), ("b", 2000), ("c", None)):
        for i in range(3):
            p = gpu_pod(f"{node}{i}", 1, seconds)
            await place_pod(sched, p, node)
            p["spec"]["nodeName"] = node
            p["status"]["conditions"] = [{"type": "PodScheduled", "status": "True",
                                          "lastTransitionTime": bound}]
            pods[p["metadata"]["uid"]] = p
    sched.holds = HoldBook()  # the restart: the bookings are adopted, the ends forgotten
    NOW[0] = t0 + 600
    gangs = PendingGangs(sched)
    await gangs.seen("ADDED", gpu_pod("gang", 4, 3600, refused=True))
    assert sched.holds.hold is None  # every pod "never ends"
    for p in pods.values():
        record_predicted_end(sched, p)
    await gangs.hold()
    assert (sched.holds.hold.name, sched.holds.hold.start_s) == ("b", t0 + 2000)


def node_term(**term) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [term]}}}


async def test_required_node_affinity_leaves_the_soonest_node_out(sched):
    """c drains first, but the pod's required affinity excludes it: the next eligible node
    (b, before a) is held, as kube-scheduler would only ever bind the pod to a or b."""
    gangs = PendingGangs(sched)
    await drain(sched, 5000, 2000, 50)
    gang = gpu_pod("gang", 4, 3600, refused=True)
    gang["spec"]["affinity"] = node_term(
        matchFields=[{"key": "metadata.name", "operator": "NotIn", "values": ["c"]}])
    await gangs.seen("MODIFIED", gang)
    assert sched.holds.hold.name == "b"
    gangs.gone(gang["metadata"]["uid"])
    gang["spec"]["affinity"] = node_term(
        matchExpressions=[{"key": "rack", "operator": "DoesNotExist"}])  # only c
    await gangs.seen("MODIFIED", gang)
    assert sched.holds.hold.name == "c"


async def test_an_untolerated_taint_leaves_the_node_out(sched):
    gangs = PendingGangs(sched)
    await drain(sched, 5000, 2000, 50)
    gangs.nodes_resynced([{"metadata": {"name": "c"}, "spec": {"taints": [
        {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]}}])
    gang = gpu_pod("gang", 4, 3600, refused=True)
    await gangs.seen("MODIFIED", gang)
    assert sched.holds.hold.name == "b"
    gangs.gone(gang["metadata"]["uid"])
    gang["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "infer"}]
    await gangs.seen("MODIFIED", gang)
    assert sched.holds.hold.name == "c"  # tolerated: the soonest node again
    gangs.gone(gang["metadata"]["uid"])
    gangs.node_seen("MODIFIED", {"metadata": {"name": "c"}, "spec": {"unschedulable": True}})
    await gangs.seen("MODIFIED", gang)
    assert sched.holds.hold.name == "b"  # cordoned
    gangs.gone(gang["metadata"]["uid"])
    gangs.node_seen("MODIFIED", {"metadata": {"name": "c"}, "spec": {}})  # uncordoned
    await gangs.seen("MODIFIED", gang)
    assert sched.holds.hold.name == "c"


async def test_a_gang_no_node_allows_holds_none_and_the_next_one_may(sched):
    gangs = PendingGangs(sched)
    await drain(sched, 5000, 2000, 50)
    nowhere = gpu_pod("nowhere", 4, 3600, refused=True)
    nowhere["spec"]["affinity"] = node_term(
        matchExpressions=[{"key": "rack", "operator": "In", "values": ["r9"]}])
    await gangs.seen("ADDED", nowhere)
    assert sched.holds.hold is None
    gangs.nodes_resynced([{"metadata": {"name": n}, "spec": {"taints": [
        {"key": "gpu-maint", "effect": "NoExecute"}]}} for n in ("a", "b", "c")])
    tainted = gpu_pod("tainted", 4, 3600, refused=True)
    tainted["metadata"]["creationTimestamp"] = "2026-11-30T10:00:05Z"  # behind it
    await gangs.seen("ADDED", tainted)
    assert sched.holds.hold is None  # every node tainted, no toleration
    gangs.nodes_resynced([])  # the maintenance is over
    await gangs.hold()
    assert sched.holds.hold.owner == tainted["metadata"]["uid"]  # the first that can use one
