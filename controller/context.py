"""What one reconcile pass works with: the two APIs, the configuration, and the job's status
and events being built (the pass's steps in ``admission``, ``following``, ``lifecycle`` and
``demand`` change them; ``write`` sends them). Pure: the APIs come in as protocols."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from controller import status as st
from controller.errors import GangError
from controller.queue import Waiting
from extender.queueorder import DurationBands

log = logging.getLogger("sparse.controller")


class KubeApi(Protocol):
    async def get_job(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    async def list_pods(self, namespace: str, job_uid: str) -> list[dict[str, Any]]: ...
    async def create_pod(self, body: dict[str, Any]) -> bool: ...
    async def delete_pod(self, namespace: str, name: str) -> None: ...
    async def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None: ...
    async def delete_job(self, namespace: str, name: str) -> None: ...
    async def event(self, job: dict[str, Any], kind: str, reason: str, message: str) -> None: ...


class GangApi(Protocol):
    async def reserve(self, request: dict[str, Any]) -> dict[str, Any]: ...
    async def release(self, job_uid: str, attempt: int | None = None) -> list[str]: ...


@dataclass(frozen=True)
class Config:
    scheduler_name: str = "sparse-scheduler"
    slot_ttl_s: float = 120.0  # a gang's slots expire unbound after this; also its bind timeout
    max_pass_over_s: float = 300.0  # backfill bound (controller/queue.py)
    bands: DurationBands | None = None  # queue bands by predicted duration; None: FIFO


def job_key(job: dict[str, Any]) -> str:
    return f"{job['metadata'].get('namespace', 'default')}/{job['metadata']['name']}"


async def release_slots(gangs: GangApi, job_uid: str, attempt: int | None = None) -> list[str]:
    """Release slots; an unreachable extender does not block (they expire on their own)."""
    try:
        return await gangs.release(job_uid, attempt)
    except GangError as exc:
        log.warning("slots of job %s not released (they expire after the slot TTL): %s",
                    job_uid, exc)
        return []


class PassContext:
    """The state of one reconcile pass: the job, the status being built, events to post."""

    def __init__(self, kube: KubeApi, gangs: GangApi, config: Config,
                 waiting: Callable[[], Iterable[Waiting]], job: dict[str, Any],
                 now: float,
                 due: Callable[[float], Mapping[str, float]] = lambda now: {},
                 gangs_first: Callable[[float], bool] = lambda now: True) -> None:
        self.kube, self.gangs, self.config, self.waiting = kube, gangs, config, waiting
        self.due = due  # the waiting jobs whose latest start has come (queue.due_slack)
        self.gangs_first = gangs_first  # whether the long gangs go first (queue.gang_share)
        self.job = job
        self.meta, self.spec = job["metadata"], job["spec"]
        self.ns = self.meta.get("namespace") or "default"
        self.before = copy.deepcopy(job.get("status") or {})
        self.status: dict[str, Any] = copy.deepcopy(self.before)
        self.now = now
        self.replicas = int(self.spec.get("replicas") or 1)
        self.events: list[tuple[str, str, str]] = []

    async def release(self, attempt: int | None = None) -> list[str]:
        return await release_slots(self.gangs, self.meta["uid"], attempt)

    def priority_class(self) -> str | None:
        """The workers' PriorityClass: the job's queue band, when bands are on."""
        if self.config.bands is None:
            return None
        return (self.status.get("queueBand") or {}).get("name")

    def predicted_seconds(self) -> float | None:
        """The job's predicted run time, for the extender's holds (set only when banded)."""
        return (self.status.get("queueBand") or {}).get("predictedSeconds")

    def counts(self, w: st.Workers) -> None:
        self.status["readyReplicas"] = w.running
        self.status["ready"] = f"{w.running}/{self.replicas}"
        self.status["gpuCount"] = w.gpus

    async def write(self) -> None:
        """Patch the status keys that changed since the last write, then post the events."""
        changed = {k: v for k, v in self.status.items() if self.before.get(k) != v}
        if changed:
            await self.kube.patch_status(self.ns, self.meta["name"], changed)
            self.before = copy.deepcopy(self.status)
            self.before = {k: v for k, v in self.before.items() if v is not None}
            self.status = {k: v for k, v in self.status.items() if v is not None}
        events, self.events = self.events, []
        for kind, reason, message in events:
            await self.kube.event(self.job, kind, reason, message)
