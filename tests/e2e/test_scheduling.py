"""The real kube-scheduler schedules through the real extender on a real API server."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import cluster as e2e_cluster
import pytest
from extender_proc import Extender

from extender.quantity import parse_int_quantity

pytestmark = pytest.mark.e2e


async def wait_nodes(ext: Extender, names: list[str], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while True:
        known = {n["name"] for n in ext.inspect()["nodes"]}
        if set(names) <= known:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"extender never saw nodes {set(names) - known}")
        await asyncio.sleep(0.2)


async def wait_released(ext: Extender, pod: str, timeout: float = 20) -> None:
    """Until no GPU in the extender's ledger holds ``pod`` (its delete was seen)."""
    deadline = time.monotonic() + timeout
    while any(p["pod"] == pod for n in ext.inspect()["nodes"] for g in n["gpus"]
              for p in g["pods"]):
        if time.monotonic() > deadline:
            raise TimeoutError(f"extender still holds {pod}")
        await asyncio.sleep(0.2)


def make_nodes(cluster: e2e_cluster.LocalCluster, prefix: str, n: int, **kw: Any) -> list[str]:
    return cluster.create_gpu_nodes(n, prefix=prefix, **kw)


async def bound_pods(core: Any, namespace: str = "default") -> list[Any]:
    pods = (await core.list_namespaced_pod(namespace)).items
    return [p for p in pods if p.spec.node_name]


def assignment(pod: Any) -> dict[str, Any]:
    return json.loads(pod.metadata.annotations["sparse.io/assignment"])


def booked_per_gpu(pods: list[Any]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for p in pods:
        for c in assignment(p)["containers"]:
            for g in c["gpus"]:
                acc = out.setdefault(g["uuid"], [0, 0])
                acc[0] += g["mem_mib"]
                acc[1] += g["milli"]
    return out


def ledger_per_gpu(ext: Extender) -> dict[str, list[int]]:
    out = {}
    for node in ext.inspect()["nodes"]:
        for g in node["gpus"]:
            if g["memory_reserved_mib"] or g["milli_reserved"]:
                out[g["uuid"]] = [g["memory_reserved_mib"], g["milli_reserved"]]
    return out


def capacity(cluster: e2e_cluster.LocalCluster) -> dict[str, int]:
    caps = {}
    for node in cluster.request("GET", "/api/v1/nodes")["items"]:
        inv = json.loads(node["metadata"]["annotations"]["sparse.io/gpu-inventory"])
        caps.update({g["uuid"]: g["memory_mib"] for g in inv})
    return caps


def assert_within_capacity(cluster: e2e_cluster.LocalCluster, per_gpu: dict[str, list[int]]):
    caps = capacity(cluster)
    for uuid, (mem, milli) in per_gpu.items():
        assert uuid in caps, f"{uuid} is not a GPU of any node"
        assert mem <= caps[uuid] and milli <= 1000, (uuid, mem, milli, caps[uuid])


async def wait_all_bound(core: Any, names: list[str], timeout: float = 60) -> dict[str, str]:
    return dict(zip(names, await asyncio.gather(*(
        e2e_cluster.wait_for_pod_bound(core, n, timeout=timeout) for n in names)), strict=True))


async def test_fractional_pods_pack_by_uuid_within_capacity(cluster, core, extender):
    nodes = make_nodes(cluster, "frac-", 2, gpus=2, memory_mib=16384)
    await wait_nodes(extender, nodes)
    names = [f"frac-pod-{i}" for i in range(8)]
    for n in names:  # 6000 MiB each: two per 16 GiB GPU, eight fill the four GPUs
        await e2e_cluster.create_pod(core, n, milli=300, mem_mib=6000)
    placed = await wait_all_bound(core, names)
    await e2e_cluster.create_pod(core, "frac-extra", milli=300, mem_mib=6000)
    await asyncio.sleep(3)
    extra = await core.read_namespaced_pod("frac-extra", "default")
    assert not extra.spec.node_name, "a ninth 6000 MiB share cannot fit on four 16 GiB GPUs"
    pods = [p for p in await bound_pods(core) if p.metadata.name in names]
    for p in pods:
        uuids = p.metadata.annotations["sparse.io/gpu-uuids"].split(",")
        node_inv = json.loads(cluster.request("GET", f"/api/v1/nodes/{placed[p.metadata.name]}")
                              ["metadata"]["annotations"]["sparse.io/gpu-inventory"])
        assert len(uuids) == 1 and uuids[0] in {g["uuid"] for g in node_inv}
        limits = p.spec.containers[0].resources.limits
        assert parse_int_quantity(limits["sparse.io/gpu-mem"], "mem") == 6000
    per_gpu = booked_per_gpu(pods)
    assert len(per_gpu) == 4 and all(v == [12000, 600] for v in per_gpu.values())
    assert_within_capacity(cluster, per_gpu)
    assert ledger_per_gpu(extender) == per_gpu


async def test_multi_gpu_and_multi_container(cluster, core, extender):
    nodes = make_nodes(cluster, "multi-", 1, gpus=4, memory_mib=32768, model="V100M32")
    await wait_nodes(extender, nodes)
    await e2e_cluster.create_pod(core, "two-gpus", gpus=2)
    manifest = e2e_cluster.gpu_pod_manifest("two-containers")
    manifest["spec"]["containers"] = [
        {"name": "trainer", "image": "pause",
         "resources": {"limits": {"sparse.io/gpu-mem": "2000", "sparse.io/gpu-milli": "100"}}},
        {"name": "sidecar", "image": "pause",
         "resources": {"limits": {"sparse.io/gpu-mem": "3000", "sparse.io/gpu-milli": "200"}}},
        {"name": "logger", "image": "pause"},
    ]
    await core.create_namespaced_pod("default", manifest)
    await wait_all_bound(core, ["two-gpus", "two-containers"])
    pods = {p.metadata.name: p for p in await bound_pods(core)}
    whole = pods["two-gpus"].metadata.annotations["sparse.io/gpu-uuids"].split(",")
    assert len(whole) == 2 and len(set(whole)) == 2
    detail = assignment(pods["two-containers"])
    per_container = {c["name"]: c["gpus"] for c in detail["containers"]}
    assert set(per_container) == {"trainer", "sidecar"}
    assert per_container["trainer"][0]["mem_mib"] == 2000
    assert per_container["sidecar"][0]["milli"] == 200
    shared = per_container["trainer"][0]["uuid"]
    assert shared == per_container["sidecar"][0]["uuid"] and shared not in whole
    ledger = ledger_per_gpu(extender)
    assert ledger[shared] == [5000, 300]
    assert all(ledger[u] == [32768, 1000] for u in whole)


async def test_gpu_model_constraint(cluster, core, extender):
    v100 = make_nodes(cluster, "v100-", 2, gpus=2, model="V100M16", memory_mib=16384)
    a100 = make_nodes(cluster, "a100-", 1, gpus=1, model="A100-80GB", memory_mib=81920)
    await wait_nodes(extender, v100 + a100)
    names = [f"model-pod-{i}" for i in range(3)]
    for n in names:
        await e2e_cluster.create_pod(core, n, milli=200, mem_mib=4000,
                                     annotations={"sparse.io/gpu-model": "A100-80GB|H100"})
    placed = await wait_all_bound(core, names)
    assert set(placed.values()) == {"a100-0"}
    await e2e_cluster.create_pod(core, "v100-only", milli=200, mem_mib=4000,
                                 annotations={"sparse.io/gpu-model": "V100M16"})
    assert (await wait_all_bound(core, ["v100-only"]))["v100-only"].startswith("v100-")


async def assert_recommendation_pods_avoid_resnet50(cluster, core, extender) -> None:
    """Two one-GPU nodes, ResNet-50 on one and ResNet-18 on the other: three recommendation
    pods in turn all join the ResNet-18 GPU (the co-runner that slows them least)."""
    nodes = make_nodes(cluster, "pair-", 2, gpus=1, memory_mib=32768, model="V100M32")
    await wait_nodes(extender, nodes)
    for name, node, cls in (("resnet50", "pair-0", "cnn"), ("resnet18", "pair-1", "cnn-small")):
        manifest = e2e_cluster.gpu_pod_manifest(
            name, milli=400, mem_mib=8000, annotations={"sparse.io/job-class": cls})
        manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        await core.create_namespaced_pod("default", manifest)
    await wait_all_bound(core, ["resnet50", "resnet18"])
    for i in range(3):
        name = f"rec-{i}"
        await e2e_cluster.create_pod(core, name, milli=100, mem_mib=2000,
                                     annotations={"sparse.io/job-class": "recommendation"})
        placed = await wait_all_bound(core, [name])
        assert placed[name] == "pair-1", "recommendation pod joined the ResNet-50 GPU"
        # Keep both GPUs equally free for the next: wait until the extender has released it.
        await e2e_cluster.delete_pod(core, name)
        await wait_released(extender, f"default/{name}")


async def test_prioritize_avoids_bad_co_runner(cluster, core, extender):
    await assert_recommendation_pods_avoid_resnet50(cluster, core, extender)


async def test_unplaceable_pod_stays_pending_with_reason(cluster, core, extender):
    nodes = make_nodes(cluster, "small-", 1, gpus=2, memory_mib=16384)
    await wait_nodes(extender, nodes)
    await e2e_cluster.create_pod(core, "too-big", milli=100, mem_mib=40000)
    failed = await e2e_cluster.wait_for_pod_event(
        core, "too-big", lambda e: e["reason"] == "FailedScheduling")
    message = failed["message"]
    assert "GPU size: needs 40000 MiB on one GPU" in message, message
    pod = await core.read_namespaced_pod("too-big", "default")
    assert not pod.spec.node_name and pod.status.phase == "Pending"


async def test_kill_9_mid_scheduling_rebuilds_ledger(cluster, core, extender):
    nodes = make_nodes(cluster, "crash-", 3, gpus=2, memory_mib=16384)
    await wait_nodes(extender, nodes)
    names = [f"crash-pod-{i}" for i in range(24)]  # 4000 MiB each: 4 per GPU, 24 fill all
    creating = asyncio.gather(*(e2e_cluster.create_pod(core, n, milli=200, mem_mib=4000)
                                for n in names))
    await asyncio.sleep(1.0)
    extender.kill9()
    await creating
    await asyncio.sleep(2)
    extender.start()
    await wait_all_bound(core, names, timeout=120)
    pods = [p for p in await bound_pods(core) if p.metadata.name in names]
    per_gpu = booked_per_gpu(pods)
    assert_within_capacity(cluster, per_gpu)
    assert sum(v[0] for v in per_gpu.values()) == 24 * 4000
    assert ledger_per_gpu(extender) == per_gpu
    for n in names:
        await e2e_cluster.delete_pod(core, n)
    deadline = time.monotonic() + 20
    while ledger_per_gpu(extender) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert ledger_per_gpu(extender) == {}, "deleting pods must free their GPUs"


async def test_two_replicas_sharing_redis_never_overcommit(cluster, core, tmp_path,
                                                            redis_url):
    cluster.reset()
    first = Extender(tmp_path, cluster.kubeconfig, store=redis_url, name="replica-a").start()
    second = Extender(tmp_path, cluster.kubeconfig, store=redis_url, name="replica-b").start()
    try:
        nodes = make_nodes(cluster, "ha-", 2, gpus=2, memory_mib=16384)
        await wait_nodes(first, nodes)
        await wait_nodes(second, nodes)
        names = []
        # Four 16 GiB GPUs hold exactly 16 shares of 4000 MiB; fill them in three rounds,
        # the scheduler pointed at one replica, then the other, then the first again.
        for round_, (ext, size) in enumerate(((first, 5), (second, 5), (first, 6))):
            cluster.start_scheduler(ext.url)
            batch = [f"ha-{round_}-{i}" for i in range(size)]
            names += batch
            await asyncio.gather(*(e2e_cluster.create_pod(core, n, milli=150, mem_mib=4000)
                                   for n in batch))
            await wait_all_bound(core, batch, timeout=60)
            cluster.stop_scheduler()
        pods = [p for p in await bound_pods(core) if p.metadata.name in names]
        per_gpu = booked_per_gpu(pods)
        assert len(pods) == 16
        assert_within_capacity(cluster, per_gpu)
        assert ledger_per_gpu(first) == per_gpu == ledger_per_gpu(second)
        # Full: two more must wait, whichever replica is asked.
        cluster.start_scheduler(second.url)
        await asyncio.gather(*(e2e_cluster.create_pod(core, f"ha-over-{i}", milli=150,
                                                      mem_mib=4000) for i in range(2)))
        await asyncio.sleep(4)
        over = [p for p in await bound_pods(core) if p.metadata.name.startswith("ha-over")]
        assert over == []
    finally:
        cluster.stop_scheduler()
        first.stop()
        second.stop()


async def test_restart_reports_rebuilt_bookings_before_any_request(cluster, core, extender):
    """The rebuild from the API server reaches the cached view: the start-up log and the
    reservation gauge give the real count before the first scheduling request."""
    nodes = make_nodes(cluster, "rebuild-", 2, gpus=2, memory_mib=16384)
    await wait_nodes(extender, nodes)
    names = [f"rebuild-pod-{i}" for i in range(6)]
    await asyncio.gather(*(e2e_cluster.create_pod(core, n, milli=200, mem_mib=4000)
                           for n in names))
    await wait_all_bound(core, names, timeout=60)
    cluster.stop_scheduler()  # no request may reach the restarted extender
    try:
        extender.kill9()
        extender.start()
        log = extender.log_path.read_text(errors="replace")
        ready = [line for line in log.splitlines() if "kubernetes ready" in line]
        assert ready and ready[-1].rstrip().endswith(f"{len(names)} reservations"), ready
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{extender.port}/metrics",
                                    timeout=10) as r:
            metrics = r.read().decode()
        assert f'sparse_ledger_reservations{{state="bound"}} {len(names)}.0' in metrics
    finally:
        cluster.start_scheduler(extender.url)
        for n in names:
            await e2e_cluster.delete_pod(core, n)


@pytest.mark.parametrize("single", [False, True], ids=["best-nodes", "one-node"])
async def test_filter_only_config_still_avoids_the_bad_co_runner(cluster, core, tmp_path,
                                                                 single):
    """No prioritizeVerb (the chart's extender.filterBest): filter answers only the best
    node(s), so the co-runner choice prioritize made above is made by filter alone; with
    ``single`` one node, and kube-scheduler skips its own scoring."""
    cluster.reset()
    extra = ("--filter-best-within", "0", *(("--filter-best-single",) if single else ()))
    ext = Extender(tmp_path, cluster.kubeconfig, extra=extra).start()
    extenders = e2e_cluster.render_scheduler_config(ext.url, cluster.kubeconfig)["extenders"]
    for e in extenders:
        del e["prioritizeVerb"]
    cluster.start_scheduler(ext.url, overrides={"extenders": extenders})
    try:
        await assert_recommendation_pods_avoid_resnet50(cluster, core, ext)
        cfg = cluster.scheduler_config_path.read_text()
        assert "prioritizeVerb" not in cfg and "filterVerb" in cfg
    finally:
        cluster.stop_scheduler()
        ext.stop()
