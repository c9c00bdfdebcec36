"""Pure logic of the node agent: GPU records → Node annotation and Node status patches.

Nothing here touches NVML, the network or the clock, so every rule is unit-testable.
"""

from __future__ import annotations

import re
import uuid as uuidlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from extender.annotations import (
    ANN_GPU_INVENTORY,
    RES_GPU_MEM,
    RES_GPU_MILLI,
    RES_WHOLE_GPU,
)
from extender.errors import SparseError
from extender.inventory import Gpu, annotation_value
from extender.quantity import parse_int_quantity

MILLI_PER_GPU = 1000


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """One physical GPU as the agent sees it (a superset of the inventory's ``Gpu``)."""

    uuid: str
    index: int
    name: str  # raw NVML product name, e.g. "Tesla V100-SXM2-16GB"
    memory_mib: int
    mig_enabled: bool = False

    @property
    def model(self) -> str:
        return canonical_model(self.name, self.memory_mib)


@dataclass(frozen=True, slots=True)
class Sample:
    """Live use of one GPU at one instant."""

    uuid: str
    utilization_pct: float  # SM busy, 0..100
    memory_used_mib: float
    memory_total_mib: float


# (pattern on the normalised NVML name, memory threshold MiB or 0, catalogue name). Names follow
# predictor/gpus.py and the extender's sparse.io/gpu-model values ("V100M16", "A100M80", ...).
_MODEL_RULES: tuple[tuple[str, int, str, str], ...] = (
    (r"V100", 24 * 1024, "V100M32", "V100M16"),
    (r"A100", 60 * 1024, "A100M80", "A100"),
    (r"H100", 0, "H100", "H100"),
    (r"A10(?!0)", 0, "A10", "A10"),
    (r"T4", 0, "T4", "T4"),
    (r"P100", 0, "P100", "P100"),
    (r"K80", 0, "K80", "K80"),
    (r"1080TI", 0, "GTX1080Ti", "GTX1080Ti"),
    (r"3090", 0, "RTX3090", "RTX3090"),
)
KNOWN_MODELS = frozenset(m for rule in _MODEL_RULES for m in rule[2:])


def canonical_model(name: str, memory_mib: int) -> str:
    """Map an NVML product name to the model names the scheduler and predictor use.

    Known families get the catalogue name (memory picks the V100/A100 variant); anything else
    becomes the product name with non-alphanumerics removed ("NVIDIA L4" → "NVIDIAL4"), which is
    still a valid, stable ``sparse.io/gpu-model`` value.
    """
    if name in KNOWN_MODELS:  # already a catalogue name (fake mode, tests)
        return name
    norm = re.sub(r"[^A-Z0-9]", "", name.upper())
    for pattern, threshold, big, small in _MODEL_RULES:
        if re.search(pattern, norm):
            return big if threshold and memory_mib >= threshold else small
    return norm or "UNKNOWN"


def fake_devices(node: str, count: int, *, model: str, memory_mib: int) -> list[DeviceInfo]:
    """Deterministic fake GPUs: UUIDs are stable per (node, index), so restarts change nothing.

    The UUID scheme matches tests/e2e/cluster.py's ``gpu_inventory`` (``sparse-e2e/`` prefix
    replaced by ``sparse-fake/``) and stays a syntactically valid ``GPU-<uuid>``.
    """
    if count < 0 or count > 64:
        raise ValueError(f"--fake-gpus must be 0..64, got {count}")
    if memory_mib <= 0:
        raise ValueError(f"--fake-memory-mib must be positive, got {memory_mib}")
    return [
        DeviceInfo(
            uuid=f"GPU-{uuidlib.uuid5(uuidlib.NAMESPACE_URL, f'sparse-fake/{node}/{i}')}",
            index=i,
            name=model,
            memory_mib=memory_mib,
        )
        for i in range(count)
    ]


def shareable(devices: Iterable[DeviceInfo]) -> list[DeviceInfo]:
    """GPUs the scheduler may share: MIG-enabled GPUs are left out (their slices are handed
    out by the NVIDIA device plugin, and a whole-GPU UUID on a MIG GPU runs nothing)."""
    return sorted((d for d in devices if not d.mig_enabled), key=lambda d: d.index)


def inventory(devices: Sequence[DeviceInfo]) -> list[Gpu]:
    return [Gpu(uuid=d.uuid, index=d.index, model=d.model, memory_mib=d.memory_mib)
            for d in shareable(devices)]


def extended_resources(devices: Sequence[DeviceInfo], *, whole_gpus: bool) -> dict[str, str]:
    """Node-level extended resources: gpu-milli = 1000 × GPUs, gpu-mem = total MiB.

    ``nvidia.com/gpu`` is included only with ``whole_gpus`` (normally the NVIDIA device plugin
    owns it, and overwriting it would fight the kubelet).
    """
    gpus = shareable(devices)
    out = {
        RES_GPU_MILLI: str(MILLI_PER_GPU * len(gpus)),
        RES_GPU_MEM: str(sum(d.memory_mib for d in gpus)),
    }
    if whole_gpus:
        out[RES_WHOLE_GPU] = str(len(gpus))
    return out


def annotation_patch(devices: Sequence[DeviceInfo]) -> dict[str, Any]:
    """Merge patch for the Node object (metadata): the inventory annotation."""
    return {"metadata": {"annotations": {ANN_GPU_INVENTORY: annotation_value(inventory(devices))}}}


def status_patch(devices: Sequence[DeviceInfo], *, whole_gpus: bool) -> dict[str, Any]:
    """Merge patch for nodes/status: capacity and allocatable of the extended resources.

    Allocatable is set too: a kubelet copies capacity into allocatable for resources it does not
    manage, but a fake node (no kubelet) would otherwise never get it.
    """
    res = extended_resources(devices, whole_gpus=whole_gpus)
    return {"status": {"capacity": dict(res), "allocatable": dict(res)}}


def needs_update(
    node_annotations: Mapping[str, str] | None,
    node_capacity: Mapping[str, str] | None,
    node_allocatable: Mapping[str, str] | None,
    devices: Sequence[DeviceInfo],
    *,
    whole_gpus: bool,
) -> tuple[bool, bool]:
    """(annotation differs, status differs) between the Node as read and what we would write."""
    want_ann = annotation_patch(devices)["metadata"]["annotations"][ANN_GPU_INVENTORY]
    ann_stale = (node_annotations or {}).get(ANN_GPU_INVENTORY) != want_ann
    want = extended_resources(devices, whole_gpus=whole_gpus)
    cap, alloc = node_capacity or {}, node_allocatable or {}
    status_stale = any(
        not _same_quantity(cap.get(k), v) or not _same_quantity(alloc.get(k), v)
        for k, v in want.items()
    )
    return ann_stale, status_stale


def _same_quantity(have: Any, want: str) -> bool:
    """The API server canonicalises quantities ("4000" comes back as "4k"): compare values."""
    if have is None:
        return False
    try:
        return parse_int_quantity(have, "node status") == int(want)
    except SparseError:
        return False
