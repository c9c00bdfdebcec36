"""The embedded default keeps its bookings across a restart, kill -9 included."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import aiohttp
import pytest
from builders import free_port, pod

from bench.latency.servers import wait_ready
from extender.errors import SparseError
from extender.ledger.rules import Allocation, GpuCapacity, Reservation
from extender.ledger.sqlite import SqliteLedger

CAPS = {"g0": GpuCapacity(16384)}


def res(uid: str, mem: int = 1000) -> Reservation:
    return Reservation(pod_uid=uid, namespace="ml", name=uid, node="n",
                       allocations=(Allocation("g0", "c", mem, 100),), expires_at=50.0)


async def test_bookings_and_version_survive_reopening(tmp_path) -> None:
    store = SqliteLedger(tmp_path)
    await store.reserve(res("a"), CAPS)
    await store.reserve(res("b"), CAPS)
    await store.confirm("a")
    await store.release("b")
    version, before = await store.snapshot()
    await store.close()
    again = SqliteLedger(tmp_path)
    try:
        assert await again.snapshot() == (version, before)
        assert (await again.get("a")).state == "bound"
        await again.reserve(res("c", 15384), CAPS)  # exactly what "a" left free
        with pytest.raises(SparseError):
            await again.reserve(res("d", 1), CAPS)
        assert await again.version() == version + 1
    finally:
        await again.close()


async def test_one_state_dir_one_extender(tmp_path) -> None:
    store = SqliteLedger(tmp_path)
    try:
        with pytest.raises(SparseError, match="in use by another extender"):
            SqliteLedger(tmp_path)
    finally:
        await store.close()


NODE_CONF = """
nodes:
  - {name: n1, gpu: 2, gpu-mem: 32, model: V100M32, uuids: [GPU-a, GPU-b]}
"""


def serve(tmp_path, port: int) -> subprocess.Popen:
    conf = tmp_path / "nodes.yaml"
    conf.write_text(NODE_CONF)
    # the default store (sqlite), in a state dir of its own
    return subprocess.Popen(
        [sys.executable, "-m", "extender", "serve", "--port", str(port), "--nodes", str(conf),
         "--log-format", "text"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")})


async def test_default_store_keeps_bookings_across_kill_9(tmp_path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}/scheduler"

    async def place(session: aiohttp.ClientSession, p: dict) -> str:
        async with session.post(f"{base}/filter",
                                data=json.dumps({"Pod": p, "NodeNames": ["n1"]})) as r:
            assert r.status == 200
            passed = (await r.json())["NodeNames"] or []
        if not passed:
            return "does not fit"
        async with session.post(f"{base}/bind", data=json.dumps({
                "PodName": p["metadata"]["name"], "PodNamespace": "ml",
                "PodUID": p["metadata"]["uid"], "Node": "n1"})) as r:
            assert r.status == 200
            return (await r.json())["Error"]

    proc = serve(tmp_path, port)
    try:
        async with aiohttp.ClientSession() as session:
            await wait_ready(port, timeout_s=30, interval_s=0.1)
            assert await place(session, pod(gpus=1)) == ""
            assert await place(session, pod(gpus=1)) == ""
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            proc = serve(tmp_path, port)
            await wait_ready(port, timeout_s=30, interval_s=0.1)
            async with session.get(f"{base}/inspect") as r:
                gpus = (await r.json())["nodes"][0]["gpus"]
            assert [len(g["pods"]) for g in gpus] == [1, 1]
            assert await place(session, pod(gpus=1)) != ""  # both GPUs are still held
    finally:
        proc.terminate()
        proc.wait(10)
