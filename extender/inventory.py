"""GPU inventory: which GPUs (UUID, model, memory) each node has.

Pure: parses already-loaded data (a node-conf mapping, a Node object's annotations); the file
read lives in ``load_node_conf_file``, the only function here that touches the disk.

Two sources feed it:

* the original system's ``node-conf.yaml`` (``nodes: [{name, ip, gpu, gpu-mem, model, uuids,
  network, network_bandwidth_bytes, region}]``, ``gpu-mem`` in GB for the whole node, split
  evenly), extended with an optional per-GPU list ``gpus: [{uuid, model, memory_mib}]`` so a
  node can mix GPU sizes;
* the Node annotation ``sparse.io/gpu-inventory``: a JSON list of
  ``{"uuid", "index", "model", "memory_mib"}``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from extender.annotations import ANN_GPU_INVENTORY
from extender.errors import InvalidInventory

MAX_GPUS_PER_NODE = 64
MAX_GPU_MEMORY_MIB = 16 * 1024 * 1024  # 16 TiB: far above any device, below int overflow


@dataclass(frozen=True, slots=True)
class Gpu:
    uuid: str
    index: int
    model: str
    memory_mib: int


@dataclass(frozen=True, slots=True)
class NodeGpus:
    name: str
    gpus: tuple[Gpu, ...]
    ip: str = ""
    region: str = ""
    network: str = ""
    network_bandwidth_bytes: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Inventory:
    """Immutable set of GPU nodes; replace it wholesale (``with_node``) when a node changes."""

    nodes: Mapping[str, NodeGpus]

    @classmethod
    def of(cls, nodes: Iterable[NodeGpus]) -> Inventory:
        by_name: dict[str, NodeGpus] = {}
        seen: dict[str, str] = {}
        for node in nodes:
            if node.name in by_name:
                raise InvalidInventory(f"node {node.name!r} listed twice")
            for gpu in node.gpus:
                if gpu.uuid in seen:
                    raise InvalidInventory(
                        f"GPU {gpu.uuid} listed on both {seen[gpu.uuid]!r} and {node.name!r}"
                    )
                seen[gpu.uuid] = node.name
            by_name[node.name] = node
        return cls(by_name)

    def with_node(self, node: NodeGpus) -> Inventory:
        nodes = dict(self.nodes)
        nodes[node.name] = node
        return Inventory.of(nodes.values())

    def without_node(self, name: str) -> Inventory:
        return Inventory({k: v for k, v in self.nodes.items() if k != name})

    def gpu_count(self) -> int:
        return sum(len(n.gpus) for n in self.nodes.values())


def _require(entry: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in entry:
        raise InvalidInventory(f"{where}: missing {key!r}")
    return entry[key]


def _int(value: Any, what: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInventory(f"{what}: expected a number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInventory(f"{what}: {value!r} is not a finite number")
    if value != int(value) or not lo <= value <= hi:
        raise InvalidInventory(f"{what}: {value!r} is not an integer in [{lo}, {hi}]")
    return int(value)


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 253:
        raise InvalidInventory(f"{what}: expected a non-empty string, got {value!r}")
    return value


def _gpu_list(entries: Any, where: str, default_model: str | None) -> tuple[Gpu, ...]:
    if not isinstance(entries, list) or len(entries) > MAX_GPUS_PER_NODE:
        raise InvalidInventory(f"{where}: expected a list of at most {MAX_GPUS_PER_NODE} GPUs")
    gpus = []
    for position, entry in enumerate(entries):
        at = f"{where}[{position}]"
        if not isinstance(entry, Mapping):
            raise InvalidInventory(f"{at}: expected an object")
        model = entry.get("model", default_model)
        gpus.append(
            Gpu(
                uuid=_str(_require(entry, "uuid", at), f"{at}.uuid"),
                index=_int(entry.get("index", position), f"{at}.index", 0, 1023),
                model=_str(model, f"{at}.model"),
                memory_mib=_int(
                    _require(entry, "memory_mib", at), f"{at}.memory_mib", 1, MAX_GPU_MEMORY_MIB
                ),
            )
        )
    if len({g.uuid for g in gpus}) != len(gpus):
        raise InvalidInventory(f"{where}: duplicate GPU UUIDs")
    return tuple(gpus)


def node_from_conf(entry: Mapping[str, Any], position: int = 0) -> NodeGpus:
    """One ``nodes[]`` entry of node-conf.yaml."""
    where = f"nodes[{position}]"
    if not isinstance(entry, Mapping):
        raise InvalidInventory(f"{where}: expected a mapping")
    name = _str(_require(entry, "name", where), f"{where}.name")
    where = f"node {name!r}"
    if "gpus" in entry:
        gpus = _gpu_list(entry["gpus"], f"{where}.gpus", entry.get("model"))
    else:
        count = _int(_require(entry, "gpu", where), f"{where}.gpu", 0, MAX_GPUS_PER_NODE)
        uuids = entry.get("uuids") or [f"GPU-{name}-{i}" for i in range(count)]
        if not isinstance(uuids, list) or len(uuids) != count:
            raise InvalidInventory(f"{where}: 'uuids' must list exactly {count} UUIDs")
        model = _str(_require(entry, "model", where), f"{where}.model")
        total_gb = _require(entry, "gpu-mem", where)
        if (isinstance(total_gb, bool) or not isinstance(total_gb, int | float)
                or not 0 <= total_gb <= MAX_GPU_MEMORY_MIB * MAX_GPUS_PER_NODE):
            raise InvalidInventory(f"{where}.gpu-mem: expected GB as a number, got {total_gb!r}")
        per_gpu_mib = int(round(total_gb * 1024 / count)) if count else 0
        gpus = _gpu_list(
            [{"uuid": u, "index": i, "memory_mib": per_gpu_mib} for i, u in enumerate(uuids)],
            where,
            model,
        )
    bandwidth = entry.get("network_bandwidth_bytes", 0) or 0
    return NodeGpus(
        name=name,
        gpus=gpus,
        ip=str(entry.get("ip", "") or ""),
        region=str(entry.get("region", "") or ""),
        network=str(entry.get("network", "") or ""),
        network_bandwidth_bytes=_int(bandwidth, f"{where}.network_bandwidth_bytes", 0, 10**15),
    )


def inventory_from_conf(document: Any) -> Inventory:
    """A parsed node-conf document: either ``{nodes: [...]}`` or a ConfigMap whose
    ``data["config.yaml"]`` holds that (the seed ships it as a ConfigMap)."""
    if isinstance(document, Mapping) and document.get("kind") == "ConfigMap":
        data = document.get("data") or {}
        text = next(iter(data.values()), None) if isinstance(data, Mapping) else None
        if not isinstance(text, str):
            raise InvalidInventory("ConfigMap has no node-conf document in data")
        document = yaml.safe_load(text)
    if not isinstance(document, Mapping) or not isinstance(document.get("nodes"), list):
        raise InvalidInventory("node-conf must be a mapping with a 'nodes' list")
    return Inventory.of(node_from_conf(e, i) for i, e in enumerate(document["nodes"]))


def load_node_conf_file(path: str | Path) -> Inventory:
    try:
        document = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise InvalidInventory(f"cannot read {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise InvalidInventory(f"{path}: not valid YAML: {exc}") from exc
    return inventory_from_conf(document)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def node_from_annotations(
    name: str, annotations: Mapping[str, str] | None, labels: Mapping[str, str] | None = None
) -> NodeGpus | None:
    """The GPUs a Node object declares, or None when it carries no inventory annotation."""
    raw = (annotations or {}).get(ANN_GPU_INVENTORY)
    if raw is None:
        return None
    if len(raw) > 256 * 1024:
        raise InvalidInventory(f"node {name!r}: {ANN_GPU_INVENTORY} is too large")
    try:
        entries = json.loads(raw, parse_constant=_no_constant)
    except RecursionError as exc:
        raise InvalidInventory(f"node {name!r}: {ANN_GPU_INVENTORY} is nested too deeply") from exc
    except ValueError as exc:
        raise InvalidInventory(f"node {name!r}: {ANN_GPU_INVENTORY} is not JSON: {exc}") from exc
    gpus = _gpu_list(entries, f"node {name!r} {ANN_GPU_INVENTORY}", None)
    labels = labels or {}
    return NodeGpus(
        name=name, gpus=gpus, region=labels.get("topology.kubernetes.io/zone", ""), labels=labels
    )


def annotation_value(gpus: Iterable[Gpu]) -> str:
    """Serialise GPUs into the Node annotation format (used by the agent and test fixtures)."""
    return json.dumps(
        [
            {"uuid": g.uuid, "index": g.index, "model": g.model, "memory_mib": g.memory_mib}
            for g in gpus
        ],
        separators=(",", ":"),
    )
