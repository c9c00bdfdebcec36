"""A job's status from its pods: phase, per-worker placement, conditions. Pure.

Phases: ``Pending`` (not admitted: predicted, waiting for every worker to fit), ``Admitted``
(all workers hold a gang slot, pods created), ``Scheduled`` (every pod bound), ``Running``
(every pod running), ``Succeeded`` (every pod succeeded), ``Failed`` (a worker failed more
often than ``runPolicy.backoffLimit`` allows, the deadline passed, or the model is invalid).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from controller.pods import LABEL_INDEX
from extender.annotations import ANN_GANG_SLOT, ANN_GPU_UUIDS

PENDING, ADMITTED, SCHEDULED, RUNNING, SUCCEEDED, FAILED = (
    "Pending", "Admitted", "Scheduled", "Running", "Succeeded", "Failed")
FINISHED = (SUCCEEDED, FAILED)
CONDITIONS = ("Predicted", "Admitted", "Scheduled", "Running", "Succeeded", "Failed")


def now_iso(now: float) -> str:
    return dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=dt.UTC).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True)
class Workers:
    """What the pods of the current attempt say."""

    total: int
    bound: int
    running: int
    succeeded: int
    failed: list[str]  # names of failed pods
    placement: list[dict[str, Any]]
    gpus: int  # distinct GPUs held

    def phase(self, replicas: int) -> str:
        if self.failed:
            return FAILED
        if self.total < replicas:
            return ADMITTED
        if self.succeeded == replicas:
            return SUCCEEDED
        if self.running + self.succeeded == replicas and self.running:
            return RUNNING
        if self.bound == replicas:
            return SCHEDULED
        return ADMITTED


def _index(pod: Mapping[str, Any]) -> int:
    try:
        return int(pod["metadata"].get("labels", {}).get(LABEL_INDEX, -1))
    except (TypeError, ValueError):
        return -1


def workers(pods: Iterable[Mapping[str, Any]]) -> Workers:
    pods = sorted(pods, key=_index)
    placement, gpus = [], set()
    bound = running = succeeded = 0
    failed: list[str] = []
    for p in pods:
        meta, spec, st = p["metadata"], p.get("spec") or {}, p.get("status") or {}
        annotations = meta.get("annotations") or {}
        node = spec.get("nodeName") or ""
        uuids = [u for u in (annotations.get(ANN_GPU_UUIDS) or "").split(",") if u]
        phase = st.get("phase") or "Pending"
        bound += bool(node)
        running += phase == "Running"
        succeeded += phase == "Succeeded"
        if phase == "Failed":
            failed.append(meta["name"])
        if phase not in FINISHED:
            gpus.update(uuids)
        placement.append({"index": _index(p), "pod": meta["name"], "node": node, "gpus": uuids,
                          "slot": annotations.get(ANN_GANG_SLOT, ""), "phase": phase})
    return Workers(total=len(placement), bound=bound, running=running, succeeded=succeeded,
                   failed=failed, placement=placement, gpus=len(gpus))


def set_condition(conditions: list[dict[str, Any]] | None, kind: str, status: bool,
                  reason: str, message: str, now: float) -> list[dict[str, Any]]:
    """The conditions with ``kind`` set; its transition time moves only when status flips."""
    value = "True" if status else "False"
    out = [dict(c) for c in conditions or []]
    for c in out:
        if c.get("type") == kind:
            if c.get("status") != value:
                c["lastTransitionTime"] = now_iso(now)
            c.update(status=value, reason=reason, message=message[:1000])
            return out
    out.append({"type": kind, "status": value, "reason": reason, "message": message[:1000],
                "lastTransitionTime": now_iso(now)})
    out.sort(key=lambda c: CONDITIONS.index(c["type"]) if c["type"] in CONDITIONS else 99)
    return out


def condition(conditions: list[dict[str, Any]] | None, kind: str) -> dict[str, Any] | None:
    return next((c for c in conditions or [] if c.get("type") == kind), None)
