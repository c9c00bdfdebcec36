"""The predictor worker against a real kube-apiserver and a real redis-server.

``sparse-predictor worker`` runs as a subprocess (``python -m predictor.cli worker``). Pods use
``schedulerName: sparse-scheduler`` and no scheduler runs, so they stay Pending and unbound:
exactly the pods the worker watches. The good pod must get a ``sparse:demand:<uid>`` hash,
the bad one a ``Warning`` event ``InvalidModelAnnotation``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cluster as e2e_cluster
import pytest

from bench.redis_server import free_port
from predictor import MODEL_VERSION

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]

GOOD_SPEC = {
    "family": "dlrm", "batch_size": 2048, "optimizer": "adagrad", "gpu_model": "T4",
    "macs": 1.2e6, "params": 3.3e7, "activations": 9000,
    "tables": [{"rows": 1000000, "dim": 16, "pooling": 3, "count": 26}],
    "dense_features": 13, "bottom_mlp": [512, 256, 16], "top_mlp": [512, 256],
}


@pytest.fixture
def worker(cluster: e2e_cluster.LocalCluster, redis_url: str,
           tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    cluster.reset()
    log = (tmp_path / "worker.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "predictor.cli", "worker", "--kubeconfig", str(cluster.kubeconfig),
         "--redis", redis_url, "--metrics-port", str(free_port()), "--namespace", "default"],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        sys.stderr.write((tmp_path / "worker.log").read_text(errors="replace")[-4000:])


async def _eventually(fn: Any, timeout: float = 30.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.25)


async def test_worker_predicts_good_pod_and_warns_on_bad_one(
    core: Any, worker: subprocess.Popen[bytes], redis_url: str,
) -> None:
    import redis.asyncio as aioredis

    good = await core.create_namespaced_pod("default", e2e_cluster.gpu_pod_manifest(
        "pred-good", milli=500, mem_mib=4000,
        annotations={"sparse.io/model": json.dumps(GOOD_SPEC)}))
    bad = await core.create_namespaced_pod("default", e2e_cluster.gpu_pod_manifest(
        "pred-bad", milli=500, mem_mib=4000,
        annotations={"sparse.io/model": json.dumps({"family": "dlrm", "batch_size": 0})}))
    plain = await core.create_namespaced_pod("default", e2e_cluster.gpu_pod_manifest(
        "pred-plain", milli=500, mem_mib=4000))

    rds = aioredis.from_url(redis_url, decode_responses=True)
    try:
        key = f"sparse:demand:{good.metadata.uid}"

        async def demand() -> dict[str, str]:
            assert worker.poll() is None, "worker exited"
            return await rds.hgetall(key)

        fields = await _eventually(demand, what=key)
        assert set(fields) >= {"gpu_milli", "gpu_mem_mib", "job_class", "model_version",
                               "updated_at"}
        assert 1 <= int(fields["gpu_milli"]) <= 1000
        # 26 tables x 1M rows x 16 x fp32 = 1.55 GiB, Adagrad: several x that, plus T4 context
        assert 4000 < int(fields["gpu_mem_mib"]) < 16000, fields
        assert fields["job_class"] == "recommendation"
        assert fields["model_version"] == MODEL_VERSION
        assert abs(float(fields["updated_at"]) - time.time()) < 120
        ttl = await rds.ttl(key)
        assert 0 < ttl <= 3600

        async def warning() -> list[Any]:
            assert worker.poll() is None, "worker exited"
            evs = await core.list_namespaced_event(
                "default", field_selector=f"involvedObject.uid={bad.metadata.uid}")
            return [e for e in evs.items if e.reason == "InvalidModelAnnotation"]

        evs = await _eventually(warning, what="InvalidModelAnnotation event on pred-bad")
        assert evs[0].type == "Warning"
        assert "$.batch_size" in evs[0].message
        assert evs[0].involved_object.name == "pred-bad"

        # no demand hash for the bad pod nor for the pod without annotations
        assert not await rds.exists(f"sparse:demand:{bad.metadata.uid}")
        assert not await rds.exists(f"sparse:demand:{plain.metadata.uid}")
        # the good pod got no warning
        evs = await core.list_namespaced_event(
            "default", field_selector=f"involvedObject.uid={good.metadata.uid}")
        assert not [e for e in evs.items if e.type == "Warning"]
    finally:
        await rds.aclose()
