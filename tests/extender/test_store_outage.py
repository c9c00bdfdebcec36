"""Redis stopped or frozen under a running extender: every verb still answers the protocol (200
with ``Error``, the scheduler retries), never a 500 and never a hang past the scheduler's
``httpTimeout``; ``/readyz`` is 503 while the ledger is unreachable and 200 again once it is
back, without a restart."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import aiohttp
import pytest
from builders import bind_request, free_port, pod

from bench.latency.servers import wait_ready
from bench.redis_server import RedisServer

NODE_CONF = """
nodes:
  - {name: n1, gpu: 2, gpu-mem: 32, model: V100M32, uuids: [GPU-o-0, GPU-o-1]}
"""
SCHEDULER_HTTP_TIMEOUT_S = 5.0  # httpTimeout of the shipped scheduler config


def start_extender(tmp_path, store_url: str) -> tuple[int, subprocess.Popen]:
    """An extender on a free port over ``store_url`` with short Redis timeouts; its log in
    ``tmp_path/extender.log``."""
    conf = tmp_path / "nodes.yaml"
    conf.write_text(NODE_CONF)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "extender", "serve", "--port", str(port),
         "--nodes", str(conf),
         "--store", store_url, "--redis-socket-timeout", "0.5", "--log-format", "text"],
        stdout=open(tmp_path / "extender.log", "w"), stderr=subprocess.STDOUT,  # noqa: SIM115
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return port, proc


@pytest.fixture
def outage_redis():
    server = RedisServer(appendonly=True)  # restarted with its data
    yield server
    server.thaw()
    server.stop()


async def test_stopped_and_frozen_redis_answer_the_protocol(tmp_path, outage_redis) -> None:
    port, proc = start_extender(tmp_path, outage_redis.url)
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            await wait_ready(port, timeout_s=30, interval_s=0.1)

            async def post(verb: str, payload: dict) -> dict:
                async with session.post(f"{base}/scheduler/{verb}",
                                        data=json.dumps(payload)) as r:
                    assert r.status == 200, await r.text()
                    return await r.json()

            async def ready() -> int:
                async with session.get(f"{base}/readyz") as r:
                    return r.status

            async def place(p: dict) -> tuple[dict, dict]:
                filtered = await post("filter", {"Pod": p, "NodeNames": ["n1"]})
                bound = await post("bind", bind_request(p, "n1"))
                return filtered, bound

            _, bound = await place(pod(mem=1000, milli=100))
            assert bound["Error"] == "" and await ready() == 200

            outage_redis.halt()
            p = pod(mem=1000, milli=100)
            filtered, bound = await place(p)
            assert "unavailable" in filtered["Error"] and "unavailable" in bound["Error"]
            assert await ready() == 503

            outage_redis.start()
            for _ in range(300):
                if await ready() == 200:
                    break
                await asyncio.sleep(0.1)
            assert await ready() == 200
            _, bound = await place(p)
            assert bound["Error"] == ""

            outage_redis.freeze()
            started = time.monotonic()
            _, bound = await place(pod(mem=1000, milli=100))
            took = time.monotonic() - started
            outage_redis.thaw()
            assert "unavailable" in bound["Error"]
            assert took < SCHEDULER_HTTP_TIMEOUT_S  # timeouts 0.5 s: far below
    finally:
        proc.terminate()
        proc.wait(10)  # shutdown is not held up by a cancelled Redis call


async def test_replica_started_while_its_store_is_down_waits_and_serves(tmp_path,
                                                                        outage_redis) -> None:
    outage_redis.halt()  # the store is down when the replica starts (a failover, a restart)
    port, proc = start_extender(tmp_path, outage_redis.url)
    try:
        for _ in range(600):  # it keeps trying, it does not exit
            if "waiting for the GPU ledger" in (tmp_path / "extender.log").read_text():
                break
            assert proc.poll() is None, (tmp_path / "extender.log").read_text()
            await asyncio.sleep(0.1)
        assert proc.poll() is None
        outage_redis.start()
        await wait_ready(port, timeout_s=60, interval_s=0.1)
        body = json.dumps({"Pod": pod(mem=1000, milli=100), "NodeNames": ["n1"]})
        async with (aiohttp.ClientSession() as session,
                    session.post(f"http://127.0.0.1:{port}/scheduler/filter", data=body) as r):
            assert r.status == 200
            assert (await r.json())["NodeNames"] == ["n1"]
    finally:
        proc.terminate()
        proc.wait(10)
