"""Wires the Scheduler to a cluster: binder, watches, ledger rebuild, events."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import msgspec
from kubernetes_asyncio import client

from extender.annotations import LABEL_EMBEDDING_STORE
from extender.config import Settings
from extender.demand import host_requests
from extender.errors import InvalidDemand
from extender.inventory import Inventory
from extender.kube.assignment import pod_is_finished, reservation_from_pod
from extender.kube.binder import KubeBinder
from extender.kube.client import make_api_client
from extender.kube.events import EventRecorder
from extender.kube.pendinggangs import PendingGangs, record_predicted_end
from extender.kube.stores import StoreShards
from extender.kube.watching import Watcher
from extender.ledger.rules import STATE_BOUND, STATE_RESERVED
from extender.protocol import Pod
from extender.service import Scheduler

log = logging.getLogger("sparse.kube")


class KubeIntegration:
    def __init__(self, settings: Settings, scheduler: Scheduler) -> None:
        self.settings = settings
        self.scheduler = scheduler
        self._file_inventory = scheduler.inventory  # nodes from --nodes stay known
        self._tasks: list[asyncio.Task[None]] = []
        self.api: client.ApiClient | None = None
        self.events: EventRecorder | None = None
        self.gangs = PendingGangs(scheduler)  # waiting gangs kube-scheduler refused itself

    async def start(self) -> None:
        self.api = await make_api_client(self.settings.kubeconfig, self.settings.in_cluster)
        core = client.CoreV1Api(self.api)
        self.scheduler.binder = KubeBinder(self.api)
        self.events = EventRecorder(self.api, success_events=self.settings.success_events)
        self.scheduler.observers.append(self.events.observe)
        events = self.events
        self.gangs = PendingGangs(self.scheduler,
                                  lambda pod, message: events.note(pod, "NodeHeld", message))

        nodes = Watcher("nodes", core.list_node, self._resync_nodes, self._on_node)
        selector = {"field_selector": self.settings.pod_selector} if self.settings.pod_selector \
            else {}
        pods = Watcher("pods", core.list_pod_for_all_namespaces, self._resync_pods,
                       self._on_pod, **selector)
        shards = StoreShards(self.scheduler.locality)
        stores = Watcher("embedding-stores", core.list_pod_for_all_namespaces, shards.resync,
                         shards.on_event, label_selector=LABEL_EMBEDDING_STORE)
        # Inventory first (capacities), then the ledger rebuild; only then ready.
        node_rv = await nodes.relist()
        pod_rv = await pods.relist()
        store_rv = await stores.relist()
        self._tasks = [asyncio.create_task(nodes.run(node_rv)),
                       asyncio.create_task(pods.run(pod_rv)),
                       asyncio.create_task(stores.run(store_rv)),
                       asyncio.create_task(self.gangs.run())]

        async def reconcile() -> None:
            # After a Redis restart or failover the store may have lost bookings it had
            # acknowledged: bound pods' annotations are the truth, adopt them again.
            await pods.relist()

        self.scheduler.resync_hooks.append(reconcile)
        state = await self.scheduler.view()  # the rebuilt bookings reach the cached view
        log.info("kubernetes ready: %d GPU nodes, %d reservations",
                 len(self.scheduler.inventory.nodes), len(state.reservations))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.events is not None:
            await self.events.drain()
        if self.api is not None:
            await self.api.close()

    # --- nodes ------------------------------------------------------------------------------

    async def _resync_nodes(self, items: list[dict[str, Any]]) -> None:
        metas = [n.get("metadata") or {} for n in items]
        self.scheduler.update_nodes(
            ((m.get("name", ""), m.get("annotations"), m.get("labels")) for m in metas),
            base=self._file_inventory)
        hosts = self.scheduler.hosts
        for node, meta in zip(items, metas, strict=True):
            hosts.set_node(meta.get("name", ""), (node.get("status") or {}).get("allocatable"))
        hosts.retain_nodes({m.get("name", "") for m in metas})
        self.gangs.nodes_resynced(items)

    async def _on_node(self, kind: str, node: dict[str, Any]) -> None:
        meta = node.get("metadata") or {}
        name = meta.get("name", "")
        self.gangs.node_seen(kind, node)
        if kind == "DELETED":
            if name not in self._file_inventory.nodes:
                self.scheduler.remove_node(name)
            self.scheduler.hosts.forget_node(name)
            return
        self.scheduler.update_node(name, meta.get("annotations"), meta.get("labels"))
        self.scheduler.hosts.set_node(name, (node.get("status") or {}).get("allocatable"))

    # --- pods -------------------------------------------------------------------------------

    async def _resync_pods(self, items: list[dict[str, Any]]) -> None:
        """Make the ledger agree with the API server (the source of truth)."""
        live: set[str] = set()
        for pod in items:
            uid = (pod.get("metadata") or {}).get("uid", "")
            if pod_is_finished(pod):
                await self.scheduler.release(uid)
                continue
            live.add(uid)
            self._count_host(pod)
            await self._adopt(pod)
            if (pod.get("spec") or {}).get("nodeName"):
                record_predicted_end(self.scheduler, pod)  # ends known before a restart
        self.scheduler.hosts.retain_pods(live)
        await self.gangs.resync(items)
        _, reservations = await self.scheduler.ledger.snapshot()
        for uid, r in reservations.items():
            # Reserved-but-unbound ones belong to binds in flight (maybe on another replica):
            # expiry handles those. Bound ones whose pod is gone were missed deletions.
            if r.state == STATE_BOUND and uid not in live:
                log.info("releasing %s/%s: pod no longer exists", r.namespace, r.name)
                await self.scheduler.release(uid)

    def _count_host(self, pod: dict[str, Any]) -> None:
        """A pod bound to a node takes its CPU and memory requests there (HostBook)."""
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            return
        try:
            cpu, mem = host_requests(msgspec.convert(pod, Pod, strict=False))
        except (msgspec.ValidationError, InvalidDemand) as exc:
            log.warning("pod %s: requests not counted on %s: %s",
                        (pod.get("metadata") or {}).get("name"), node, exc)
            return
        self.scheduler.hosts.bind((pod.get("metadata") or {}).get("uid", ""), node, cpu, mem)

    async def _adopt(self, pod: dict[str, Any]) -> None:
        if not (pod.get("spec") or {}).get("nodeName"):
            return  # annotated but never bound: a failed bind, nothing is held
        reservation = reservation_from_pod(pod)
        if reservation is None:
            return
        known = self.scheduler.state.reservations.get(reservation.pod_uid)
        if known is not None and known.state == STATE_BOUND and known.node == reservation.node:
            return  # the common case (our own bind, seen by the watch): no store read
        existing = await self.scheduler.ledger.get(reservation.pod_uid)
        if existing is None:
            await self.scheduler.adopt(reservation)
            record_predicted_end(self.scheduler, pod)  # bound by another replica
        elif existing.state == STATE_RESERVED:
            await self.scheduler.confirm(reservation.pod_uid)

    async def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        uid = (pod.get("metadata") or {}).get("uid", "")
        await self.gangs.seen(kind, pod)
        if kind == "DELETED" or pod_is_finished(pod):
            self.scheduler.hosts.release(uid)
            if await self.scheduler.release(uid) is not None:
                log.info("released GPUs of %s/%s", pod["metadata"].get("namespace"),
                         pod["metadata"].get("name"))
            return
        self._count_host(pod)
        await self._adopt(pod)


__all__ = ["Inventory", "KubeIntegration"]
