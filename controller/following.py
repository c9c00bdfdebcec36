"""Steps of a pass over an admitted job whose pods exist: create the missing ones, restart a
gang whose slots are lost or not bound in time, and move the phase with the pods'."""

from __future__ import annotations

from typing import Any

from controller import status as st
from controller.admission import create_missing
from controller.context import PassContext
from controller.lifecycle import finish, restart, worker_failed
from controller.prediction import Demand


async def follow(ctx: PassContext, demand: Demand, attempt: int,
                 pods: list[dict[str, Any]]) -> None:
    s = ctx.status
    w = st.workers(pods)
    if w.failed:
        await worker_failed(ctx, w, pods)
        return
    present = {p["index"] for p in w.placement}
    if w.total < ctx.replicas:
        known = {x["index"] for x in s.get("placement") or []}
        if set(range(ctx.replicas)) - present <= known:
            await create_missing(ctx, demand, attempt, present)
        else:  # slots unknown (status lost): start the attempt over
            await restart(ctx, pods, "SlotsLost", "the slots of missing workers are"
                          " unknown; re-admitting the job", counted=False)
            return
    admitted = st.parse_iso(s.get("admittedAt")) or ctx.now
    if w.bound < ctx.replicas and ctx.now - admitted > ctx.config.slot_ttl_s:
        await restart(ctx, pods, "GangTimeout",
                      f"only {w.bound} of {ctx.replicas} workers were bound within"
                      f" {int(ctx.config.slot_ttl_s)}s; re-admitting the job", counted=False)
        return
    phase = w.phase(ctx.replicas)
    s["placement"] = merge_placement(s.get("placement") or [], w.placement)
    ctx.counts(w)
    conds = s.get("conditions")
    if w.bound == ctx.replicas:
        conds = st.set_condition(conds, "Scheduled", True, "AllBound",
                                 "every worker is bound to its GPUs", ctx.now)
    if phase == st.RUNNING:
        conds = st.set_condition(conds, "Running", True, "AllRunning",
                                 f"{w.running} workers running", ctx.now)
    s["conditions"] = conds
    if phase == st.SUCCEEDED:
        finish(ctx, st.SUCCEEDED, "AllSucceeded", "every worker succeeded")
        await ctx.release()
        return
    if phase != s.get("phase"):
        s["phase"] = phase
        ctx.events.append(("Normal", phase, phase_message(phase, w, ctx.replicas)))


def phase_message(phase: str, w: st.Workers, replicas: int) -> str:
    if phase == st.SCHEDULED:
        nodes = sorted({x["node"] for x in w.placement})
        return f"{w.bound} workers bound on {', '.join(nodes)} ({w.gpus} GPUs)"
    if phase == st.RUNNING:
        return f"{w.running} workers running"
    return f"{w.total} of {replicas} worker pods created"


def merge_placement(recorded: list[dict[str, Any]],
                    observed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Observed pods, with the reserved node/GPUs for pods not bound yet."""
    reserved = {x["index"]: x for x in recorded}
    out = []
    for x in observed:
        entry = dict(x)
        if not entry["node"] and x["index"] in reserved:
            entry["node"] = reserved[x["index"]].get("node", "")
            entry["gpus"] = reserved[x["index"]].get("gpus", [])
        out.append(entry)
    return out
