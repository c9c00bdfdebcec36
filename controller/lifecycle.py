"""Steps of a pass that end an attempt or the job: restart after a failed worker or a lost
gang, fail (backoff limit, deadline, invalid model), finish, and delete after the TTL."""

from __future__ import annotations

from typing import Any

from controller import status as st
from controller.context import PassContext


async def worker_failed(ctx: PassContext, w: st.Workers, pods: list[dict[str, Any]]) -> None:
    limit = int((ctx.spec.get("runPolicy") or {}).get("backoffLimit", 3))
    restarts = int(ctx.status.get("restarts", 0))
    if restarts >= limit:
        await fail(ctx, "BackoffLimitExceeded",
                   f"worker {w.failed[0]} failed; {restarts} restarts already"
                   f" (backoffLimit {limit})", pods)
        return
    await restart(ctx, pods, "WorkerFailed", f"worker {w.failed[0]} failed; restarting the"
                  f" job ({restarts + 1} of {limit})", counted=True)


async def restart(ctx: PassContext, pods: list[dict[str, Any]], reason: str, message: str, *,
                  counted: bool) -> None:
    """Delete the attempt's pods, release its slots and start the next attempt; ``counted``:
    the restart counts against ``backoffLimit``."""
    s = ctx.status
    attempt = int(s.get("attempt", 0))
    for p in pods:
        await ctx.kube.delete_pod(ctx.ns, p["metadata"]["name"])
    await ctx.release(attempt)
    s["attempt"] = attempt + 1
    if counted:
        s["restarts"] = int(s.get("restarts", 0)) + 1
    s["admittedAt"] = None
    s["phase"] = st.PENDING
    s["placement"] = []
    s["message"] = message
    ctx.counts(st.Workers(0, 0, 0, 0, [], [], 0))
    conds = st.set_condition(s.get("conditions"), "Admitted", False, reason, message, ctx.now)
    for kind in ("Scheduled", "Running"):
        if st.condition(conds, kind):
            conds = st.set_condition(conds, kind, False, reason, message, ctx.now)
    s["conditions"] = conds
    ctx.events.append(("Warning", "Restarting", message))


async def fail(ctx: PassContext, reason: str, message: str, pods: list[dict[str, Any]]) -> None:
    for p in pods:
        if (p.get("status") or {}).get("phase") not in st.FINISHED:
            await ctx.kube.delete_pod(ctx.ns, p["metadata"]["name"])
    await ctx.release()
    finish(ctx, st.FAILED, reason, message)


def finish(ctx: PassContext, phase: str, reason: str, message: str) -> None:
    s = ctx.status
    s["phase"] = phase
    s["message"] = message
    s["completionTime"] = st.now_iso(ctx.now)
    s["waitingSince"] = None
    s["readyReplicas"] = 0
    s["ready"] = f"0/{ctx.replicas}"
    conds = st.set_condition(s.get("conditions"), phase, True, reason, message, ctx.now)
    if st.condition(conds, "Running"):
        conds = st.set_condition(conds, "Running", False, reason, message, ctx.now)
    s["conditions"] = conds
    ctx.events.append(("Normal" if phase == st.SUCCEEDED else "Warning", phase,
                       f"{reason}: {message}"))


async def after_finish(ctx: PassContext) -> None:
    """A finished job is deleted ``runPolicy.ttlSecondsAfterFinished`` after it ended."""
    ttl = (ctx.spec.get("runPolicy") or {}).get("ttlSecondsAfterFinished")
    done = st.parse_iso(ctx.status.get("completionTime"))
    if ttl is not None and done is not None and ctx.now - done >= float(ttl):
        await ctx.kube.delete_job(ctx.ns, ctx.meta["name"])
