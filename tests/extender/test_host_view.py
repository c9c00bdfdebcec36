"""The extender's view of each node's CPU and memory (HostBook): allocatable from Node objects
minus the requests of the pods bound there, handed to the placement core."""

from __future__ import annotations

import json

import numpy as np
from aiohttp.test_utils import TestClient, TestServer
from builders import bind_request, gpu_node, inventory, node_object, pod, post_verb

from extender.config import Settings
from extender.demand import host_requests, pod_demand
from extender.hostbook import UNLIMITED, HostBook
from extender.http.app import make_app
from extender.interference import default_matrix
from extender.kube.integration import KubeIntegration
from extender.ledger.memory import MemoryLedger
from extender.placement import ClusterState, make_policy
from extender.protocol import _full_pod_decoder
from extender.service import Scheduler


def scheduler(*nodes):
    return Scheduler(inventory=inventory(*nodes), ledger=MemoryLedger(),
                     matrix=default_matrix(), policy=make_policy("sparse"))


def node_with(name: str, cpu: str, memory: str = "792Gi", gpus: int = 4) -> dict:
    obj = node_object(gpu_node(name, gpus))
    obj["status"]["allocatable"] = {**obj["status"]["allocatable"], "cpu": cpu,
                                    "memory": memory}
    return obj


def test_pod_requests_follow_kube_scheduler_rules():
    p = pod("p", mem=1000, milli=300, containers=[
        {"name": "a", "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"},
                                    "limits": {"sparse.io/gpu-milli": "300",
                                               "sparse.io/gpu-mem": "1000"}}},
        {"name": "b", "resources": {"limits": {"cpu": "1", "memory": "512Mi"}}}])
    p["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "4"}}}]

    decoded = _full_pod_decoder.decode(json.dumps(p).encode())
    assert host_requests(decoded) == (4000, 1536)  # init container's CPU, the app's memory
    d = pod_demand(decoded)
    assert (d.cpu_milli, d.host_mem_mib, d.share_milli) == (4000, 1536, 300)


def test_book_subtracts_bound_pods_and_renews_stamps():
    st = ClusterState.build(inventory(gpu_node("a", 2), gpu_node("b", 2)), default_matrix())
    book = HostBook()
    book.attach(st)
    assert getattr(st, "host", None) is None  # nothing known: no view, nothing tested
    book.set_node("a", {"cpu": "8", "memory": "16Gi"})
    book.attach(st)
    a, b = st.node_index["a"], st.node_index["b"]
    assert st.host.cpu_left[a] == 8000 and st.host.mem_left[a] == 16384
    assert st.host.cpu_left[b] == UNLIMITED  # allocatable never seen: not binding
    before = st.node_stamp.copy()
    book.bind("p1", "a", 3000, 4096)
    book.bind("p1", "a", 3000, 4096)  # the watch repeating our own bind counts once
    book.attach(st)
    assert st.host.cpu_left[a] == 5000 and st.host.mem_left[a] == 12288
    assert st.node_stamp[a] != before[a] and st.node_stamp[b] == before[b]
    book.release("p1")
    book.attach(st)
    assert st.host.cpu_left[a] == 8000
    book.bind("p2", "a", 1000, 0)
    book.retain_pods(set())  # a relist without the pod
    book.attach(st)
    assert st.host.cpu_left[a] == 8000 and st.host.pods[a] == 0
    assert np.all(st.host.cpu_cap[[a, b]] == [8000, UNLIMITED])


async def test_full_nodes_cpu_left_rules_out_a_node_and_binds_count_on_it():
    s = scheduler(gpu_node("gpu-a", 4), gpu_node("gpu-b", 4))
    app = make_app(Settings(nodes=None), scheduler=s)
    async with TestClient(TestServer(app)) as c:
        nodes = {"items": [node_with("gpu-a", "3"), node_with("gpu-b", "96")]}
        first = pod("first", mem=1000, milli=200)  # asks 2 CPUs (builders' default)
        out = await post_verb(c, "filter", {"Pod": first, "Nodes": nodes})
        assert [n["metadata"]["name"] for n in out["Nodes"]["items"]] == ["gpu-a", "gpu-b"]
        assert await post_verb(c, "bind", bind_request(first, "gpu-a")) == {"Error": ""}
        # gpu-a has 1 CPU left now; the next request names nodes only (nodeCacheCapable)
        second = pod("second", mem=1000, milli=200)
        args = {"Pod": second, "NodeNames": ["gpu-a", "gpu-b"]}
        out = await post_verb(c, "filter", args)
        assert out["NodeNames"] == ["gpu-b"]
        assert out["FailedNodes"]["gpu-a"] == (
            "node CPU: needs 2000m, 1000m left beside the pods bound there")
        scores = {h["Host"]: h["Score"] for h in await post_verb(c, "prioritize", args)}
        assert scores["gpu-a"] == 0 and scores["gpu-b"] > 0


async def test_memory_left_counts_like_cpu():
    s = scheduler(gpu_node("gpu-a", 4), gpu_node("gpu-b", 4))
    app = make_app(Settings(nodes=None), scheduler=s)
    async with TestClient(TestServer(app)) as c:
        nodes = {"items": [node_with("gpu-a", "96", "4Gi"), node_with("gpu-b", "96")]}
        p = pod("p", mem=1000, milli=200)  # asks 8 GiB of host memory
        out = await post_verb(c, "filter", {"Pod": p, "Nodes": nodes})
        assert [n["metadata"]["name"] for n in out["Nodes"]["items"]] == ["gpu-b"]
        assert out["FailedNodes"]["gpu-a"].startswith("node memory: needs 8192 MiB")


async def test_watches_feed_allocatable_and_bound_pods():
    s = scheduler(gpu_node("gpu-a", 4), gpu_node("gpu-b", 4))
    kube = KubeIntegration(Settings(nodes=None), s)
    await kube._on_node("ADDED", node_with("gpu-a", "4"))
    running = pod("running", mem=1000, milli=100)
    running["spec"]["nodeName"] = "gpu-a"
    running["status"] = {"phase": "Running"}
    await kube._on_pod("ADDED", running)
    assert s.hosts.left("gpu-a") == (2000, 792 * 1024 - 8192)
    state = await s.view()
    assert state.host.cpu_left[state.node_index["gpu-a"]] == 2000
    await kube._on_pod("DELETED", running)
    assert s.hosts.left("gpu-a") == (4000, 792 * 1024)
    await kube._on_node("DELETED", node_with("gpu-a", "4"))
    assert s.hosts.left("gpu-a") is None


def test_request_nodes_never_override_the_watch():
    book = HostBook()
    book.set_node("a", {"cpu": "8", "memory": "1Gi"})  # the watch
    book.set_node("a", {"cpu": "1000", "memory": "1Ti"}, watched=False)  # a request
    book.set_node("b", {"cpu": "4", "memory": "1Gi"}, watched=False)  # no watch: taken
    assert book.left("a") == (8000, 1024) and book.left("b") == (4000, 1024)
