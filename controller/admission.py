"""Steps of a pass that admit a job: the backfill gate (controller/queue.py), the gang
reservation (one atomic call to the extender), the slots recorded before any pod exists, and
the worker pods created on them."""

from __future__ import annotations

from typing import Any

from controller import status as st
from controller.context import PassContext, job_key
from controller.errors import GangError, PodCreateError
from controller.pods import worker_pod, worker_prefix
from controller.prediction import Demand
from controller.queue import may_try


def gang_request(ctx: PassContext, demand: Demand, attempt: int) -> dict[str, Any]:
    """The extender's reservation request: every worker of the attempt, as worker 0's pod."""
    worker = worker_pod(ctx.job, demand, attempt=attempt, index=0, slot="",
                        scheduler_name=ctx.config.scheduler_name,
                        priority_class=ctx.priority_class(),
                        predicted_s=ctx.predicted_seconds())
    return {
        "job": ctx.meta["uid"], "namespace": ctx.ns,
        "name": worker_prefix(ctx.meta["name"], attempt), "replicas": ctx.replicas,
        "attempt": attempt, "ttlSeconds": ctx.config.slot_ttl_s,
        "pod": {"metadata": {"annotations": worker["metadata"]["annotations"],
                             "labels": worker["metadata"]["labels"]},
                "spec": {"containers": worker["spec"]["containers"]}},
    }


async def admit(ctx: PassContext, demand: Demand, attempt: int) -> None:
    s = ctx.status
    due = ctx.due(ctx.now)
    record_due(ctx, due)
    allowed, why = may_try(job_key(ctx.job), ctx.waiting(), ctx.now, ctx.config.max_pass_over_s,
                           due, ctx.gangs_first(ctx.now))
    if not allowed and s.get("phase") != st.ADMITTED:  # admitted: finish what was started
        not_admitted(ctx, "Queued", why)
        return
    request = gang_request(ctx, demand, attempt)
    try:
        answer = await ctx.gangs.reserve(request)
    except GangError as exc:
        not_admitted(ctx, "ExtenderUnavailable", str(exc))
        return
    if not answer.get("admitted"):
        ever = bool(answer.get("everFits", True))
        s["everFits"] = ever
        s.setdefault("waitingSince", st.now_iso(ctx.now))
        reason = "InsufficientGPU" if ever else "Unschedulable"
        message = answer.get("reason") or "the workers do not fit"
        if not ever:
            message = f"never fits the current nodes: {message}"
        not_admitted(ctx, reason, message)
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
        s["admittedAt"] = st.now_iso(ctx.now)
    s.setdefault("startTime", st.now_iso(ctx.now))
    s["waitingSince"] = None
    s["everFits"] = None
    nodes = sorted({x["node"] for x in slots})
    message = f"{len(slots)} workers reserved on {', '.join(nodes)}"
    s["conditions"] = st.set_condition(s.get("conditions"), "Admitted", True, "GangReserved",
                                       message, ctx.now)
    s["phase"] = st.ADMITTED
    ctx.counts(st.Workers(0, 0, 0, 0, [], s["placement"],
                          len({g for x in slots for g in x["gpus"]})))
    if not again:
        s["message"] = message
        ctx.events.append(("Normal", "Admitted", message))
    await ctx.write()  # the slots are on record before any pod exists
    await create_missing(ctx, demand, attempt, set())


def record_due(ctx: PassContext, due: dict[str, float]) -> None:
    """Once the job's latest start has come, say so (``queueBand.dueSince`` and an event):
    it stays ahead of every band until admitted (controller/queue.py ``Load.due``)."""
    band = ctx.status.get("queueBand") or {}
    if job_key(ctx.job) not in due or not band or band.get("dueSince"):
        return
    ctx.status["queueBand"] = {**band, "dueSince": st.now_iso(ctx.now)}
    bound = float(band.get("predictedSeconds") or 0) * float(band.get("errorBound") or 1.0)
    ctx.events.append(("Normal", "LatestStart",
                       f"latest start reached: the job may run {bound / 3600:.2f} h, longer "
                       f"than the submitted work takes to drain; it goes ahead of every band"))


def not_admitted(ctx: PassContext, reason: str, message: str) -> None:
    s = ctx.status
    previous = st.condition(s.get("conditions"), "Admitted") or {}
    s["conditions"] = st.set_condition(s.get("conditions"), "Admitted", False, reason,
                                       message, ctx.now)
    s["phase"] = st.PENDING
    s["message"] = message
    s["placement"] = []
    ctx.counts(st.Workers(0, 0, 0, 0, [], [], 0))
    if (previous.get("reason"), previous.get("message")) != (reason, message):
        ctx.events.append(("Warning" if reason != "Queued" else "Normal", "NotAdmitted",
                           f"{reason}: {message}"))


async def create_missing(ctx: PassContext, demand: Demand, attempt: int,
                         present: set[int]) -> None:
    """Create the pods of the recorded slots whose index is not in ``present``."""
    for slot in ctx.status.get("placement") or []:
        if slot["index"] in present:
            continue
        body = worker_pod(ctx.job, demand, attempt=attempt, index=slot["index"],
                          slot=slot["slot"], scheduler_name=ctx.config.scheduler_name,
                          priority_class=ctx.priority_class(),
                        predicted_s=ctx.predicted_seconds())
        try:
            await ctx.kube.create_pod(body)
        except PodCreateError as exc:  # retried next pass; the slots expire meanwhile
            message = f"creating pod {body['metadata']['name']} failed: {exc}"
            if ctx.status.get("message") != message:
                ctx.events.append(("Warning", "FailedCreate", message))
            ctx.status["message"] = message
            return
