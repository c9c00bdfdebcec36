"""The throughput bench's count of bound pods on the real API server: pods bound before the
watch starts come from its list, pods bound after from its events, each once."""

from __future__ import annotations

import cluster as e2e_cluster
import pytest

from bench.throughput.bound import BoundWatch

pytestmark = pytest.mark.e2e


def _bind(c: e2e_cluster.LocalCluster, pod: str, node: str) -> None:
    c.request("POST", f"/api/v1/namespaces/default/pods/{pod}/binding", {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}})


def test_bound_watch_counts_listed_and_watched_binds_once(
        clean_cluster: e2e_cluster.LocalCluster) -> None:
    c = clean_cluster
    (node,) = c.create_gpu_nodes(1, prefix="bw-node-")
    for i in range(4):
        c.request("POST", "/api/v1/namespaces/default/pods",
                  e2e_cluster.gpu_pod_manifest(f"bw-{i}", gpus=1,
                                                  scheduler_name="no-scheduler"))  # bound here
    _bind(c, "bw-0", node)  # before the watch: from its list
    watch = BoundWatch(c.server, c.token, c._ssl).start()
    try:
        assert watch.count() == 1
        _bind(c, "bw-1", node)
        _bind(c, "bw-2", node)
        assert watch.wait(3, timeout=30) == 3
        # A later change of a bound pod is no new bind; an unbound pod is not counted.
        c.request("PATCH", "/api/v1/namespaces/default/pods/bw-1",
                  {"metadata": {"labels": {"seen": "yes"}}},
                  content_type="application/merge-patch+json")
        assert watch.wait(4, timeout=2) == 3
        times = watch.times()
        assert len(times) == 3 and times == sorted(times)
    finally:
        watch.close()
