"""A request that forges a node's GPU inventory, sent straight to the extender next to the
real kube-scheduler, changes nothing: the inventory stays what the Node objects on the API
server say, and a pod that only the forged GPUs could hold stays pending."""

from __future__ import annotations

import json
import urllib.request

import cluster as e2e_cluster
import pytest
from test_scheduling import make_nodes, wait_nodes

pytestmark = pytest.mark.e2e

TIB_MIB = 1024 * 1024


def forged_filter(node: str) -> bytes:
    forged = json.dumps([{"uuid": "GPU-forged", "index": 0, "model": "H100",
                          "memory_mib": 16 * TIB_MIB}])
    pod = {"metadata": {"name": "forger", "namespace": "default", "uid": "forger-uid"},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {
               "sparse.io/gpu-mem": str(TIB_MIB), "sparse.io/gpu-milli": "100"}}}]}}
    return json.dumps({"Pod": pod, "Nodes": {"items": [{"metadata": {
        "name": node, "annotations": {"sparse.io/gpu-inventory": forged}}}]}}).encode()


def gpus_of(view: dict, node: str) -> list[tuple[str, int]]:
    (entry,) = [n for n in view["nodes"] if n["name"] == node]
    return [(g["uuid"], g["memory_mib"]) for g in entry["gpus"]]


async def test_forged_inventory_request_is_ignored(cluster, core, extender):
    (node,) = make_nodes(cluster, "trust-", 1, gpus=2, memory_mib=16384)
    await wait_nodes(extender, [node])
    before = gpus_of(extender.inspect(), node)
    request = urllib.request.Request(f"{extender.url}/filter", data=forged_filter(node),
                                      headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        answer = json.loads(resp.read())
    assert resp.status == 200 and answer["Nodes"]["items"] == []
    assert gpus_of(extender.inspect(), node) == before == [
        (uuid, 16384) for uuid, _ in before]
    await e2e_cluster.create_pod(core, "tib-share", milli=100, mem_mib=TIB_MIB)
    failed = await e2e_cluster.wait_for_pod_event(
        core, "tib-share", lambda e: e["reason"] == "FailedScheduling")
    assert "GPU size: needs 1048576 MiB on one GPU" in failed["message"], failed["message"]
    await e2e_cluster.create_pod(core, "normal", milli=100, mem_mib=1024)
    assert await e2e_cluster.wait_for_pod_bound(core, "normal") == node
