"""Worker pods of a RecommendDLJob, built from its template. Pure.

Each worker gets: an owner reference to the job (garbage collection, and the controller's
pod watch), the job's labels, the scheduler name, the annotations the extender and the
predictor read (``sparse.io/model``, ``sparse.io/job-class``, ``sparse.io/gpu-model``,
``sparse.io/embedding`` for locality), the
gang slot it binds to (``sparse.io/gang-slot``) and its GPU resources: the template's
``nvidia.com/gpu`` when it asks for whole GPUs, otherwise a share of one GPU sized by the
prediction (``sparse.io/gpu-mem`` = max(declared, predicted), ``sparse.io/gpu-milli`` =
min(declared, predicted), as the extender combines them) on the first container.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from controller.prediction import Demand, model_annotation
from extender.annotations import (
    ANN_GANG_SLOT,
    ANN_GPU_MODEL,
    ANN_JOB_CLASS,
    ANN_PREDICTED_SECONDS,
    RES_GPU_MEM,
    RES_GPU_MILLI,
    RES_WHOLE_GPU,
)
from extender.quantity import parse_int_quantity

GROUP, VERSION, PLURAL, KIND = "sparse.io", "v1alpha1", "recommenddljobs", "RecommendDLJob"
LABEL_JOB = "sparse.io/job"
LABEL_JOB_UID = "sparse.io/job-uid"
LABEL_INDEX = "sparse.io/replica-index"
LABEL_ATTEMPT = "sparse.io/attempt"
DEFAULT_SCHEDULER = "sparse-scheduler"
ANN_EMBEDDING = "sparse.io/embedding"  # {store, tables, hotRows?, idsPerStep?, steps?,
#                                        stepComputeMs?, maxWaitSeconds?, required?}


def worker_prefix(job_name: str, attempt: int) -> str:
    """Pods are ``<job>-worker-<i>``; a restarted job's are ``<job>-r<n>-worker-<i>`` so the
    new pods never wait for the old names to be freed."""
    return f"{job_name}-worker" if attempt == 0 else f"{job_name}-r{attempt}-worker"


def pod_name(job_name: str, attempt: int, index: int) -> str:
    return f"{worker_prefix(job_name, attempt)}-{index}"


def _limits(container: Mapping[str, Any]) -> dict[str, Any]:
    resources = container.get("resources") or {}
    return {**(resources.get("limits") or {}), **(resources.get("requests") or {})}


def whole_gpus(template: Mapping[str, Any]) -> int:
    """Whole GPUs one worker asks for in its template (0: a predicted share of one GPU)."""
    total = 0
    for c in (template.get("spec") or {}).get("containers") or []:
        value = _limits(c).get(RES_WHOLE_GPU)
        if value is not None:
            total += parse_int_quantity(value, f"container {c.get('name')}: {RES_WHOLE_GPU}")
    return total


def _size_share(containers: list[dict[str, Any]], demand: Demand) -> None:
    """Put the predicted share on the container(s) that declare one, else the first."""
    sharing = [c for c in containers if RES_GPU_MEM in _limits(c) or RES_GPU_MILLI in _limits(c)]
    if not sharing:
        sharing = containers[:1]
    declared_mem = sum(parse_int_quantity(_limits(c).get(RES_GPU_MEM, 0), RES_GPU_MEM)
                       for c in sharing)
    declared_milli = sum(parse_int_quantity(_limits(c).get(RES_GPU_MILLI, 0), RES_GPU_MILLI)
                         for c in sharing)
    if declared_mem >= demand.gpu_mem_mib and 0 < declared_milli <= demand.gpu_milli:
        return  # the template already asks for at least the prediction
    main = sharing[0]
    for c in sharing[1:]:  # one container carries the whole share
        for kind in ("limits", "requests"):
            table = (c.get("resources") or {}).get(kind) or {}
            table.pop(RES_GPU_MEM, None)
            table.pop(RES_GPU_MILLI, None)
    resources = main.setdefault("resources", {})
    limits = resources.setdefault("limits", {})
    requests = resources.get("requests") or {}
    requests.pop(RES_GPU_MEM, None)
    requests.pop(RES_GPU_MILLI, None)
    limits[RES_GPU_MEM] = str(max(declared_mem, demand.gpu_mem_mib))
    milli = demand.gpu_milli if not declared_milli else min(declared_milli, demand.gpu_milli)
    limits[RES_GPU_MILLI] = str(max(1, min(1000, milli)))


def worker_pod(job: Mapping[str, Any], demand: Demand, *, attempt: int, index: int,
               slot: str, scheduler_name: str = DEFAULT_SCHEDULER,
               priority_class: str | None = None,
               predicted_s: float | None = None) -> dict[str, Any]:
    meta, spec = job["metadata"], job["spec"]
    template = copy.deepcopy(spec.get("template") or {})
    tmeta = template.get("metadata") or {}
    pspec = template.get("spec") or {}
    replicas = int(spec.get("replicas") or 1)
    labels = {**(tmeta.get("labels") or {}), LABEL_JOB: meta["name"],
              LABEL_JOB_UID: meta["uid"], LABEL_INDEX: str(index), LABEL_ATTEMPT: str(attempt)}
    annotations = {**(tmeta.get("annotations") or {}), **model_annotation(spec),
                   ANN_JOB_CLASS: demand.job_class, ANN_GANG_SLOT: slot}
    if spec.get("gpuModel"):
        annotations[ANN_GPU_MODEL] = spec["gpuModel"]
    if predicted_s:  # read by the extender's holds (extender/placement/holds.py)
        annotations[ANN_PREDICTED_SECONDS] = str(round(float(predicted_s)))
    if spec.get("embedding"):  # read by the locality term of prioritize
        annotations[ANN_EMBEDDING] = json.dumps(
            {k: v for k, v in spec["embedding"].items()  # unset; but a wait of 0 says never
             if v is not None and v is not False and (v != 0 or k == "maxWaitSeconds")},
            separators=(",", ":"), sort_keys=True)
    containers = pspec.get("containers") or []
    if not whole_gpus(template):
        _size_share(containers, demand)
    for c in containers:  # the worker's place in the job, as PyTorchJob sets them
        env = [e for e in c.get("env") or [] if e.get("name") not in ("RANK", "WORLD_SIZE")]
        c["env"] = [*env, {"name": "RANK", "value": str(index)},
                    {"name": "WORLD_SIZE", "value": str(replicas)}]
    pspec.setdefault("schedulerName", scheduler_name)
    if priority_class and not pspec.get("priorityClassName"):  # the template's own class wins
        pspec["priorityClassName"] = priority_class  # the job's queue band, every worker alike
        pspec.pop("priority", None)  # admission fills it in from the class
    pspec.setdefault("restartPolicy", "Never")  # the controller restarts the whole job
    pspec.pop("nodeName", None)  # the slot decides the node, through the scheduler
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(meta["name"], attempt, index),
            "namespace": meta.get("namespace") or "default",
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{
                "apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": meta["name"],
                "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True,
            }],
        },
        "spec": pspec,
    }
