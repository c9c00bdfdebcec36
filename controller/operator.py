"""kopf wiring: which events reach the reconciler, peering, finalizer, login.

* RecommendDLJob created / resumed, and a timer every ``interval_s`` per job: reconcile (the
  timer retries admission of waiting jobs and enforces deadlines and TTLs).
* A worker pod changed: reconcile its job at once (status in step with the pods).
* Deleted: the finalizer runs ``cleanup`` (slots released, pods deleted) before the job goes.
* An index of waiting jobs gives the admission queue (controller/queue.py) without API calls.
* Peering: with a peering name, only the replica of highest priority handles jobs; the others
  stand by. Replicas must not share a priority (kopf freezes them all).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kopf

from controller.gangs import GangClient
from controller.kube import Kube
from controller.pods import GROUP, KIND, LABEL_JOB_UID, PLURAL, VERSION
from controller.queue import Load, Waiting, due_slack, gang_share
from controller.reconcile import Config, Reconciler, load_entry, waiting_entry

log = logging.getLogger("sparse.controller")

FINALIZER = "sparse.io/job-controller"


@dataclass
class Options:
    extender_url: str
    kubeconfig: Path | None = None
    config: Config = field(default_factory=Config)
    interval_s: float = 5.0
    pod_delete_grace_s: int | None = None
    peering: str | None = None
    extender_ca: str | None = None
    namespaces: tuple[str, ...] = ()


class Holder:
    """What the handlers share: the reconciler (made at start-up) and the waiting index."""

    def __init__(self) -> None:
        self.reconciler: Reconciler | None = None
        self.kube: Kube | None = None
        self.gangs: GangClient | None = None
        self.index: Any = None
        self.loads: Any = None  # every job's Load (latest-start)
        self.gpus: Any = None  # every node's allocatable GPUs (latest-start)

    def waiting(self) -> list[Waiting]:
        if self.index is None:
            return []
        return [w for store in self.index.values() for w in store]

    def due(self, now: float) -> dict[str, float]:
        """The waiting jobs whose latest start has come (queue order ``latest-start``)."""
        if self.loads is None or self.gpus is None:
            return {}
        gpus = sum(g for store in self.gpus.values() for g in store)
        return due_slack([x for store in self.loads.values() for x in store], now, gpus)

    def gangs_first(self, now: float) -> bool:
        """Whether the long gangs go ahead of every band (latest-start: while below their
        share of the GPUs; otherwise always)."""
        if self.loads is None or self.gpus is None:
            return True
        gpus = sum(g for store in self.gpus.values() for g in store)
        return gang_share([x for store in self.loads.values() for x in store], now, gpus)


def make_settings() -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    settings.persistence.finalizer = FINALIZER
    settings.posting.level = logging.WARNING  # our own events say what happened
    settings.watching.server_timeout = 120
    settings.watching.client_timeout = 150
    return settings


# kopf retries a failed handler after 60 s by default: a deletion whose pod delete hit one slow
# API call would then hold its finalizer (and `kubectl delete --wait`) for a minute.
HANDLER_BACKOFF_S = 2.0


def make_registry(options: Options, holder: Holder) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    res = dict(group=GROUP, version=VERSION, plural=PLURAL, registry=registry)

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> Any:
        if options.kubeconfig is not None:
            import os
            os.environ["KUBECONFIG"] = str(options.kubeconfig)
            return kopf.login_with_kubeconfig(**kwargs)
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.startup(registry=registry)
    async def startup(**_: Any) -> None:
        from extender.kube.client import make_api_client

        api = await make_api_client(options.kubeconfig, options.kubeconfig is None)
        holder.kube = Kube(api, options.pod_delete_grace_s)
        if options.peering:  # kopf needs the object; the replicas share it
            await holder.kube.ensure_peering(options.peering, cluster_wide=not options.namespaces,
                                             namespaces=options.namespaces)
        holder.gangs = GangClient(options.extender_url, ca_file=options.extender_ca)
        holder.reconciler = Reconciler(holder.kube, holder.gangs, options.config,
                                       waiting=holder.waiting, due=holder.due,
                                       gangs_first=holder.gangs_first)
        log.info("job controller started (extender %s)", options.extender_url)

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        if holder.gangs is not None:
            await holder.gangs.close()
        if holder.kube is not None:
            await holder.kube.api.close()

    @kopf.index(**res, id="waiting_jobs")
    def waiting_jobs(body: kopf.Body, **_: Any) -> dict[str, Waiting] | None:
        entry = waiting_entry({"metadata": dict(body.metadata), "status": dict(body.status)})
        return None if entry is None else {entry.key: entry}

    bands = options.config.bands
    if bands is not None and bands.order == "latest-start":
        # the latest-start rule's view: every job's load and the cluster's GPUs
        @kopf.index(**res, id="queue_loads")
        def queue_loads(body: kopf.Body, **_: Any) -> dict[str, Load] | None:
            entry = load_entry({"metadata": dict(body.metadata), "status": dict(body.status)})
            return None if entry is None else {entry.key: entry}

        @kopf.index("", "v1", "nodes", registry=registry, id="node_gpus")
        def node_gpus(body: kopf.Body, **_: Any) -> dict[str, float]:
            return {body.metadata.name: node_gpu_count(dict(body.status))}

    def keep(waiting_jobs: kopf.Index[str, Waiting], indexes: dict[str, Any]) -> None:
        """The indexes kopf hands each handler, for the queue's next decisions."""
        holder.index = waiting_jobs
        holder.loads = indexes.get("queue_loads", holder.loads)
        holder.gpus = indexes.get("node_gpus", holder.gpus)

    async def reconcile(body: kopf.Body, waiting_jobs: kopf.Index[str, Waiting],
                        indexes: dict[str, Any]) -> None:
        keep(waiting_jobs, indexes)
        assert holder.reconciler is not None
        await holder.reconciler.reconcile(_plain(body))

    @kopf.on.resume(**res, backoff=HANDLER_BACKOFF_S)
    @kopf.on.create(**res, backoff=HANDLER_BACKOFF_S)
    async def on_job(body: kopf.Body, waiting_jobs: kopf.Index[str, Waiting], **kw: Any) -> None:
        await reconcile(body, waiting_jobs, kw)

    @kopf.timer(**res, interval=options.interval_s, initial_delay=options.interval_s)
    async def tick(body: kopf.Body, waiting_jobs: kopf.Index[str, Waiting], **kw: Any) -> None:
        await reconcile(body, waiting_jobs, kw)

    @kopf.on.event("", "v1", "pods", labels={LABEL_JOB_UID: kopf.PRESENT}, registry=registry)
    async def on_pod(body: kopf.Body, waiting_jobs: kopf.Index[str, Waiting], **kw: Any) -> None:
        owner = next((o for o in body.metadata.get("ownerReferences") or []
                      if o.get("kind") == KIND), None)
        if owner is None or holder.reconciler is None:
            return
        keep(waiting_jobs, kw)
        # The reconciler reads the job itself (fresh, under its lock).
        await holder.reconciler.reconcile({"metadata": {
            "name": owner["name"], "namespace": body.metadata.namespace, "uid": owner["uid"]}})

    @kopf.on.delete(**res, backoff=HANDLER_BACKOFF_S)
    async def on_delete(body: kopf.Body, **_: Any) -> None:
        assert holder.reconciler is not None
        await holder.reconciler.cleanup(_plain(body))

    return registry


def node_gpu_count(status: dict[str, Any]) -> float:
    """A node's allocatable ``nvidia.com/gpu`` (0 when it has none or the value is bad)."""
    value = (status.get("allocatable") or {}).get("nvidia.com/gpu", 0)
    try:
        return max(float(value), 0.0)
    except (TypeError, ValueError):
        return 0.0


def _plain(body: kopf.Body) -> dict[str, Any]:
    return {"metadata": dict(body.metadata), "spec": dict(body.spec),
            "status": dict(body.status)}


def run(options: Options, *, priority: int = 0, liveness: str | None = None) -> None:
    holder = Holder()
    kopf.run(
        registry=make_registry(options, holder),
        settings=make_settings(),
        clusterwide=not options.namespaces,
        namespaces=options.namespaces,
        standalone=options.peering is None,
        peering_name=options.peering,
        priority=priority,
        liveness_endpoint=liveness,
    )
