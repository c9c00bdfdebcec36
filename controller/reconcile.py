"""One pass over one RecommendDLJob: predict, admit (gang), create pods, follow them.

Idempotent and level-based: every pass reads the job and its pods and moves them one step
towards the spec, so a restarted controller (or a second replica taking over) continues where
the last one stopped. Admission order: the slots are booked (one atomic call to the extender)
and written to the job's status *before* the pods are created; a controller killed in between
finds them again (the extender answers a repeated reservation with the same slots) or, if it
never comes back, the extender expires them after ``slot_ttl_s``: nothing stays half-held.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from controller import status as st
from controller.admission import admit
from controller.context import Config, GangApi, KubeApi, PassContext, job_key, release_slots
from controller.demand import record_demand, record_queue_band
from controller.following import follow
from controller.lifecycle import after_finish, fail
from controller.pods import LABEL_ATTEMPT
from controller.queue import Load, Waiting

__all__ = ["Config", "GangApi", "KubeApi", "Reconciler", "load_entry", "waiting_entry"]

log = logging.getLogger("sparse.controller")


def _attempt(pod: dict[str, Any]) -> int:
    try:
        return int((pod["metadata"].get("labels") or {}).get(LABEL_ATTEMPT, -1))
    except (TypeError, ValueError):
        return -1


def waiting_entry(job: dict[str, Any]) -> Waiting | None:
    """The job's place in the admission queue; None when it is not waiting."""
    status = job.get("status") or {}
    if status.get("phase") not in (None, st.PENDING):
        return None
    created = st.parse_iso(job["metadata"].get("creationTimestamp")) or 0.0
    band = status.get("queueBand") or {}
    return Waiting(key=job_key(job), created=created,
                   waiting_since=st.parse_iso(status.get("waitingSince")),
                   ever_fits=status.get("everFits", True) is not False,
                   priority=int(band.get("priority") or 0),
                   band_priority=(None if band.get("bandPriority") is None
                                  else int(band["bandPriority"])))


def load_entry(job: dict[str, Any]) -> Load | None:
    """What the latest-start rule knows of the job (controller/queue.py ``Load``): its
    submission, predicted run time and error margins (status.queueBand), the GPUs its
    workers book (status.demand) and its start; None before its band is recorded."""
    status = job.get("status") or {}
    band = status.get("queueBand") or {}
    if not band:
        return None
    demand = status.get("demand") or {}
    per_worker = int(demand.get("wholeGpus") or 0) or int(demand.get("gpuMilli") or 0) / 1000
    predicted = band.get("predictedSeconds")
    return Load(key=job_key(job),
                created=st.parse_iso(job["metadata"].get("creationTimestamp")) or 0.0,
                predicted_s=None if predicted is None else float(predicted),
                margin=float(band.get("errorBound") or 1.0),
                median=float(band.get("medianError") or 1.0),
                gpus=per_worker * int(status.get("replicas") or 1) or 1.0,
                started=(None if status.get("phase") in (None, st.PENDING)  # a restart waits
                         else st.parse_iso(status.get("admittedAt") or status.get("startTime"))),
                finished=status.get("phase") in st.FINISHED,
                due=bool(band.get("dueSince")),
                gang=band.get("bandPriority") is not None)


class Reconciler:
    def __init__(self, kube: KubeApi, gangs: GangApi, config: Config | None = None, *,
                 waiting: Callable[[], Iterable[Waiting]] = lambda: (),
                 clock: Callable[[], float] = time.time,
                 due: Callable[[float], Mapping[str, float]] = lambda now: {},
                 gangs_first: Callable[[float], bool] = lambda now: True) -> None:
        self.kube = kube
        self.gangs_first = gangs_first
        self.gangs = gangs
        self.config = config or Config()
        self.waiting = waiting
        self.due = due
        self.clock = clock
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    # --- entry points ---------------------------------------------------------------------

    async def reconcile(self, job: dict[str, Any]) -> None:
        meta = job["metadata"]
        async with self._locks[meta["uid"]]:
            # Re-read under the lock: the copy handed in may predate the last pass's writes,
            # and the status patch is computed against what is stored.
            fresh = await self.kube.get_job(meta.get("namespace") or "default", meta["name"])
            if fresh is None or fresh["metadata"].get("uid") != meta["uid"]:
                return
            if fresh["metadata"].get("deletionTimestamp"):
                return  # cleanup() runs from the finalizer
            ctx = PassContext(self.kube, self.gangs, self.config, self.waiting, fresh,
                              self.clock(), self.due, self.gangs_first)
            try:
                await _step(ctx)
            finally:
                await ctx.write()

    async def cleanup(self, job: dict[str, Any]) -> None:
        """The job is being deleted: free every slot and delete every pod."""
        meta = job["metadata"]
        async with self._locks[meta["uid"]]:
            pods = await self.kube.list_pods(meta["namespace"], meta["uid"])
            for p in pods:
                await self.kube.delete_pod(meta["namespace"], p["metadata"]["name"])
            released = await self.release(meta["uid"])
            log.info("job %s deleted: %d pods deleted, %d slots released", job_key(job),
                     len(pods), len(released))
        self._locks.pop(meta["uid"], None)

    async def release(self, job_uid: str, attempt: int | None = None) -> list[str]:
        """Release slots; an unreachable extender does not block (they expire on their own)."""
        return await release_slots(self.gangs, job_uid, attempt)


async def _step(ctx: PassContext) -> None:
    """The pass's flow: finished jobs wait for their TTL; otherwise demand and band are
    recorded, pods of earlier attempts deleted, the deadline checked, then the job is admitted
    (no pods of this attempt yet) or its pods followed."""
    s = ctx.status
    if s.get("phase") in st.FINISHED:
        await after_finish(ctx)
        return
    demand = record_demand(ctx)
    if demand is None:
        return
    record_queue_band(ctx, demand)
    s.setdefault("phase", st.PENDING)
    s.setdefault("attempt", 0)
    s.setdefault("restarts", 0)
    s["replicas"] = ctx.replicas
    attempt = int(s["attempt"])
    pods = await ctx.kube.list_pods(ctx.ns, ctx.meta["uid"])
    for p in pods:  # pods of an earlier attempt: the restart deletes them
        if _attempt(p) != attempt and not p["metadata"].get("deletionTimestamp"):
            await ctx.kube.delete_pod(ctx.ns, p["metadata"]["name"])
    current = [p for p in pods if _attempt(p) == attempt]
    deadline = (ctx.spec.get("runPolicy") or {}).get("activeDeadlineSeconds")
    started = st.parse_iso(s.get("startTime"))
    if deadline and started is not None and ctx.now - started > float(deadline):
        await fail(ctx, "DeadlineExceeded",
                   f"the job ran longer than activeDeadlineSeconds={deadline}", current)
        return
    if not current:
        await admit(ctx, demand, attempt)
        return
    await follow(ctx, demand, attempt, current)
