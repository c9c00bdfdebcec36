"""Pod annotations that record an assignment, and the reservation they describe. Pure.

Written at bind, on the Binding itself (the API server copies them onto the pod):
``sparse.io/gpu-uuids`` (all UUIDs, comma-separated, what the webhook exposes as
NVIDIA_VISIBLE_DEVICES), ``sparse.io/node`` and ``sparse.io/assignment`` (JSON: job class and,
per container, the GPUs with the memory and compute booked on each). Read back at start-up to
rebuild the ledger from the API server, the source of truth.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from extender.annotations import ANN_ASSIGNMENT, ANN_GPU_UUIDS, ANN_NODE
from extender.ledger.rules import STATE_BOUND, Allocation, Reservation


def annotations_for(reservation: Reservation) -> dict[str, str]:
    containers: dict[str, list[dict[str, Any]]] = {}
    for a in reservation.allocations:
        containers.setdefault(a.container, []).append(
            {"uuid": a.gpu, "mem_mib": a.mem_mib, "milli": a.milli})
    detail = {
        "version": 1,
        "job_class": reservation.job_class,
        "whole_gpus": list(reservation.whole_gpus),
        "containers": [{"name": name, "gpus": gpus} for name, gpus in containers.items()],
    }
    return {
        ANN_GPU_UUIDS: ",".join(reservation.gpus),
        ANN_NODE: reservation.node,
        ANN_ASSIGNMENT: json.dumps(detail, separators=(",", ":")),
    }


def reservation_from_pod(pod: Mapping[str, Any]) -> Reservation | None:
    """The booking a bound pod carries, or None when it has none (or it is unreadable)."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    raw = annotations.get(ANN_ASSIGNMENT)
    node = (pod.get("spec") or {}).get("nodeName") or annotations.get(ANN_NODE)
    if not raw or not node:
        return None
    try:
        detail = json.loads(raw)
        allocations = tuple(
            Allocation(str(g["uuid"]), str(c["name"]), int(g["mem_mib"]), int(g["milli"]))
            for c in detail["containers"] for g in c["gpus"]
        )
        whole = tuple(str(u) for u in detail.get("whole_gpus", []))
        job_class = str(detail.get("job_class", "unknown"))
    except (ValueError, KeyError, TypeError):
        return None
    if not allocations:
        return None
    return Reservation(
        pod_uid=meta.get("uid", ""), namespace=meta.get("namespace", "default"),
        name=meta.get("name", ""), node=node, allocations=allocations, job_class=job_class,
        state=STATE_BOUND, whole_gpus=whole,
    )


def pod_is_finished(pod: Mapping[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed")
