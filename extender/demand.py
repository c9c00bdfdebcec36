"""What a pod asks for, from its containers' resources, its annotations and a prediction.

Pure. The rules (also in docs/requests.md):

* ``nvidia.com/gpu: N`` on a container = N whole GPUs for that container, exclusively.
* ``sparse.io/gpu-milli`` (1..1000) and ``sparse.io/gpu-mem`` (MiB) on a container = a share of
  one GPU. The shares of all containers of a pod are summed and placed on one GPU (like
  gpushare); each container's part is recorded separately. A container may not ask for both.
* requests win over limits; a resource only in limits counts as requested (Kubernetes defaulting).
* init containers run before the app containers on the same devices; they get no GPU of their own.
* ``sparse.io/gpu-model: A|B`` restricts the GPU models; ``sparse.io/job-class`` names the class
  used by the interference model.
* A predicted demand never lowers memory: booked memory = max(declared, predicted). It may lower
  an over-asked compute share: booked milli = min(declared, predicted) (predicted alone when the
  pod declares none). The job class comes from the annotation first, then the prediction.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from extender.annotations import (
    ANN_GPU_MODEL,
    ANN_JOB_CLASS,
    ANN_PREDICTED_SECONDS,
    RES_GPU_MEM,
    RES_GPU_MILLI,
    RES_WHOLE_GPU,
)
from extender.errors import InvalidDemand
from extender.protocol import Container, Pod
from extender.quantity import parse_int_quantity, parse_scaled_quantity

MILLI_PER_GPU = 1000
MAX_WHOLE_GPUS = 64
UNKNOWN_CLASS = "unknown"


@dataclass(frozen=True, slots=True)
class Prediction:
    """A predicted demand as the predictor worker stores it (Redis hash sparse:demand:<uid>)."""

    gpu_milli: int
    gpu_mem_mib: int
    job_class: str = ""
    model_version: str = ""
    updated_at: float = 0.0

    @classmethod
    def from_hash(cls, fields: Mapping[str, str]) -> Prediction | None:
        """Parse the hash; None when it is missing or unusable (a bad prediction is ignored,
        never trusted to shrink a booking)."""
        try:
            milli = int(float(fields["gpu_milli"]))
            mem = int(float(fields["gpu_mem_mib"]))
        except (KeyError, ValueError, TypeError):
            return None
        if not 1 <= milli <= MILLI_PER_GPU or mem < 1 or mem > 16 * 1024 * 1024:
            return None
        try:
            updated = float(fields.get("updated_at", 0) or 0)
        except ValueError:
            updated = 0.0
        return cls(
            gpu_milli=milli,
            gpu_mem_mib=mem,
            job_class=str(fields.get("job_class", "") or "")[:63],
            model_version=str(fields.get("model_version", "") or "")[:63],
            updated_at=updated,
        )


@dataclass(frozen=True, slots=True)
class ContainerRequest:
    name: str
    whole_gpus: int = 0
    milli: int = 0
    mem_mib: int = 0


@dataclass(frozen=True, slots=True)
class PodDemand:
    uid: str
    namespace: str
    name: str
    containers: tuple[ContainerRequest, ...]
    whole_gpus: int  # exclusive GPUs over all containers
    share_milli: int  # booked share of one GPU (after the prediction rule), 0 if none
    share_mem_mib: int
    allowed_models: frozenset[str] | None = None
    job_class: str = UNKNOWN_CLASS
    prediction: Prediction | None = None
    share_containers: tuple[ContainerRequest, ...] = field(default=())  # booked per-container
    # What kube-scheduler accounts the pod on its node (effective requests): placement reads
    # them against the node's CPU and memory left where the adapter knows those.
    cpu_milli: int = 0
    host_mem_mib: int = 0
    # Predicted run time (seconds) from the job controller's annotation; None: unknown.
    # Holds (placement/holds.py) let a pod onto a held node only if it ends before the hold.
    predicted_s: float | None = None

    @property
    def has_share(self) -> bool:
        return self.share_mem_mib > 0 or self.share_milli > 0

    @property
    def slot_count(self) -> int:
        return self.whole_gpus + (1 if self.has_share else 0)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def describe(self) -> str:
        parts = []
        if self.whole_gpus:
            parts.append(f"{self.whole_gpus} whole GPU(s)")
        if self.has_share:
            parts.append(f"a share of {self.share_milli} milli and {self.share_mem_mib} MiB")
        return " + ".join(parts) or "no GPU"


def _container_request(container: Container) -> ContainerRequest:
    resources = container.resources
    requests = dict(resources.limits or {}) if resources else {}
    if resources and resources.requests:
        requests.update(resources.requests)
    name = container.name or "?"
    whole = milli = mem = 0
    if RES_WHOLE_GPU in requests:
        whole = parse_int_quantity(requests[RES_WHOLE_GPU], f"container {name}: {RES_WHOLE_GPU}")
    if RES_GPU_MILLI in requests:
        milli = parse_int_quantity(requests[RES_GPU_MILLI], f"container {name}: {RES_GPU_MILLI}")
        if not 1 <= milli <= MILLI_PER_GPU:
            raise InvalidDemand(
                f"container {name}: {RES_GPU_MILLI} must be 1..{MILLI_PER_GPU}, got {milli}"
                " (ask for nvidia.com/gpu for whole GPUs)"
            )
    if RES_GPU_MEM in requests:
        mem = parse_int_quantity(requests[RES_GPU_MEM], f"container {name}: {RES_GPU_MEM}")
    if whole > MAX_WHOLE_GPUS:
        raise InvalidDemand(f"container {name}: {whole} GPUs is more than any node has")
    if whole and (milli or mem):
        raise InvalidDemand(
            f"container {name}: asks for whole GPUs and a GPU share at once; pick one"
        )
    return ContainerRequest(name=name, whole_gpus=whole, milli=milli, mem_mib=mem)


def _spread(total: int, weights: list[int]) -> list[int]:
    """Split ``total`` in proportion to ``weights`` (evenly when all zero); exact sum."""
    if not weights:
        return []
    base = sum(weights)
    parts = [total * w // base for w in weights] if base else [total // len(weights)] * len(weights)
    parts[0] += total - sum(parts)
    return parts


def _host_request(container: Container) -> tuple[int, int]:
    """A container's CPU (milli) and memory (MiB, rounded up) request; a resource only in
    limits counts as requested (Kubernetes defaulting)."""
    resources = container.resources
    if resources is None:
        return 0, 0
    table = dict(resources.limits or {})
    table.update(resources.requests or {})
    name = container.name or "?"
    cpu = parse_scaled_quantity(table["cpu"], f"container {name}: cpu", 1000) \
        if "cpu" in table else 0
    mem = parse_scaled_quantity(table["memory"], f"container {name}: memory", 1 / 2**20) \
        if "memory" in table else 0
    return cpu, mem


# A container's resources as parsed, by their text: the replicas of a job, and the pods of the
# few shapes a cluster runs, carry the very same resources, and the quantities' parsing was a
# fifth of filter's own work. Only valid ones are kept (an invalid one raises each time).
_PARSED: dict[tuple, tuple[ContainerRequest, tuple[int, int]]] = {}
_PARSED_MAX = 4096


def _container_key(container: Container) -> tuple:
    """What the parsed requests of a container depend on: its name and resource tables."""
    resources = container.resources
    return (container.name,
            tuple(resources.limits.items()) if resources and resources.limits else (),
            tuple(resources.requests.items()) if resources and resources.requests else ())


def _parsed(container: Container, key: tuple | None = None
            ) -> tuple[ContainerRequest, tuple[int, int]] | None:
    """``_container_request`` and ``_host_request`` of the container, memoised; None when
    either refuses it (the caller asks each part itself: the same error, in the same order).
    ``key``: the container's ``_container_key``, when the caller built it already."""
    if key is None:
        key = _container_key(container)
    try:
        hit = _PARSED.get(key)
    except TypeError:  # an unhashable value: not kept
        return None
    if hit is None:
        try:
            hit = (_container_request(container), _host_request(container))
        except InvalidDemand:
            return None
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[key] = hit
    return hit


def _gpu_part(container: Container) -> ContainerRequest:
    parsed = _parsed(container)
    return parsed[0] if parsed is not None else _container_request(container)


def _host_part(container: Container) -> tuple[int, int]:
    parsed = _parsed(container)
    return parsed[1] if parsed is not None else _host_request(container)


def host_requests(pod: Pod) -> tuple[int, int]:
    """The pod's effective CPU (milli) and memory (MiB) request, as kube-scheduler counts it:
    the larger of the app containers' sum and any one init container's."""
    app = [_host_part(c) for c in pod.spec.containers]
    init = [_host_part(c) for c in pod.spec.initContainers or ()]
    cpu = max([sum(c for c, _ in app), *(c for c, _ in init)])
    mem = max([sum(m for _, m in app), *(m for _, m in init)])
    return cpu, mem


def parse_allowed_models(value: str | None) -> frozenset[str] | None:
    if value is None or not value.strip():
        return None
    models = frozenset(m.strip() for m in value.split("|") if m.strip())
    if not models or len(value) > 1024:
        raise InvalidDemand(f"annotation {ANN_GPU_MODEL}: {value[:80]!r} names no GPU model")
    return models


# A pod's demand less its identity, by everything it is made of (the containers' resources,
# the three annotations it reads, the prediction): a job's replicas, and the pods of the few
# shapes a cluster runs, make the same demand, built once. The inputs are values compared by
# equality, so an entry never goes stale; only valid demands are kept (an invalid one raises
# each time), and the table is emptied when full.
_SHAPES: dict[tuple, PodDemand] = {}
_SHAPES_MAX = 4096


def _shape_key(pod: Pod, prediction: Prediction | None) -> tuple | None:
    annotations = pod.metadata.annotations or {}
    key = (tuple(map(_container_key, pod.spec.containers)),
           tuple(map(_container_key, pod.spec.initContainers or ())),
           annotations.get(ANN_JOB_CLASS), annotations.get(ANN_GPU_MODEL),
           annotations.get(ANN_PREDICTED_SECONDS), prediction)
    try:
        hash(key)
    except TypeError:  # an unhashable value: not kept
        return None
    return key


def pod_demand(pod: Pod, prediction: Prediction | None = None) -> PodDemand:
    """The GPU demand of a pod; raises InvalidDemand with a message fit for a pod event."""
    if len(pod.spec.containers) > 256:
        raise InvalidDemand("pod has more than 256 containers")
    key = _shape_key(pod, prediction)
    shape = _SHAPES.get(key) if key is not None else None
    if shape is None:
        shape = _pod_shape(pod, prediction)
        if key is not None:
            if len(_SHAPES) >= _SHAPES_MAX:
                _SHAPES.clear()
            _SHAPES[key] = shape
    meta = pod.metadata
    # Positional: a third of dataclasses.replace's time (a test holds it to every field).
    return PodDemand(meta.uid, meta.namespace or "default", meta.name, shape.containers,
                     shape.whole_gpus, shape.share_milli, shape.share_mem_mib,
                     shape.allowed_models, shape.job_class, shape.prediction,
                     shape.share_containers, shape.cpu_milli, shape.host_mem_mib,
                     shape.predicted_s)


def _pod_shape(pod: Pod, prediction: Prediction | None) -> PodDemand:
    """``pod_demand`` without the memo (and without the pod's identity)."""
    meta = pod.metadata
    containers = tuple(_gpu_part(c) for c in pod.spec.containers)
    annotations = meta.annotations or {}
    sharing = [c for c in containers if c.milli or c.mem_mib]
    declared_milli = sum(c.milli for c in sharing)
    declared_mem = sum(c.mem_mib for c in sharing)
    if declared_milli > MILLI_PER_GPU:
        raise InvalidDemand(
            f"containers ask for {declared_milli} milli in total; a share is at most"
            f" {MILLI_PER_GPU} of one GPU (ask for nvidia.com/gpu instead)"
        )
    milli, mem = declared_milli, declared_mem
    if sharing and prediction is not None:
        mem = max(declared_mem, prediction.gpu_mem_mib)
        milli = prediction.gpu_milli
        if declared_milli:
            milli = min(declared_milli, milli)
    if sharing and mem == 0:
        raise InvalidDemand(
            f"a GPU share needs {RES_GPU_MEM} (MiB) or a predicted demand; without one the"
            " extender cannot keep co-located jobs from running out of memory"
        )
    booked = tuple(
        ContainerRequest(c.name, 0, m, b)
        for c, m, b in zip(
            sharing,
            _spread(milli, [c.milli for c in sharing]),
            _spread(mem, [c.mem_mib for c in sharing]),
            strict=True,
        )
    )
    cpu, host_mem = host_requests(pod)
    job_class = annotations.get(ANN_JOB_CLASS, "").strip().lower()
    if not job_class and prediction is not None and prediction.job_class:
        job_class = prediction.job_class
    if len(job_class) > 63:
        raise InvalidDemand(f"annotation {ANN_JOB_CLASS} is longer than 63 characters")
    return PodDemand(
        uid="",
        namespace="",
        name="",
        containers=containers,
        whole_gpus=sum(c.whole_gpus for c in containers),
        share_milli=milli,
        share_mem_mib=mem,
        allowed_models=parse_allowed_models(annotations.get(ANN_GPU_MODEL)),
        job_class=job_class or UNKNOWN_CLASS,
        prediction=prediction if sharing else None,
        share_containers=booked,
        cpu_milli=cpu,
        host_mem_mib=host_mem,
        predicted_s=predicted_seconds(annotations.get(ANN_PREDICTED_SECONDS)),
    )


def predicted_seconds(value: str | None) -> float | None:
    """The pod's predicted run time from its annotation; None when absent."""
    if value is None or not value.strip():
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidDemand(f"annotation {ANN_PREDICTED_SECONDS} must be a number of seconds"
                            f" > 0, got {value[:40]!r}")
    return seconds


def wants_gpu(pod: Pod) -> bool:
    """True when any container names a resource sparse manages (as IsInterested does)."""
    managed = (RES_WHOLE_GPU, RES_GPU_MILLI, RES_GPU_MEM)
    for container in [*pod.spec.containers, *(pod.spec.initContainers or [])]:
        res = container.resources
        if res is None:
            continue
        for table in (res.requests or {}, res.limits or {}):
            if any(k in table for k in managed):
                return True
    return False
