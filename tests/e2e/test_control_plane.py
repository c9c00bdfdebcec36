"""Smoke tests of the local control plane: API up, fake GPU nodes, a real kube-scheduler binds."""

from __future__ import annotations

import json

import cluster as e2e_cluster
import pytest
import tooling

from extender.quantity import parse_int_quantity

pytestmark = pytest.mark.e2e


def test_api_server_reports_pinned_version(cluster: e2e_cluster.LocalCluster) -> None:
    want = "v" + tooling.versions()["K8S_VERSION"].lstrip("v")
    assert cluster.request("GET", "/version")["gitVersion"] == want
    if e2e_cluster.kubectl_path():
        out = cluster.kubectl("get", "--raw=/version").stdout
        assert json.loads(out)["gitVersion"] == want


async def test_fake_gpu_nodes_are_ready_with_gpu_resources(clean_cluster, core) -> None:
    await e2e_cluster.create_gpu_node(core, "smoke-a", gpus=2, model="V100M16", memory_mib=16384)
    clean_cluster.create_gpu_node("smoke-b", gpus=4, model="A100M40", memory_mib=40960)

    a = await core.read_node("smoke-a")
    # The API server canonicalises quantities ("2000" comes back as "2k"): always parse them.
    alloc = {k: parse_int_quantity(v, k) for k, v in a.status.allocatable.items()}
    assert alloc["nvidia.com/gpu"] == 2
    assert alloc["sparse.io/gpu-milli"] == 2000
    assert alloc["sparse.io/gpu-mem"] == 32768
    assert alloc["pods"] == 110
    assert {c.type: c.status for c in a.status.conditions}["Ready"] == "True"
    assert not a.spec.taints  # TaintNodesByCondition is off: no not-ready taint
    inventory = json.loads(a.metadata.annotations["sparse.io/gpu-inventory"])
    assert [g["index"] for g in inventory] == [0, 1]
    assert all(g["uuid"].startswith("GPU-") and g["memory_mib"] == 16384 for g in inventory)

    b = await core.read_node("smoke-b")
    assert parse_int_quantity(b.status.capacity["sparse.io/gpu-mem"], "mem") == 4 * 40960
    assert json.loads(b.metadata.annotations["sparse.io/gpu-inventory"])[3]["model"] == "A100M40"


async def test_plain_scheduler_binds_gpu_pod(clean_cluster, core, plain_scheduler) -> None:
    names = {"smoke-gpu-0", "smoke-gpu-1"}
    for name in sorted(names):
        await e2e_cluster.create_gpu_node(core, name, gpus=1)
    await e2e_cluster.create_pod(core, "smoke-pod", gpus=1)

    node = await e2e_cluster.wait_for_pod_bound(core, "smoke-pod", timeout=60)
    assert node in names

    await e2e_cluster.wait_for_pod_event(core, "smoke-pod", lambda e: e["reason"] == "Scheduled")

    # The second GPU fits on the other node; a third has nowhere to go.
    await e2e_cluster.create_pod(core, "smoke-pod-2", gpus=1)
    node2 = await e2e_cluster.wait_for_pod_bound(core, "smoke-pod-2", timeout=60)
    assert {node, node2} == names
    await e2e_cluster.create_pod(core, "smoke-pod-3", gpus=1)
    with pytest.raises(TimeoutError, match="FailedScheduling"):
        await e2e_cluster.wait_for_pod_bound(core, "smoke-pod-3", timeout=8)

    for pod in ("smoke-pod", "smoke-pod-2", "smoke-pod-3"):
        await e2e_cluster.delete_pod(core, pod)


def test_scheduler_can_be_killed_and_restarted(clean_cluster) -> None:
    first = clean_cluster.start_scheduler(None)
    assert first.alive()
    assert clean_cluster.kill_scheduler() == -9
    second = clean_cluster.restart_scheduler()
    assert second.alive() and second.pid != first.pid
    assert clean_cluster.pids["kube-scheduler"] == second.pid
    assert clean_cluster.stop_scheduler() is not None
    assert "kube-scheduler" not in clean_cluster.pids
