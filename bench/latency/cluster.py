"""A synthetic cluster at a chosen occupancy, and realistic requests against it."""

from __future__ import annotations

import json
import random
from typing import Any

from extender.inventory import Gpu, Inventory, NodeGpus, annotation_value
from extender.ledger.rules import STATE_BOUND, Allocation, Reservation

MODELS = [("V100M16", 16384), ("V100M32", 32768), ("A100-40GB", 40960), ("A100-80GB", 81920)]
CLASSES = ["recommendation", "cnn", "cnn-small", "transformer", "rnn", "rl", "gan"]


def synthetic_inventory(nodes: int, gpus_per_node: int, seed: int = 1) -> Inventory:
    rng = random.Random(seed)
    out = []
    for n in range(nodes):
        model, mem = rng.choice(MODELS)
        name = f"gpu-node-{n:05d}"
        out.append(NodeGpus(name, tuple(Gpu(f"GPU-{n:05d}-{i}", i, model, mem)
                                        for i in range(gpus_per_node))))
    return Inventory.of(out)


def half_occupancy(inventory: Inventory, occupancy: float = 0.5, seed: int = 2
                   ) -> list[Reservation]:
    """Book about ``occupancy`` of every GPU's memory with shares of random classes."""
    rng = random.Random(seed)
    reservations = []
    k = 0
    for node in inventory.nodes.values():
        for gpu in node.gpus:
            left = gpu.memory_mib * occupancy
            milli_left = 1000 * occupancy
            while left > 1024 and milli_left >= 50:
                mem = min(int(left), rng.choice([2048, 4096, 8192]))
                milli = min(int(milli_left), rng.choice([100, 200, 300]))
                k += 1
                reservations.append(Reservation(
                    pod_uid=f"resident-{k}", namespace="bench", name=f"resident-{k}",
                    node=node.name, allocations=(Allocation(gpu.uuid, "main", mem, milli),),
                    job_class=rng.choice(CLASSES), state=STATE_BOUND))
                left -= mem
                milli_left -= milli
    return reservations


def pod(i: int, rng: random.Random) -> dict[str, Any]:
    limits = {"cpu": "4", "memory": "16Gi", "sparse.io/gpu-mem": str(rng.choice([2048, 4096])),
              "sparse.io/gpu-milli": str(rng.choice([100, 200, 300]))}
    return {
        "metadata": {"name": f"bench-{i}", "namespace": "bench", "uid": f"bench-uid-{i}",
                     "annotations": {"sparse.io/job-class": rng.choice(CLASSES)},
                     "labels": {"app": "bench"}},
        "spec": {"containers": [{"name": "main", "image": "pytorch:2.3",
                                 "resources": {"limits": limits, "requests": limits}}],
                 "schedulerName": "sparse-scheduler"},
        "status": {"phase": "Pending"},
    }


def node_object(node: NodeGpus) -> dict[str, Any]:
    """A full Node object of realistic size (~10 KiB: conditions, addresses, 30 images)."""
    capacity = {"cpu": "96", "memory": "792Gi", "pods": "110",
                "nvidia.com/gpu": str(len(node.gpus))}
    return {
        "metadata": {"name": node.name, "uid": f"uid-{node.name}", "resourceVersion": "1",
                     "labels": {"kubernetes.io/hostname": node.name,
                                "topology.kubernetes.io/zone": "zone-a"},
                     "annotations": {"sparse.io/gpu-inventory": annotation_value(node.gpus)}},
        "spec": {"podCIDR": "10.244.0.0/24"},
        "status": {
            "capacity": capacity, "allocatable": capacity,
            "conditions": [{"type": t, "status": "False", "reason": f"Kubelet{t}",
                            "message": f"kubelet has no {t}",
                            "lastHeartbeatTime": "2026-11-30T10:00:00Z"}
                           for t in ("MemoryPressure", "DiskPressure", "PIDPressure")],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "nodeInfo": {"kubeletVersion": "v1.36.3", "osImage": "Ubuntu 24.04"},
            "images": [{"names": [f"registry.example.com/team/image-{i}@sha256:{'a' * 64}",
                                  f"registry.example.com/team/image-{i}:v{i}"],
                        "sizeBytes": 1_000_000 + i} for i in range(30)],
        },
    }


def request_bodies(inventory: Inventory, count: int, candidates: int, full_nodes: bool,
                   seed: int = 3, shapes: list[tuple[str, ...]] | None = None,
                   burst: bool = False) -> list[bytes]:
    """``shapes``: a list given here gets each body's ``shape_of``. ``burst``: replicas of
    one pod shape, each offered the next window of nodes in order, as kube-scheduler offers
    a burst (its search starts where the previous pod's stopped); else random shapes, each
    offered a random sample of the nodes."""
    rng = random.Random(seed)
    names = sorted(inventory.nodes)
    objects = ({n: json.dumps(node_object(inventory.nodes[n])) for n in names}
               if full_nodes else {})
    bodies = []
    replica = pod(0, rng)
    around = names + names  # a window that runs past the last node goes on from the first
    for i in range(count):
        if burst:
            start = i * candidates % len(names)
            chosen = around[start:start + candidates]
            body_pod = json.loads(json.dumps(replica))
            body_pod["metadata"].update(name=f"bench-{i}", uid=f"bench-uid-{i}")
        else:
            chosen = rng.sample(names, candidates)
            body_pod = pod(i, rng)
        if shapes is not None:
            shapes.append(shape_of(body_pod))
        pod_json = json.dumps(body_pod)
        if full_nodes:
            items = ",".join(objects[n] for n in chosen)
            body = f'{{"Pod":{pod_json},"Nodes":{{"items":[{items}]}},"NodeNames":null}}'
        else:
            body = f'{{"Pod":{pod_json},"Nodes":null,"NodeNames":{json.dumps(chosen)}}}'
        bodies.append(body.encode())
    return bodies


def shape_of(pod: dict[str, Any]) -> tuple[str, ...]:
    """What the extender prices a pod by (its class and GPU request): the first pod of each
    shape prices every node, the others read what it priced."""
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    return (pod["metadata"]["annotations"]["sparse.io/job-class"],
            limits["sparse.io/gpu-mem"], limits["sparse.io/gpu-milli"])
