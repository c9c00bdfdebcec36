"""Object builders for tests: pods, nodes and inventories shaped like the real API objects."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from bench.redis_server import free_port as free_port  # where every test takes it from
from extender import protocol
from extender.annotations import ANN_PREDICTED_SECONDS
from extender.inventory import Gpu, Inventory, NodeGpus, annotation_value

if TYPE_CHECKING:
    from extender.service import Scheduler

_uid = itertools.count(1)


def gpu_node(name: str, count: int = 4, model: str = "V100M32", memory_mib: int = 32768,
             gpus: list[Gpu] | None = None) -> NodeGpus:
    gpus = gpus or [Gpu(f"GPU-{name}-{i}", i, model, memory_mib) for i in range(count)]
    return NodeGpus(name=name, gpus=tuple(gpus))


def inventory(*nodes: NodeGpus) -> Inventory:
    return Inventory.of(nodes)


def pod(name: str | None = None, *, containers: list[dict[str, Any]] | None = None,
        mem: int | None = None, milli: int | None = None, gpus: int | None = None,
        job_class: str | None = None, models: str | None = None, uid: str | None = None,
        namespace: str = "ml", use_requests: bool = False,
        predicted_s: float | None = None) -> dict[str, Any]:
    """A Pod as kube-scheduler sends it (camelCase inside, plus the noise real pods carry);
    ``predicted_s``: the job controller's predicted run time (``sparse.io/predicted-seconds``)."""
    n = next(_uid)
    name = name or f"train-{n}"
    if containers is None:
        main = container("main", mem, milli, gpus)
        limits = {"cpu": "2", "memory": "8Gi", **main["resources"]["limits"]}
        main["resources"] = {"requests" if use_requests else "limits": limits}
        containers = [main]
    annotations = {"kubectl.kubernetes.io/last-applied-configuration": "{}"}
    if job_class:
        annotations["sparse.io/job-class"] = job_class
    if models:
        annotations["sparse.io/gpu-model"] = models
    if predicted_s is not None:
        annotations[ANN_PREDICTED_SECONDS] = str(predicted_s)
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name, "namespace": namespace, "uid": uid or f"uid-{name}-{n}",
            "resourceVersion": "1234", "creationTimestamp": "2026-11-30T10:00:00Z",
            "labels": {"app": "train"}, "annotations": annotations,
            "managedFields": [{"manager": "kubectl", "operation": "Update"}],
        },
        "spec": {
            "containers": containers, "restartPolicy": "Never",
            "schedulerName": "sparse-scheduler", "tolerations": [],
            "volumes": [{"name": "data", "emptyDir": {}}],
        },
        "status": {"phase": "Pending", "conditions": []},
    }


def container(name: str, mem: int | None = None, milli: int | None = None,
              gpus: int | None = None) -> dict[str, Any]:
    limits: dict[str, str] = {}
    if mem is not None:
        limits["sparse.io/gpu-mem"] = str(mem)
    if milli is not None:
        limits["sparse.io/gpu-milli"] = str(milli)
    if gpus is not None:
        limits["nvidia.com/gpu"] = str(gpus)
    return {"name": name, "image": "x", "resources": {"limits": limits}}


def node_object(node: NodeGpus, with_inventory: bool = True) -> dict[str, Any]:
    """A full Node object like nodeCacheCapable=false sends (status and images included)."""
    annotations = {"node.alpha.kubernetes.io/ttl": "0",
                   "volumes.kubernetes.io/controller-managed-attach-detach": "true"}
    if with_inventory:
        annotations["sparse.io/gpu-inventory"] = annotation_value(node.gpus)
    capacity = {"cpu": "96", "memory": "792Gi", "pods": "110",
                "nvidia.com/gpu": str(len(node.gpus))}
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": node.name, "uid": f"node-uid-{node.name}", "resourceVersion": "98765",
            "labels": {"kubernetes.io/hostname": node.name, "kubernetes.io/os": "linux",
                       "node.kubernetes.io/instance-type": "gpu.8xlarge",
                       "topology.kubernetes.io/zone": "zone-a"},
            "annotations": annotations,
        },
        "spec": {"podCIDR": "10.244.1.0/24", "providerID": f"fake://{node.name}"},
        "status": {
            "capacity": capacity, "allocatable": capacity,
            "conditions": [
                {"type": t, "status": "False" if t != "Ready" else "True",
                 "lastHeartbeatTime": "2026-11-30T10:00:00Z",
                 "lastTransitionTime": "2026-11-01T10:00:00Z",
                 "reason": f"Kubelet{t}", "message": f"kubelet reports {t}"}
                for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
            ],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"},
                          {"type": "Hostname", "address": node.name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"kubeletVersion": "v1.36.3", "containerRuntimeVersion": "containerd://2.1",
                         "kernelVersion": "6.8.0", "osImage": "Ubuntu 24.04",
                         "architecture": "amd64", "operatingSystem": "linux",
                         "machineID": "m", "systemUUID": "s", "bootID": "b",
                         "kubeProxyVersion": "v1.36.3"},
            "images": [
                {"names": [f"registry.example.com/team/image-{i}@sha256:{'a' * 64}",
                           f"registry.example.com/team/image-{i}:v{i}"],
                 "sizeBytes": 1_000_000 + i}
                for i in range(30)
            ],
        },
    }


def mixed_inventory() -> Inventory:
    """Five nodes a, b, c, d, e of different GPU counts, models and memory."""
    return inventory(gpu_node("a", 4), gpu_node("b", 2, model="A100-80GB", memory_mib=81920),
                     gpu_node("c", 8, memory_mib=16384), gpu_node("d", 1), gpu_node("e", 4))


def filter_args(p: dict[str, Any], names: Iterable[str]) -> protocol.ExtenderArgs:
    """kube-scheduler's filter (or prioritize) request for pod ``p`` over node ``names``."""
    return protocol.decode_extender_args(json.dumps({"Pod": p, "NodeNames": list(names)})
                                         .encode())


def bind_request(p: dict[str, Any], node: str) -> dict[str, str]:
    """kube-scheduler's bind request body for pod ``p`` (namespace ml) on ``node``."""
    return {"PodName": p["metadata"]["name"], "PodNamespace": "ml",
            "PodUID": p["metadata"]["uid"], "Node": node}


def bind_args(p: dict[str, Any], node: str) -> protocol.BindingArgs:
    """:func:`bind_request`, decoded as the bind verb receives it."""
    return protocol.decode_binding_args(json.dumps(bind_request(p, node)).encode())


async def bind_pod(s: Scheduler, p: dict[str, Any], node: str) -> None:
    """Bind pod ``p`` (namespace ml) to ``node`` through the scheduler's bind verb."""
    assert (await s.bind(bind_args(p, node))).Error == ""


async def place_pod(s: Scheduler, p: dict[str, Any], node: str) -> str:
    """Filter pod ``p`` onto ``node`` (it must fit there) and bind it; returns its UID."""
    assert (await s.filter(filter_args(p, [node]))).NodeNames == [node]
    await bind_pod(s, p, node)
    return p["metadata"]["uid"]


async def random_bind_or_release(rng: Any, twins: Iterable[Scheduler], p: dict[str, Any],
                                  answer: list[str], bound: list[dict[str, Any]]) -> None:
    """One random step of the tests that drive twin schedulers alike: 60 % of the time bind
    ``p`` on every twin to one node of ``answer`` (kube-scheduler's pick among them), then
    25 % of the time release one bound pod on every twin."""
    twins = list(twins)
    if answer and rng.random() < 0.6:
        node = rng.choice(answer)
        for s in twins:
            await bind_pod(s, p, node)
        bound.append(p)
    if bound and rng.random() < 0.25:
        gone = bound.pop(rng.randrange(len(bound)))
        for s in twins:
            await s.release(gone["metadata"]["uid"])


def without_node_verdicts(s: Scheduler) -> Scheduler:
    """``s`` with filter's per-node verdicts off: fit and node_costs on every call (the
    reference the verdicts are compared with)."""
    s.node_verdicts.fits = lambda *a, **k: None  # type: ignore[method-assign]
    return s


def cycle_costs(s: Scheduler, uid: str) -> list[float] | None:
    """The costs filter kept for pod ``uid``'s prioritize, or None."""
    entry = s.cycle_costs._by_uid.get(uid)
    return None if entry is None else entry[1].costs.tolist()


async def filter_alike(cached: Scheduler, plain: Scheduler, p: dict[str, Any],
                       names: Iterable[str], step: int) -> protocol.FilterResult:
    """Filter ``p`` on both schedulers and check they answer alike, down to the costs kept
    for prioritize; ``cached``'s answer."""
    names = list(names)
    a = await cached.filter(filter_args(p, names))
    b = await plain.filter(filter_args(p, names))
    assert protocol.encode(a) == protocol.encode(b), step
    uid = p["metadata"]["uid"]
    assert cycle_costs(cached, uid) == cycle_costs(plain, uid), step
    return a


def random_book_or_release(rng: Any, state: Any, demand: Any, fitting: list[str],
                           policy: Any, booked: list[str]) -> None:
    """One random step of the tests that drive a ``ClusterState`` directly: 30 % of the time
    (when something is booked) release one booked pod, else book ``demand`` on one node of
    ``fitting`` as ``assign`` places it there (pod UIDs kept in ``booked``)."""
    from extender.placement import assign, reservation_for

    if booked and rng.random() < 0.3:
        state.unapply(booked.pop(rng.randrange(len(booked))))
    elif fitting:
        choice = assign(state, demand, rng.choice(fitting), policy)
        assert choice is not None
        r = reservation_for(demand, choice, state, 0.0, None)
        state.apply(r)
        booked.append(r.pod_uid)


async def post_verb(client: Any, verb: str, payload: dict[str, Any]) -> Any:
    """POST ``payload`` to the test client's ``/scheduler/<verb>``; the answer must be a 200."""
    resp = await client.post(f"/scheduler/{verb}", data=json.dumps(payload).encode(),
                             headers={"Content-Type": "application/json"})
    assert resp.status == 200, await resp.text()
    return await resp.json()
