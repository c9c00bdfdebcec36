"""Data locality on the real control plane: kube-scheduler -> extender, with node caches that
publish through the DaemonSet's own publisher (a real redis-server as the cache, filled by the
read-through client) and a store shard pod whose node fixes the store's rack."""

from __future__ import annotations

import asyncio
import json
import time

import cluster as e2e_cluster
import numpy as np
import pytest
from test_scheduling import wait_nodes

from bench.redis_server import RedisServer
from embed.cache import ReadThrough
from embed.layout import TableMeta
from embed.publisher import CachePublisher, count_rows
from embed.store import EmbeddingStore, connect
from embed.topology import store_topology
from extender.annotations import ANN_EMBEDDING, ANN_EMBEDDING_CACHE, LABEL_EMBEDDING_STORE

pytestmark = pytest.mark.e2e

STORE = "emb-store"
RACK = "topology.sparse.io/rack"
ZONE = "topology.kubernetes.io/zone"


def rack(name: str) -> dict[str, str]:
    return {ZONE: "zone-a", RACK: name}


async def publish_fake_cache(core, node: str, server: RedisServer, table: str) -> None:
    """A node cache that served lookups of ``table`` publishes what it holds."""
    store = EmbeddingStore(connect(server.url))
    rows = np.random.default_rng(0).standard_normal((5000, 16)).astype(np.float32)
    store.write_table(TableMeta(table, 5000, 16), [rows])
    cache = connect(server.url.replace("/0", "/1"))
    cache.config_set("maxmemory", "8mb")
    cache.config_set("maxmemory-policy", "allkeys-lfu")
    reader = ReadThrough(cache, store)
    reader.lookup(table, np.arange(4000))
    publisher = CachePublisher(node, lambda: count_rows(cache, store))
    assert await publisher.publish_once(core)


async def wait_annotation(core, node: str, timeout: float = 10) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        ann = (await core.read_node(node)).metadata.annotations or {}
        if ANN_EMBEDDING_CACHE in ann:
            return json.loads(ann[ANN_EMBEDDING_CACHE])
        assert time.monotonic() < deadline, f"{node} never published its cache"
        await asyncio.sleep(0.2)


def embedded(tables: list[str], required: bool = False) -> dict[str, str]:
    return {ANN_EMBEDDING: json.dumps({"store": STORE, "tables": tables, "required": required})}


async def test_jobs_land_on_their_cache_then_the_store_rack(cluster, core, extender):
    # loc-a: caches the job's table (rack-1); loc-b: the store's rack; loc-c: neither.
    for name, labels in (("loc-a", rack("rack-1")), ("loc-b", rack("rack-0")),
                         ("loc-c", rack("rack-1"))):
        cluster.create_gpu_node(name, gpus=2, labels=labels)
    await wait_nodes(extender, ["loc-a", "loc-b", "loc-c"])
    shard = e2e_cluster.gpu_pod_manifest("store-0", scheduler_name="default-scheduler",
                                         labels={LABEL_EMBEDDING_STORE: STORE})
    shard["spec"]["nodeName"] = "loc-b"  # the store shard runs on loc-b (rack-0)
    await core.create_namespaced_pod("default", shard)
    places = await store_topology(core, STORE, "default")  # what `sparse-embed where` prints
    assert [(p.node, p.zone, p.rack) for p in places] == [("loc-b", "zone-a", "rack-0")]
    server = RedisServer()
    try:
        await publish_fake_cache(core, "loc-a", server, "clicks")
    finally:
        server.stop()
    content = await wait_annotation(core, "loc-a")
    assert content["tables"]["clicks"]["rows"] >= 1000
    await asyncio.sleep(1.5)  # the extender's node and store watches catch up

    # A job without embeddings leaves the cache node alone when another node fits as well.
    await e2e_cluster.create_pod(core, "plain", gpus=1)
    assert await e2e_cluster.wait_for_pod_bound(core, "plain") != "loc-a"
    await e2e_cluster.delete_pod(core, "plain")

    # The job reading "clicks" goes where its rows are cached.
    await e2e_cluster.create_pod(core, "reader-1", gpus=1, annotations=embedded(["clicks"]))
    assert await e2e_cluster.wait_for_pod_bound(core, "reader-1") == "loc-a"

    # loc-a full: the next reader goes to the store's rack, not just anywhere.
    filler = e2e_cluster.gpu_pod_manifest("filler", gpus=1)
    filler["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "loc-a"}
    await core.create_namespaced_pod("default", filler)
    assert await e2e_cluster.wait_for_pod_bound(core, "filler") == "loc-a"
    await e2e_cluster.create_pod(core, "reader-2", gpus=1, annotations=embedded(["clicks"]))
    assert await e2e_cluster.wait_for_pod_bound(core, "reader-2") == "loc-b"

    # Required mode: only the store's rack, even for a table cached nowhere.
    await e2e_cluster.create_pod(core, "reader-3", gpus=1,
                                 annotations=embedded(["views"], required=True))
    assert await e2e_cluster.wait_for_pod_bound(core, "reader-3") == "loc-b"
    await e2e_cluster.create_pod(core, "reader-4", gpus=1,
                                 annotations=embedded(["views"], required=True))
    await asyncio.sleep(3)
    pod = await core.read_namespaced_pod("reader-4", "default")
    assert not pod.spec.node_name, "the store's rack is full: a required pod waits"


async def test_cache_agent_process_publishes_and_serves_metrics(cluster, core, tmp_path):
    """The DaemonSet's agent as a process: it patches its Node, answers /metrics and writes
    the shared-memory tier that clients map."""
    import subprocess
    import sys
    import urllib.request

    cluster.reset()
    cluster.create_gpu_node("agent-node", gpus=1)
    server = RedisServer()
    (port,) = e2e_cluster.free_ports(1)
    log = open(tmp_path / "agent.log", "wb")  # noqa: SIM115 - owned by the process
    agent = None
    try:
        store = EmbeddingStore(connect(server.url))
        store.write_table(TableMeta("views", 300, 8), [np.ones((300, 8), np.float32)])
        cache_url = server.url.replace("/0", "/1")
        connect(cache_url).config_set("maxmemory-policy", "allkeys-lfu")  # the chart's policy
        ReadThrough(connect(cache_url), store).lookup("views", np.arange(120))
        agent = subprocess.Popen(
            [sys.executable, "-m", "embed.cli", "cache", "--cache", cache_url, "--store",
             server.url, "--node", "agent-node", "--kubeconfig", str(cluster.kubeconfig),
             "--metrics-port", str(port), "--publish-interval", "1",
             "--tier-dir", str(tmp_path / "tier"), "--tier-mib", "1", "--tier-interval", "1"],
            stdout=log, stderr=subprocess.STDOUT)
        content = await wait_annotation(core, "agent-node", timeout=30)
        # No pod on the node declares "views": listed through the pod list, with no readers.
        assert content["tables"]["views"] == {"rows": 120, "total": 300, "readers": 0}
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        assert "sparse_embed_cache_up 1.0" in text
        assert 'sparse_embed_cache_rows{table="views"} 120.0' in text
        from embed.tier import TierReader

        tier_metric = 'sparse_embed_tier_blocks{table="views"} 120.0'
        for _ in range(150):  # the first refresh runs at start; a loaded machine may be slow
            snap = TierReader(tmp_path / "tier", check_s=0).get(store.meta("views"))
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                text = resp.read().decode()
            if snap is not None and tier_metric in text:
                break
            await asyncio.sleep(0.2)
        assert snap is not None and len(snap) == 120 and tier_metric in text
        mask, rows = snap.split(np.arange(130))
        assert mask.sum() == 120 and (rows == 1).all()
    finally:
        if agent is not None:
            agent.terminate()
            agent.wait(10)
        log.close()
        server.stop()


READER = """
import json, os, sys
import numpy as np
from embed.client import EmbeddingClient

client = EmbeddingClient("ads", prefetch=False)  # node cache and store from the environment
ids = np.random.default_rng(1).zipf(1.05, 4096) % 3000
first = np.asarray(client.lookup(ids))
second = np.asarray(client.lookup(ids))
m = client.metrics
print(json.dumps({"first": first.tolist()[:3], "same": bool((first == second).all()),
                  "shape": list(first.shape), "hits": m.hits, "misses": m.misses,
                  "ids": ids.tolist()[:3]}))
"""


async def wait_extender_cache(ext, node: str, table: str, readers: int,
                              timeout: float = 60) -> dict:
    """Until the extender's locality index shows ``readers`` pods reading ``table`` on
    ``node`` (its node watch applied the cache's latest publication)."""
    deadline = time.monotonic() + timeout
    while True:
        nodes = {n["name"]: n for n in ext.inspect()["nodes"]}
        cache = nodes.get(node, {}).get("embedding_cache", {})
        if cache.get(table, {}).get("readers") == readers:
            return cache
        assert time.monotonic() < deadline, f"extender never saw {table} read on {node}: {cache}"
        await asyncio.sleep(0.25)


async def test_a_bound_pod_reads_its_table_through_the_node_cache(cluster, core, extender):
    """The loop a training job closes: the pod is bound, its process reads the table through
    the client and its node's cache, the cache agent publishes the rows and the pod as their
    reader (one pod list by node), and the next pod reading that table is placed there."""
    import os
    import subprocess
    import sys

    from embed.publisher import node_readers

    for name in ("rd-a", "rd-b"):
        cluster.create_gpu_node(name, gpus=2, labels=rack("rack-1"))
    await wait_nodes(extender, ["rd-a", "rd-b"])
    server = RedisServer()
    try:
        store = EmbeddingStore(connect(server.url))
        rows = np.random.default_rng(0).standard_normal((3000, 16)).astype(np.float32)
        store.write_table(TableMeta("ads", 3000, 16), [rows])
        caches = {}
        for db, node in enumerate(("rd-a", "rd-b"), start=1):  # one node cache per node
            caches[node] = server.url.replace("/0", f"/{db}")
            c = connect(caches[node])
            c.config_set("maxmemory", "64mb")
            c.config_set("maxmemory-policy", "allkeys-lfu")
        decl = {ANN_EMBEDDING: json.dumps({"store": STORE, "tables": ["ads"],
                                           "idsPerStep": 4096})}
        await e2e_cluster.create_pod(core, "trainer-1", gpus=1, annotations=decl)
        node = await e2e_cluster.wait_for_pod_bound(core, "trainer-1", timeout=60)
        assert node in caches

        # The pod's process on that node: the node cache as the DaemonSet's hostPort gives it.
        env = {**os.environ, "SPARSE_EMBED_CACHE": caches[node],
               "SPARSE_EMBED_STORE": server.url, "SPARSE_EMBED_TIER": ""}
        out = subprocess.run([sys.executable, "-c", READER], env=env, capture_output=True,
                             text=True, timeout=300, cwd=os.getcwd())
        assert out.returncode == 0, out.stderr[-2000:]
        got = json.loads(out.stdout.strip().splitlines()[-1])
        assert got["shape"] == [4096, 16] and got["same"]
        first_id = got["ids"][0]
        assert got["first"][0] == pytest.approx(rows[first_id].tolist())
        # The first batch missed and filled the cache; the second found every row there.
        assert got["misses"] > 0 and got["hits"] == got["misses"]

        # The node's cache agent publishes what it now holds, and the pod as its reader.
        cache = connect(caches[node])
        publisher = CachePublisher(node, lambda: count_rows(cache, store),
                                   readers=lambda c: node_readers(c, node))
        assert await publisher.publish_once(core)
        content = await wait_annotation(core, node)
        assert content["tables"]["ads"]["readers"] == 1
        assert content["tables"]["ads"]["ids"] == 4096
        assert content["tables"]["ads"]["rows"] > 0
        other = next(n for n in caches if n != node)
        other_cache = connect(caches[other])
        assert await CachePublisher(other, lambda: count_rows(other_cache, store),
                                    readers=lambda c: node_readers(c, other)).publish_once(core)
        await wait_extender_cache(extender, node, "ads", readers=1)

        # The next job reading "ads" joins the node whose cache serves it.
        await e2e_cluster.create_pod(core, "trainer-2", gpus=1, annotations=decl)
        assert await e2e_cluster.wait_for_pod_bound(core, "trainer-2", timeout=60) == node
    finally:
        server.stop()


async def test_a_reader_waits_for_its_cache_node_to_free_then_lands_there(cluster, core,
                                                                         tmp_path):
    """Delay scheduling (``--locality-max-wait``): the node caching the reader's table is full
    with a pod predicted to end in a minute; the reader, fetch-bound and long, waits (its
    FailedScheduling event says for what) instead of starting on the empty node, and lands on
    the cache node when that pod ends."""
    from extender_proc import Extender

    cluster.reset()
    ext = Extender(tmp_path, cluster.kubeconfig, extra=("--locality-max-wait", "300")).start()
    cluster.start_scheduler(ext.url)
    try:
        for name in ("lw-warm", "lw-cold"):
            cluster.create_gpu_node(name, gpus=1, labels=rack("rack-1"))
        await wait_nodes(ext, ["lw-warm", "lw-cold"])
        server = RedisServer()
        try:
            await publish_fake_cache(core, "lw-warm", server, "clicks")
        finally:
            server.stop()
        deadline = time.monotonic() + 30
        while "clicks" not in {n["name"]: n for n in ext.inspect()["nodes"]}.get(
                "lw-warm", {}).get("embedding_cache", {}):
            assert time.monotonic() < deadline, "the extender never read lw-warm's cache"
            await asyncio.sleep(0.25)

        filler = e2e_cluster.gpu_pod_manifest(
            "lw-filler", milli=1000, mem_mib=1000,
            annotations={"sparse.io/predicted-seconds": "60"})
        filler["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "lw-warm"}
        await core.create_namespaced_pod("default", filler)
        assert await e2e_cluster.wait_for_pod_bound(core, "lw-filler") == "lw-warm"

        decl = {ANN_EMBEDDING: json.dumps({"store": STORE, "tables": ["clicks"],
                                           "idsPerStep": 4000, "steps": 1_000_000,
                                           "stepComputeMs": 1.0})}
        await e2e_cluster.create_pod(core, "lw-reader", milli=500, mem_mib=1000,
                                     annotations=decl)
        deadline = time.monotonic() + 30
        while True:
            events = await e2e_cluster.list_pod_events(core, "lw-reader")
            if any("waiting for node lw-warm" in e["message"] for e in events):
                break
            assert time.monotonic() < deadline, f"no wait event: {events}"
            await asyncio.sleep(0.5)
        pod = await core.read_namespaced_pod("lw-reader", "default")
        assert not pod.spec.node_name, "the reader took the cold node instead of waiting"
        while not any(e["reason"] == "WaitingForCachedNode" and e["type"] == "Normal"
                      for e in events):  # the extender's own word, beside the scheduler's
            assert time.monotonic() < deadline, f"no extender event: {events}"
            await asyncio.sleep(0.5)
            events = await e2e_cluster.list_pod_events(core, "lw-reader")

        await e2e_cluster.delete_pod(core, "lw-filler")
        assert await e2e_cluster.wait_for_pod_bound(core, "lw-reader", timeout=60) == "lw-warm"
    finally:
        cluster.stop_scheduler()
        ext.stop()
