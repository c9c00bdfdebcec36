"""The API server's and etcd's CPU per Binding: plain, with the assignment annotations sparse
binds with, with and without a watch of every pod (JSON, as the extender keeps one), and per
list of the 1,000 unbound pods (metadata only, as the throughput bench used to poll every
0.25 s). 500 fake nodes, 1,000 pods, 8 Bindings in flight. From the repository root:

    .venv/bin/python bench/reports/extender/round14/api_cost.py
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
import urllib.request
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[4]
sys.path[:0] = [str(ROOT / "tests" / "e2e"), str(ROOT / "tests"), str(ROOT)]

import cluster as e2e_cluster  # noqa: E402

from bench.procstat import tree_cpu, tree_cpu_delta  # noqa: E402
from bench.throughput.__main__ import create_nodes, create_pods, delete_pods  # noqa: E402

PODS = 1000
DETAIL = {"version": 1, "job_class": "recommendation", "whole_gpus": [],
          "containers": [{"name": "main", "gpus": [
              {"uuid": "GPU-tp-node-00001-3", "mem_mib": 4096, "milli": 250}]}]}
ANNOTATIONS = {"sparse.io/gpu-uuids": "GPU-tp-node-00001-3", "sparse.io/node": "tp-node-00001",
               "sparse.io/assignment": json.dumps(DETAIL, separators=(",", ":"))}
UNBOUND_METADATA = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


def cpu(c: e2e_cluster.LocalCluster) -> dict[str, dict[int, float]]:
    return {"api": tree_cpu(c.apiserver.pid), "etcd": tree_cpu(c.etcd.pid)}


def per(a: dict, b: dict, n: int) -> dict[str, float]:
    return {k: round(1000 * tree_cpu_delta(a[k], b[k]) / n, 2) for k in a}


def list_unbound(c: e2e_cluster.LocalCluster) -> int:
    req = urllib.request.Request(
        f"{c.server}/api/v1/namespaces/default/pods?fieldSelector=spec.nodeName%3D")
    req.add_header("Authorization", f"Bearer {c.token}")
    req.add_header("Accept", UNBOUND_METADATA)
    with urllib.request.urlopen(req, context=c._ssl, timeout=30) as resp:
        return len(json.loads(resp.read())["items"] or [])


async def bind_all(c: e2e_cluster.LocalCluster, annotate: bool, in_flight: int = 8) -> None:
    headers = {"Authorization": f"Bearer {c.token}"}
    async with aiohttp.ClientSession() as session:
        sem = asyncio.Semaphore(in_flight)

        async def one(i: int) -> None:
            name = f"tp-{i:05d}"
            body: dict = {"apiVersion": "v1", "kind": "Binding",
                          "metadata": {"name": name, "namespace": "default"},
                          "target": {"apiVersion": "v1", "kind": "Node",
                                     "name": f"tp-node-{i % 500:05d}"}}
            if annotate:
                body["metadata"]["annotations"] = ANNOTATIONS
            async with sem, session.post(
                    f"{c.server}/api/v1/namespaces/default/pods/{name}/binding", json=body,
                    headers=headers, ssl=c._ssl) as r:
                if r.status >= 300:
                    raise RuntimeError(f"binding {name}: HTTP {r.status} {await r.text()}")

        await asyncio.gather(*(one(i) for i in range(PODS)))


def watch_pods(c: e2e_cluster.LocalCluster, stop: threading.Event, seen: list[int]) -> None:
    req = urllib.request.Request(f"{c.server}/api/v1/pods?watch=1")
    req.add_header("Authorization", f"Bearer {c.token}")
    with urllib.request.urlopen(req, context=c._ssl, timeout=600) as resp:
        while not stop.is_set() and resp.readline():
            seen[0] += 1


def main() -> None:
    with e2e_cluster.LocalCluster(quiet=True) as c:
        c.reset()
        asyncio.run(create_nodes(str(c.kubeconfig), 500, 8))
        for case in ("plain", "annotated", "plain, watched", "annotated, watched", "plain",
                     "annotated, watched"):
            delete_pods(c)
            asyncio.run(create_pods(str(c.kubeconfig), PODS, "whole"))
            time.sleep(2)
            stop, seen = threading.Event(), [0]
            if "watched" in case:
                threading.Thread(target=watch_pods, args=(c, stop, seen), daemon=True).start()
                time.sleep(1)
            a = cpu(c)
            for _ in range(20):
                list_unbound(c)
            poll = per(a, cpu(c), 20)
            a, started = cpu(c), time.monotonic()
            asyncio.run(bind_all(c, "annotated" in case))
            time.sleep(0.5)
            print(f"{case:20} ms per Binding {per(a, cpu(c), PODS)}  ms per list of the"
                  f" unbound pods {poll}  binds {time.monotonic() - started:.1f} s"
                  f"  watch events {seen[0]}", flush=True)
            stop.set()


if __name__ == "__main__":
    main()
