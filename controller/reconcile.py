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
import copy
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from controller import status as st
from controller.errors import GangError, PodCreateError
from controller.pods import LABEL_ATTEMPT, whole_gpus, worker_pod, worker_prefix
from controller.prediction import Demand, InvalidModel, predict
from controller.queue import Waiting, may_try
from extender.queueorder import DurationBands, predicted_duration

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


def _attempt(pod: dict[str, Any]) -> int:
    try:
        return int((pod["metadata"].get("labels") or {}).get(LABEL_ATTEMPT, -1))
    except (TypeError, ValueError):
        return -1


def _job_key(job: dict[str, Any]) -> str:
    return f"{job['metadata'].get('namespace', 'default')}/{job['metadata']['name']}"


def waiting_entry(job: dict[str, Any]) -> Waiting | None:
    """The job's place in the admission queue; None when it is not waiting."""
    status = job.get("status") or {}
    if status.get("phase") not in (None, st.PENDING):
        return None
    created = st.parse_iso(job["metadata"].get("creationTimestamp")) or 0.0
    band = status.get("queueBand") or {}
    return Waiting(key=_job_key(job), created=created,
                   waiting_since=st.parse_iso(status.get("waitingSince")),
                   ever_fits=status.get("everFits", True) is not False,
                   priority=int(band.get("priority") or 0))


class Reconciler:
    def __init__(self, kube: KubeApi, gangs: GangApi, config: Config | None = None, *,
                 waiting: Callable[[], Iterable[Waiting]] = lambda: (),
                 clock: Callable[[], float] = time.time) -> None:
        self.kube = kube
        self.gangs = gangs
        self.config = config or Config()
        self.waiting = waiting
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
            await _Pass(self, fresh).run()

    async def cleanup(self, job: dict[str, Any]) -> None:
        """The job is being deleted: free every slot and delete every pod."""
        meta = job["metadata"]
        async with self._locks[meta["uid"]]:
            pods = await self.kube.list_pods(meta["namespace"], meta["uid"])
            for p in pods:
                await self.kube.delete_pod(meta["namespace"], p["metadata"]["name"])
            released = await self.release(meta["uid"])
            log.info("job %s deleted: %d pods deleted, %d slots released", _job_key(job),
                     len(pods), len(released))
        self._locks.pop(meta["uid"], None)

    async def release(self, job_uid: str, attempt: int | None = None) -> list[str]:
        """Release slots; an unreachable extender does not block (they expire on their own)."""
        try:
            return await self.gangs.release(job_uid, attempt)
        except GangError as exc:
            log.warning("slots of job %s not released (they expire after the slot TTL): %s",
                        job_uid, exc)
            return []


class _Pass:
    """The state of one reconcile pass: the job, the status being built, events to post."""

    def __init__(self, r: Reconciler, job: dict[str, Any]) -> None:
        self.r = r
        self.job = job
        self.meta, self.spec = job["metadata"], job["spec"]
        self.ns = self.meta.get("namespace") or "default"
        self.before = copy.deepcopy(job.get("status") or {})
        self.status: dict[str, Any] = copy.deepcopy(self.before)
        self.now = r.clock()
        self.replicas = int(self.spec.get("replicas") or 1)
        self.events: list[tuple[str, str, str]] = []

    # --- the pass -------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            await self._step()
        finally:
            await self._write()

    async def _step(self) -> None:
        s = self.status
        if s.get("phase") in st.FINISHED:
            await self._after_finish()
            return
        demand = self._demand()
        if demand is None:
            return
        self._queue_band(demand)
        s.setdefault("phase", st.PENDING)
        s.setdefault("attempt", 0)
        s.setdefault("restarts", 0)
        s["replicas"] = self.replicas
        attempt = int(s["attempt"])
        pods = await self.r.kube.list_pods(self.ns, self.meta["uid"])
        for p in pods:  # pods of an earlier attempt: the restart deletes them
            if _attempt(p) != attempt and not p["metadata"].get("deletionTimestamp"):
                await self.r.kube.delete_pod(self.ns, p["metadata"]["name"])
        current = [p for p in pods if _attempt(p) == attempt]
        deadline = (self.spec.get("runPolicy") or {}).get("activeDeadlineSeconds")
        started = st.parse_iso(s.get("startTime"))
        if deadline and started is not None and self.now - started > float(deadline):
            await self._fail("DeadlineExceeded",
                             f"the job ran longer than activeDeadlineSeconds={deadline}", current)
            return
        if not current:
            await self._admit(demand, attempt)
            return
        await self._follow(demand, attempt, current)

    # --- prediction -----------------------------------------------------------------------

    def _demand(self) -> Demand | None:
        s = self.status
        d = s.get("demand")
        if d and d.get("modelVersion"):
            return Demand(int(d["gpuMemMiB"]), int(d["gpuMilli"]), d.get("jobClass", "unknown"),
                          d["modelVersion"], float(d.get("stepSeconds") or 0.0))
        try:
            demand = predict(self.spec)
            whole = whole_gpus(self.spec.get("template") or {})
        except (InvalidModel, ValueError) as exc:
            s["conditions"] = st.set_condition(s.get("conditions"), "Predicted", False,
                                               "InvalidModel", str(exc), self.now)
            self._finish(st.FAILED, "InvalidModel", f"cannot predict the demand: {exc}")
            return None
        s["demand"] = demand.as_status(whole)
        what = (f"{whole} whole GPU(s)" if whole else
                f"{demand.gpu_mem_mib} MiB and {demand.gpu_milli} milli of one GPU")
        message = (f"each of {self.replicas} workers needs {what} (class {demand.job_class},"
                   f" model {demand.model_version})")
        s["conditions"] = st.set_condition(s.get("conditions"), "Predicted", True, "Predicted",
                                           message, self.now)
        self.events.append(("Normal", "Predicted", message))
        return demand

    def _queue_band(self, demand: Demand) -> None:
        """Once per job: its band from the declared ``spec.steps`` x the predicted step time
        (the default band when either is missing or bad), kept in the status and posted."""
        bands, s = self.r.config.bands, self.status
        if bands is None or s.get("queueBand"):
            return
        steps = self.spec.get("steps")
        bad = ""
        try:
            seconds = predicted_duration(steps, demand.step_s or None)
        except ValueError as exc:
            seconds, bad = None, str(exc)
        band = bands.band(seconds)
        # whole GPUs the job needs at once: a long gang goes ahead of every band
        gang = (int((s.get("demand") or {}).get("wholeGpus") or 0) * self.replicas
                if seconds is not None else 0)
        name, priority = bands.queue_class(band, gang)
        entry: dict[str, Any] = {"name": name, "band": band, "priority": priority}
        if seconds is not None:
            entry["predictedSeconds"] = round(seconds)
            why = (f"predicted {seconds / 3600:.2f} h = {steps} steps x"
                   f" {demand.step_s:.3g} s per step")
            if bands.is_critical_gang(band, gang):
                why += f"; a gang of {gang} whole GPUs in a critical band goes first"
        elif bad:
            why = f"default band: {bad}"
        elif steps is None:
            why = "default band: the job declares no spec.steps"
        else:
            why = "default band: no predicted step time"
        s["queueBand"] = entry
        self.events.append(("Warning" if bad else "Normal", "QueueBand",
                            f"queue band {entry['name']} ({bands.describe(band)}, priority"
                            f" {entry['priority']}, {bands.order}): {why}"))

    def _priority_class(self) -> str | None:
        if self.r.config.bands is None:
            return None
        return (self.status.get("queueBand") or {}).get("name")

    # --- admission ------------------------------------------------------------------------

    async def _admit(self, demand: Demand, attempt: int) -> None:
        s = self.status
        key = _job_key(self.job)
        allowed, why = may_try(key, self.r.waiting(), self.now, self.r.config.max_pass_over_s)
        if not allowed and s.get("phase") != st.ADMITTED:  # admitted: finish what was started
            self._not_admitted("Queued", why)
            return
        worker = worker_pod(self.job, demand, attempt=attempt, index=0, slot="",
                            scheduler_name=self.r.config.scheduler_name,
                            priority_class=self._priority_class(),
                            predicted_s=(s.get("queueBand") or {}).get("predictedSeconds"))
        request = {
            "job": self.meta["uid"], "namespace": self.ns,
            "name": worker_prefix(self.meta["name"], attempt), "replicas": self.replicas,
            "attempt": attempt, "ttlSeconds": self.r.config.slot_ttl_s,
            "pod": {"metadata": {"annotations": worker["metadata"]["annotations"],
                                 "labels": worker["metadata"]["labels"]},
                    "spec": {"containers": worker["spec"]["containers"]}},
        }
        try:
            answer = await self.r.gangs.reserve(request)
        except GangError as exc:
            self._not_admitted("ExtenderUnavailable", str(exc))
            return
        if not answer.get("admitted"):
            ever = bool(answer.get("everFits", True))
            s["everFits"] = ever
            s.setdefault("waitingSince", st.now_iso(self.now))
            reason = "InsufficientGPU" if ever else "Unschedulable"
            message = answer.get("reason") or "the workers do not fit"
            if not ever:
                message = f"never fits the current nodes: {message}"
            self._not_admitted(reason, message)
            return
        slots = sorted(answer["slots"], key=lambda x: x["index"])
        # The very slots recorded before (a repeated reservation answers with their deadline);
        # slots booked anew after an expiry have the same names but a new deadline.
        again = (s.get("phase") == st.ADMITTED and answer.get("expiresAt") is not None
                 and answer.get("expiresAt") == s.get("slotsExpireAt"))
        s["placement"] = [{"index": x["index"], "pod": f"{request['name']}-{x['index']}",
                           "slot": x["slot"], "node": x["node"], "gpus": x["gpus"],
                           "phase": "Pending"} for x in slots]
        s["slotsExpireAt"] = answer.get("expiresAt")
        if not again:
            s["admittedAt"] = st.now_iso(self.now)
        s.setdefault("startTime", st.now_iso(self.now))
        s["waitingSince"] = None
        s["everFits"] = None
        nodes = sorted({x["node"] for x in slots})
        message = f"{len(slots)} workers reserved on {', '.join(nodes)}"
        s["conditions"] = st.set_condition(s.get("conditions"), "Admitted", True, "GangReserved",
                                           message, self.now)
        s["phase"] = st.ADMITTED
        self._counts(st.Workers(0, 0, 0, 0, [], s["placement"],
                                len({g for x in slots for g in x["gpus"]})))
        if not again:
            s["message"] = message
            self.events.append(("Normal", "Admitted", message))
        await self._write()  # the slots are on record before any pod exists
        await self._create_missing(demand, attempt, set())

    def _not_admitted(self, reason: str, message: str) -> None:
        s = self.status
        previous = st.condition(s.get("conditions"), "Admitted") or {}
        s["conditions"] = st.set_condition(s.get("conditions"), "Admitted", False, reason,
                                           message, self.now)
        s["phase"] = st.PENDING
        s["message"] = message
        s["placement"] = []
        self._counts(st.Workers(0, 0, 0, 0, [], [], 0))
        if (previous.get("reason"), previous.get("message")) != (reason, message):
            self.events.append(("Warning" if reason != "Queued" else "Normal", "NotAdmitted",
                                f"{reason}: {message}"))

    async def _create_missing(self, demand: Demand, attempt: int, present: set[int]) -> None:
        for slot in self.status.get("placement") or []:
            if slot["index"] in present:
                continue
            body = worker_pod(self.job, demand, attempt=attempt, index=slot["index"],
                              slot=slot["slot"], scheduler_name=self.r.config.scheduler_name,
                              priority_class=self._priority_class(),
                              predicted_s=(self.status.get("queueBand") or {}).get(
                                  "predictedSeconds"))
            try:
                await self.r.kube.create_pod(body)
            except PodCreateError as exc:  # retried next pass; the slots expire meanwhile
                message = f"creating pod {body['metadata']['name']} failed: {exc}"
                if self.status.get("message") != message:
                    self.events.append(("Warning", "FailedCreate", message))
                self.status["message"] = message
                return

    # --- following the pods ---------------------------------------------------------------

    async def _follow(self, demand: Demand, attempt: int, pods: list[dict[str, Any]]) -> None:
        s = self.status
        w = st.workers(pods)
        if w.failed:
            await self._worker_failed(w, pods)
            return
        present = {p["index"] for p in w.placement}
        if w.total < self.replicas:
            known = {x["index"] for x in s.get("placement") or []}
            if set(range(self.replicas)) - present <= known:
                await self._create_missing(demand, attempt, present)
            else:  # slots unknown (status lost): start the attempt over
                await self._restart(pods, "SlotsLost", "the slots of missing workers are"
                                    " unknown; re-admitting the job", counted=False)
                return
        admitted = st.parse_iso(s.get("admittedAt")) or self.now
        if w.bound < self.replicas and self.now - admitted > self.r.config.slot_ttl_s:
            await self._restart(pods, "GangTimeout",
                                f"only {w.bound} of {self.replicas} workers were bound within"
                                f" {int(self.r.config.slot_ttl_s)}s; re-admitting the job",
                                counted=False)
            return
        phase = w.phase(self.replicas)
        s["placement"] = self._merge_placement(w.placement)
        self._counts(w)
        conds = s.get("conditions")
        if w.bound == self.replicas:
            conds = st.set_condition(conds, "Scheduled", True, "AllBound",
                                     "every worker is bound to its GPUs", self.now)
        if phase == st.RUNNING:
            conds = st.set_condition(conds, "Running", True, "AllRunning",
                                     f"{w.running} workers running", self.now)
        s["conditions"] = conds
        if phase == st.SUCCEEDED:
            self._finish(st.SUCCEEDED, "AllSucceeded", "every worker succeeded")
            await self.r.release(self.meta["uid"])
            return
        if phase != s.get("phase"):
            s["phase"] = phase
            self.events.append(("Normal", phase, self._phase_message(phase, w)))

    def _phase_message(self, phase: str, w: st.Workers) -> str:
        if phase == st.SCHEDULED:
            nodes = sorted({x["node"] for x in w.placement})
            return f"{w.bound} workers bound on {', '.join(nodes)} ({w.gpus} GPUs)"
        if phase == st.RUNNING:
            return f"{w.running} workers running"
        return f"{w.total} of {self.replicas} worker pods created"

    def _merge_placement(self, observed: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Observed pods, with the reserved node/GPUs for pods not bound yet."""
        reserved = {x["index"]: x for x in self.status.get("placement") or []}
        out = []
        for x in observed:
            entry = dict(x)
            if not entry["node"] and x["index"] in reserved:
                entry["node"] = reserved[x["index"]].get("node", "")
                entry["gpus"] = reserved[x["index"]].get("gpus", [])
            out.append(entry)
        return out

    def _counts(self, w: st.Workers) -> None:
        self.status["readyReplicas"] = w.running
        self.status["ready"] = f"{w.running}/{self.replicas}"
        self.status["gpuCount"] = w.gpus

    # --- restarts and the end -------------------------------------------------------------

    async def _worker_failed(self, w: st.Workers, pods: list[dict[str, Any]]) -> None:
        limit = int((self.spec.get("runPolicy") or {}).get("backoffLimit", 3))
        restarts = int(self.status.get("restarts", 0))
        if restarts >= limit:
            await self._fail("BackoffLimitExceeded",
                             f"worker {w.failed[0]} failed; {restarts} restarts already"
                             f" (backoffLimit {limit})", pods)
            return
        await self._restart(pods, "WorkerFailed", f"worker {w.failed[0]} failed; restarting the"
                            f" job ({restarts + 1} of {limit})", counted=True)

    async def _restart(self, pods: list[dict[str, Any]], reason: str, message: str, *,
                       counted: bool) -> None:
        s = self.status
        attempt = int(s.get("attempt", 0))
        for p in pods:
            await self.r.kube.delete_pod(self.ns, p["metadata"]["name"])
        await self.r.release(self.meta["uid"], attempt)
        s["attempt"] = attempt + 1
        if counted:
            s["restarts"] = int(s.get("restarts", 0)) + 1
        s["admittedAt"] = None
        s["phase"] = st.PENDING
        s["placement"] = []
        s["message"] = message
        self._counts(st.Workers(0, 0, 0, 0, [], [], 0))
        conds = st.set_condition(s.get("conditions"), "Admitted", False, reason, message,
                                 self.now)
        for kind in ("Scheduled", "Running"):
            if st.condition(conds, kind):
                conds = st.set_condition(conds, kind, False, reason, message, self.now)
        s["conditions"] = conds
        self.events.append(("Warning", "Restarting", message))

    async def _fail(self, reason: str, message: str, pods: list[dict[str, Any]]) -> None:
        for p in pods:
            if (p.get("status") or {}).get("phase") not in st.FINISHED:
                await self.r.kube.delete_pod(self.ns, p["metadata"]["name"])
        await self.r.release(self.meta["uid"])
        self._finish(st.FAILED, reason, message)

    def _finish(self, phase: str, reason: str, message: str) -> None:
        s = self.status
        s["phase"] = phase
        s["message"] = message
        s["completionTime"] = st.now_iso(self.now)
        s["waitingSince"] = None
        s["readyReplicas"] = 0
        s["ready"] = f"0/{self.replicas}"
        conds = st.set_condition(s.get("conditions"), phase, True, reason, message, self.now)
        if st.condition(conds, "Running"):
            conds = st.set_condition(conds, "Running", False, reason, message, self.now)
        s["conditions"] = conds
        self.events.append(("Normal" if phase == st.SUCCEEDED else "Warning", phase,
                            f"{reason}: {message}"))

    async def _after_finish(self) -> None:
        ttl = (self.spec.get("runPolicy") or {}).get("ttlSecondsAfterFinished")
        done = st.parse_iso(self.status.get("completionTime"))
        if ttl is not None and done is not None and self.now - done >= float(ttl):
            await self.r.kube.delete_job(self.ns, self.meta["name"])

    # --- writing --------------------------------------------------------------------------

    async def _write(self) -> None:
        changed = {k: v for k, v in self.status.items() if self.before.get(k) != v}
        if changed:
            await self.r.kube.patch_status(self.ns, self.meta["name"], changed)
            self.before = copy.deepcopy(self.status)
            self.before = {k: v for k, v in self.before.items() if v is not None}
            self.status = {k: v for k, v in self.status.items() if v is not None}
        events, self.events = self.events, []
        for kind, reason, message in events:
            await self.r.kube.event(self.job, kind, reason, message)
