"""A job's model fields -> the predictor's input -> the demand of one worker. Pure.

The job carries the original system's fields (``macs``, ``params``, ``batchSize``,
``vocabularySize[]``, ``embeddingDim[]``, ``embeddingSizeTotal``, ``embeddingDimTotal``,
``embeddingTableCount``) plus ``optimizer``, ``dtype``, ``gpuModel`` and ``family``. They go to
the pods as the ``sparse.io/model`` annotation, so the predictor worker and anyone reading the
pod see exactly what the controller predicted from; :func:`model_annotation` is the one place
that writes that annotation's schema.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from predictor import features, gpus
from predictor.estimate import Estimator

ANN_MODEL = features.ANN_MODEL


class InvalidModel(ValueError):
    """The job's model fields cannot be predicted from; the message names the field."""


@dataclass(frozen=True, slots=True)
class Demand:
    """What one worker gets booked: predicted memory and compute of one GPU share."""

    gpu_mem_mib: int
    gpu_milli: int
    job_class: str
    model_version: str
    step_s: float = 0.0  # predicted seconds per training step alone (0: unknown)

    def as_status(self, whole_gpus: int = 0) -> dict[str, Any]:
        out = {"gpuMemMiB": self.gpu_mem_mib, "gpuMilli": self.gpu_milli,
               "wholeGpus": whole_gpus, "jobClass": self.job_class,
               "modelVersion": self.model_version}
        if self.step_s > 0:
            out["stepSeconds"] = float(f"{self.step_s:.4g}")
        return out


def _tables(spec: Mapping[str, Any]) -> list[dict[str, int]]:
    rows = list(spec.get("vocabularySize") or [])
    dims = list(spec.get("embeddingDim") or [])
    if rows or dims:
        if len(rows) != len(dims):
            raise InvalidModel("spec.vocabularySize and spec.embeddingDim differ in length")
        counts = Counter(zip(rows, dims, strict=True))
        return [{"rows": int(r), "dim": int(d), "count": n} for (r, d), n in counts.items()]
    n = int(spec.get("embeddingTableCount") or 0)
    total = float(spec.get("embeddingSizeTotal") or 0)
    if n and total:  # equal tables, as the original system's task_info is read
        dim = round(float(spec.get("embeddingDimTotal") or 0) / n) or 1
        return [{"rows": max(1, round(total / n)), "dim": max(1, min(65536, dim)), "count": n}]
    return []


# The job's fields the predictor reads as they are (camelCase, as in the CRD).
JOB_FIELDS = ("batchSize", "macs", "params", "vocabularySize", "embeddingDim",
              "embeddingSizeTotal", "embeddingDimTotal", "embeddingTableCount", "optimizer",
              "dtype", "sparseGradients", "idsPerSample", "leafActivations", "optimizerImpl",
              "embeddingSharding", "unpooledLookups")


def model_annotation(job_spec: Mapping[str, Any]) -> dict[str, str]:
    """The ``sparse.io/model`` annotation describing one worker of the job: the job's own
    camelCase fields where the predictor reads them (``features.JobFields``), else (or when the
    job names a ``family``, which only the full schema carries) the full snake_case schema."""
    gpu = (job_spec.get("gpuModel") or "").split("|")[0].strip()
    workers, view = data_parallel(job_spec)
    if hasattr(features, "JobFields") and not job_spec.get("family"):
        fields = {k: job_spec[k] for k in JOB_FIELDS if job_spec.get(k) is not None}
        if workers:
            fields["dataParallelWorkers"] = workers
            if view:
                fields["gradientAsBucketView"] = True
        if gpu in gpus.CATALOGUE:
            fields["gpuModel"] = gpu
        return {ANN_MODEL: json.dumps(fields, separators=(",", ":"), sort_keys=True)}
    tables = _tables(job_spec)
    model: dict[str, Any] = {
        "family": job_spec.get("family") or ("recommendation" if tables else "other"),
        "batch_size": int(job_spec.get("batchSize") or 0),
        "optimizer": job_spec.get("optimizer") or "adam",
        "dtype": job_spec.get("dtype") or "fp32",
        "macs": float(job_spec.get("macs") or 0),
        "params": float(job_spec.get("params") or 0),
        "tables": tables,
        "sparse_grad": bool(job_spec.get("sparseGradients")
                            or job_spec.get("optimizer") == "sparse_adam"),
    }
    if workers:
        model["data_parallel_workers"] = workers
        model["gradient_as_bucket_view"] = view
    if job_spec.get("embeddingSharding"):
        model["embedding_sharding"] = job_spec["embeddingSharding"]
        model["unpooled_lookups"] = bool(job_spec.get("unpooledLookups"))
    if gpu in gpus.CATALOGUE:  # other names still restrict placement, not the prediction
        model["gpu_model"] = gpu
    return {ANN_MODEL: json.dumps(model, separators=(",", ":"), sort_keys=True)}


DATA_PARALLEL = ("ddp", "ddp-bucket-view", "none")


def data_parallel(job_spec: Mapping[str, Any]) -> tuple[int, bool]:
    """``(workers, bucket view)`` of the job's DistributedDataParallel sync: as the job says
    (``dataParallel``: ``ddp``, ``ddp-bucket-view`` or ``none``), else ``ddp`` for several
    replicas, PyTorch's usual way to train them (booking it for a job that syncs otherwise
    costs memory, not booking it for DDP runs the workers out of memory). Tables sharded
    over the workers (``embeddingSharding``, TorchRec) are sharded over DDP's workers, whatever
    ``replicas``. ``(0, False)``: no sync to book."""
    try:
        replicas = max(1, int(job_spec.get("replicas") or 1))
    except (TypeError, ValueError):
        replicas = 1
    sharded = bool(job_spec.get("embeddingSharding"))
    mode = job_spec.get("dataParallel") or ("ddp" if replicas > 1 or sharded else "none")
    if mode not in DATA_PARALLEL:
        raise InvalidModel(f"spec.dataParallel: {mode!r} is not one of {', '.join(DATA_PARALLEL)}")
    if sharded and mode == "none":
        raise InvalidModel("spec.embeddingSharding shards the tables over the job's"
                           " DistributedDataParallel workers (TorchRec's"
                           " DistributedModelParallel): it needs dataParallel ddp or"
                           " ddp-bucket-view, not none")
    if mode == "none":
        return 0, False
    return replicas, mode == "ddp-bucket-view"


@lru_cache(maxsize=1)
def _estimator() -> Estimator:
    return Estimator.load()


def predict(job_spec: Mapping[str, Any]) -> Demand:
    try:
        spec = features.from_annotations(model_annotation(job_spec))
    except (features.SchemaError, ValueError) as exc:
        raise InvalidModel(str(exc)) from None
    if spec is None:  # not reachable: model_annotation always writes the annotation
        raise InvalidModel("no model description")
    p = _estimator().predict(spec)
    job_class = (job_spec.get("jobClass") or p.job_class or "unknown").strip().lower()
    return Demand(gpu_mem_mib=int(p.gpu_mem_mib), gpu_milli=int(p.gpu_milli),
                  job_class=job_class, model_version=p.model_version,
                  step_s=float(getattr(p, "step_s", 0.0) or 0.0))
