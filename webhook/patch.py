"""Pure JSONPatch computation for a Pod (no I/O, no aiohttp).

For a pod that requests a sparse resource (``sparse.io/gpu-milli`` / ``sparse.io/gpu-mem``, or
``nvidia.com/gpu`` when ``whole_gpus`` is set), in any container or init container:

* ``spec.schedulerName`` → the sparse scheduler, when it is unset or ``default-scheduler`` (an
  explicit other scheduler is respected);
* every container and init container gets ``NVIDIA_VISIBLE_DEVICES`` from the downward API,
  ``metadata.annotations['sparse.io/gpu-uuids']`` (carried by the extender's Binding, so the
  API server writes it in the same update that binds the pod: the kubelet always sees it).
  A value the user set is replaced: otherwise ``NVIDIA_VISIBLE_DEVICES=all`` (the default of
  CUDA base images) would expose every GPU.
  Before bind the annotation is missing, the env var resolves to "", and the NVIDIA runtime
  exposes no GPU: it fails closed.
* with ``mps``: containers with a fractional request also get ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``
  (gpu-milli / 10, rounded up) and ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` (``0=<gpu-mem>M``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.annotations import ANN_GPU_UUIDS, RES_GPU_MEM, RES_GPU_MILLI, RES_WHOLE_GPU
from extender.errors import SparseError
from extender.quantity import parse_int_quantity

ENV_VISIBLE = "NVIDIA_VISIBLE_DEVICES"
ENV_MPS_THREADS = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
ENV_MPS_MEM = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
DEFAULT_SCHEDULER = "default-scheduler"
MAX_CONTAINERS = 256  # far above any real pod; bounds the work a hostile object can cause


class InvalidPod(SparseError):
    """The admitted object is not a Pod this webhook can reason about."""


@dataclass(frozen=True, slots=True)
class PatchConfig:
    scheduler_name: str = "sparse-scheduler"
    whole_gpus: bool = False  # also capture pods asking only for nvidia.com/gpu
    mps: bool = False
    set_scheduler: bool = True

    @property
    def resources(self) -> tuple[str, ...]:
        base = (RES_GPU_MILLI, RES_GPU_MEM)
        return (*base, RES_WHOLE_GPU) if self.whole_gpus else base


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidPod(f"{where} must be an object, got {type(value).__name__}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidPod(f"{where} must be a list, got {type(value).__name__}")
    if len(value) > MAX_CONTAINERS:
        raise InvalidPod(f"{where} has {len(value)} entries (limit {MAX_CONTAINERS})")
    return value


def _container_resources(c: Mapping[str, Any], where: str) -> dict[str, int]:
    """Sparse resources of one container: limits win, requests fill in (they must be equal)."""
    res = _mapping(c.get("resources"), f"{where}.resources")
    out: dict[str, int] = {}
    for section in ("requests", "limits"):
        for name, value in _mapping(res.get(section), f"{where}.resources.{section}").items():
            if name in (RES_GPU_MILLI, RES_GPU_MEM, RES_WHOLE_GPU):
                try:
                    out[name] = parse_int_quantity(value, name)
                except SparseError as exc:
                    raise InvalidPod(f"{where}.resources.{section}[{name!r}]: {exc}") from exc
    return out


def _containers(spec: Mapping[str, Any]) -> list[tuple[str, int, Mapping[str, Any]]]:
    out = []
    for kind in ("initContainers", "containers"):
        for i, c in enumerate(_list(spec.get(kind), f"spec.{kind}")):
            if not isinstance(c, Mapping):
                raise InvalidPod(f"spec.{kind}[{i}] must be an object")
            out.append((kind, i, c))
    return out


def _env_ops(kind: str, i: int, c: Mapping[str, Any], wanted: list[dict[str, Any]]) -> list[dict]:
    base = f"/spec/{kind}/{i}/env"
    env = _list(c.get("env"), f"spec.{kind}[{i}].env")
    if "env" not in c or c.get("env") is None:
        return [{"op": "add", "path": base, "value": wanted}]
    ops: list[dict[str, Any]] = []
    index = {e.get("name"): j for j, e in enumerate(env) if isinstance(e, Mapping)}
    for var in wanted:
        j = index.get(var["name"])
        if j is None:
            ops.append({"op": "add", "path": f"{base}/-", "value": var})
        elif env[j] != var:
            ops.append({"op": "replace", "path": f"{base}/{j}", "value": var})
    return ops


def visible_devices_env() -> dict[str, Any]:
    return {
        "name": ENV_VISIBLE,
        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{ANN_GPU_UUIDS}']"}},
    }


def mps_env(resources: Mapping[str, int]) -> list[dict[str, Any]]:
    """MPS limits for a fractional (single-GPU) container; none for whole-GPU containers."""
    if resources.get(RES_WHOLE_GPU, 0) > 0:
        return []
    out = []
    milli = resources.get(RES_GPU_MILLI)
    if milli:
        pct = min(100, max(1, -(-milli // 10)))
        out.append({"name": ENV_MPS_THREADS, "value": str(pct)})
    mem = resources.get(RES_GPU_MEM)
    if mem:
        out.append({"name": ENV_MPS_MEM, "value": f"0={mem}M"})
    return out


def compute_patch(pod: Any, config: PatchConfig) -> list[dict[str, Any]]:
    """The JSONPatch (RFC 6902) ops for ``pod``; ``[]`` when the pod asks for no sparse resource.

    Raises :class:`InvalidPod` for objects that are not a well-formed Pod.
    """
    if not isinstance(pod, Mapping):
        raise InvalidPod(f"object must be a Pod object, got {type(pod).__name__}")
    spec = _mapping(pod.get("spec"), "spec")
    containers = _containers(spec)
    per_container = {
        (kind, i): _container_resources(c, f"spec.{kind}[{i}]") for kind, i, c in containers
    }
    if not any(r in res for res in per_container.values() for r in config.resources):
        return []
    ops: list[dict[str, Any]] = []
    if config.set_scheduler:
        current = spec.get("schedulerName")
        if current in (None, "", DEFAULT_SCHEDULER):
            op = "replace" if "schedulerName" in spec else "add"
            ops.append({"op": op, "path": "/spec/schedulerName", "value": config.scheduler_name})
    for kind, i, c in containers:
        wanted = [visible_devices_env()]
        if config.mps:
            wanted += mps_env(per_container[(kind, i)])
        ops += _env_ops(kind, i, c, wanted)
    return ops
