"""Pods waiting for several whole GPUs that kube-scheduler refused on its own.

kube-scheduler counts ``nvidia.com/gpu`` itself (the scheduler config leaves it to the
scheduler, so that kubelet's device plugin never over-commits), so a pod asking more whole GPUs
on one node than any node has free is marked ``Unschedulable`` without filter being asked: the
hold for a waiting gang (verbs/holdfilter.py) would never be set for it, and the one-GPU pods
behind it would keep taking every GPU that frees. The pod watch keeps such pods here, in
kube-scheduler's queue order (priority, then age); the first of them that no GPU node can take
now holds the node where it starts soonest among those kube-scheduler would let it onto (its
node selector, required node affinity, and tolerations of the taints the node watch reports:
placement/nodeaffinity.py), renewed every ``RENEW_S`` while it waits (filter is not asked, so
nothing else renews it). The hold ends when its owner is bound (by any replica) or deleted.

A hold starts when the pods on a node are predicted to end: bind records that for the pods this
replica binds; ``record_predicted_end`` does it for the others (found at start-up, or bound by
another replica) from their ``sparse.io/predicted-seconds`` and the time they were bound.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import msgspec

from extender.annotations import ANN_GANG_SLOT, ANN_PREDICTED_SECONDS
from extender.demand import predicted_seconds
from extender.errors import InvalidDemand
from extender.placement.holds import MIN_GANG, Hold
from extender.placement.nodeaffinity import node_taints, pod_allows_node
from extender.protocol import Pod, epoch_seconds
from extender.quantity import parse_int_quantity
from extender.service import Scheduler
from extender.verbs.holdfilter import HOLD_TTL_S, Allows, hold_unscheduled

log = logging.getLogger("sparse.kube.gangs")

RENEW_S = HOLD_TTL_S / 10  # well within the hold's lapse
GPU = "nvidia.com/gpu"

Note = Callable[[dict[str, Any], str], None]  # (pod, message): a Normal event on the pod


def whole_gpus(pod: dict[str, Any]) -> int:
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        value = (res.get("limits") or {}).get(GPU, (res.get("requests") or {}).get(GPU))
        if value is not None:
            try:
                total += parse_int_quantity(str(value), GPU)
            except InvalidDemand:
                return 0
    return total


def unschedulable_gang(pod: dict[str, Any]) -> bool:
    """Pending, unbound, not being deleted, refused by kube-scheduler (``PodScheduled``
    False, ``Unschedulable``) and asking at least ``MIN_GANG`` whole GPUs. Not a job
    controller's worker: its gang already holds a slot (or asked for a hold when it did not)."""
    meta, spec, status = (pod.get(k) or {} for k in ("metadata", "spec", "status"))
    if spec.get("nodeName") or meta.get("deletionTimestamp") or status.get("phase") not in (
            None, "Pending") or ANN_GANG_SLOT in (meta.get("annotations") or {}):
        return False
    refused = any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                  and c.get("reason") == "Unschedulable" for c in status.get("conditions") or [])
    return refused and whole_gpus(pod) >= MIN_GANG


def queue_key(pod: dict[str, Any]) -> tuple[int, str]:
    """kube-scheduler's queue order: higher priority first, then older."""
    return (-int((pod.get("spec") or {}).get("priority") or 0),
            (pod.get("metadata") or {}).get("creationTimestamp") or "")


def bound_at(pod: dict[str, Any]) -> float | None:
    """When the pod was bound (its ``PodScheduled`` condition turned true), in epoch s."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "True":
            return epoch_seconds(c.get("lastTransitionTime"))
    return None


def record_predicted_end(scheduler: Scheduler, pod: dict[str, Any]) -> None:
    """A bound pod this replica did not bind: its predicted end, for holds (none recorded: it
    never ends)."""
    meta = pod.get("metadata") or {}
    value = (meta.get("annotations") or {}).get(ANN_PREDICTED_SECONDS)
    start = bound_at(pod) if value is not None else None
    if start is None:
        return
    try:
        scheduler.holds.started(meta.get("uid", ""), start, predicted_seconds(value))
    except InvalidDemand:
        return


class PendingGangs:
    """The waiting gangs the pod watch saw, and the hold of the first (module doc)."""

    def __init__(self, scheduler: Scheduler, note: Note | None = None) -> None:
        self.scheduler = scheduler
        self._note = note
        self._pods: dict[str, dict[str, Any]] = {}  # uid -> the pod as last seen
        self._taints: dict[str, tuple[dict[str, Any], ...]] = {}  # node -> its filtering taints

    def node_seen(self, kind: str, node: dict[str, Any]) -> None:
        """A watch event about ``node``: its taints (and cordon) for the pods' tolerations."""
        name = (node.get("metadata") or {}).get("name", "")
        taints = node_taints(node)
        if kind == "DELETED" or not taints:
            self._taints.pop(name, None)
        else:
            self._taints[name] = taints

    def nodes_resynced(self, nodes: list[dict[str, Any]]) -> None:
        self._taints.clear()
        for node in nodes:
            self.node_seen("ADDED", node)

    def _allows(self, spec: dict[str, Any]) -> Allows:
        """Whether kube-scheduler would let the pod with ``spec`` onto a node (resources
        aside); a node the watch has not seen (a file inventory's) has no taints."""
        return lambda name, labels: pod_allows_node(spec, name, labels,
                                                    self._taints.get(name, ()))

    async def resync(self, pods: list[dict[str, Any]]) -> None:
        live = {(p.get("metadata") or {}).get("uid", ""): p for p in pods
                if unschedulable_gang(p)}
        for uid in list(self._pods):
            if uid not in live:
                self.gone(uid)
        self._pods.update(live)
        await self.hold()

    async def seen(self, kind: str, pod: dict[str, Any]) -> None:
        """A watch event about ``pod``."""
        uid = (pod.get("metadata") or {}).get("uid", "")
        if kind != "DELETED" and unschedulable_gang(pod):
            self._pods[uid] = pod
            await self.hold()
        elif uid in self._pods or self._owns(uid):  # bound, deleted or no longer waiting
            self.gone(uid)
            await self.hold()  # the next waiting gang

    def gone(self, uid: str) -> None:
        self._pods.pop(uid, None)
        if self._owns(uid):
            self.scheduler.holds.clear()

    def _owns(self, uid: str) -> bool:
        h = self.scheduler.holds.hold
        return h is not None and h.owner == uid

    async def hold(self) -> Hold | None:
        """The first waiting gang (queue order) that no node can take now holds a node."""
        book = self.scheduler.holds
        book.lapse(self.scheduler.clock(), HOLD_TTL_S)
        before = book.hold
        if before is None:
            waiting = sorted(self._pods.values(), key=queue_key)
        elif before.owner in self._pods:  # renew it
            waiting = [self._pods[before.owner]]
        else:
            return None  # a pod filter refused, or a controller's gang, holds one
        for pod in waiting:
            try:
                hold = await hold_unscheduled(
                    self.scheduler, msgspec.convert(pod, Pod, strict=False),
                    self._allows(pod.get("spec") or {}))
            except (msgspec.ValidationError, InvalidDemand) as exc:
                log.debug("no hold for %s: %s", (pod.get("metadata") or {}).get("name"), exc)
                continue
            if hold is not None:
                if self._note is not None and (before is None or before.owner != hold.owner
                                               or before.name != hold.name):
                    wait = max(0.0, hold.start_s - self.scheduler.clock())
                    self._note(pod, f"node {hold.name} is held for this pod's {hold.gpus} GPUs"
                                    f" (predicted free in {wait:.0f} s); pods predicted to end"
                                    " later are kept off it")
                return hold
        return None

    async def run(self) -> None:
        """Forever: renew the hold of the waiting gang (kube-scheduler does not ask filter)."""
        while True:
            await asyncio.sleep(RENEW_S)
            try:
                await self.hold()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("renewing the hold of a waiting gang failed")
