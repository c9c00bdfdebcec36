"""Two extender processes sharing one Redis: concurrent binds never over-commit a GPU."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
import redis
from builders import bind_request, free_port, pod

from bench.latency.servers import wait_ready
from extender.ledger.rules import from_json

NODE_CONF = """
nodes:
  - {name: shared-node, gpu: 2, gpu-mem: 32, model: V100M16, uuids: [GPU-s-0, GPU-s-1]}
"""


def start_extender(tmp: Path, store: str, port: int) -> subprocess.Popen:
    conf = tmp / "nodes.yaml"
    conf.write_text(NODE_CONF)
    log = open(tmp / f"extender-{port}.log", "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        [sys.executable, "-m", "extender", "serve", "--port", str(port), "--nodes", str(conf),
         "--store", store, "--log-format", "text"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


@pytest.mark.slow  # two extender processes and 200 binds: ~15 s on a busy 2-core machine
async def test_200_concurrent_binds_from_two_replicas(tmp_path, redis_url):
    ports = [free_port(), free_port()]
    procs = [start_extender(tmp_path, redis_url, p) for p in ports]
    try:
        async with aiohttp.ClientSession() as session:
            for p in ports:
                await wait_ready(p, timeout_s=30, interval_s=0.1)
            pods = [pod(f"p{i}", mem=1024, milli=100) for i in range(200)]

            async def call(port, verb, payload):
                url = f"http://127.0.0.1:{port}/scheduler/{verb}"
                async with session.post(url, data=json.dumps(payload)) as resp:
                    assert resp.status == 200
                    return await resp.json()

            # Each pod is filtered and bound by one replica, alternating, all at once.
            for i, p in enumerate(pods):
                out = await call(ports[i % 2], "filter",
                                 {"Pod": p, "NodeNames": ["shared-node"]})
                assert out["NodeNames"] == ["shared-node"]
            binds = await asyncio.gather(*(
                call(ports[i % 2], "bind", bind_request(p, "shared-node"))
                for i, p in enumerate(pods)
            ))
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)
    ok = [b for b in binds if b["Error"] == ""]
    # Two GPUs x 1000 milli / 100 milli = 20 pods; memory would allow 32.
    assert len(ok) == 20, [b["Error"] for b in binds if b["Error"]][:5]
    client = redis.Redis.from_url(redis_url)
    reservations = [from_json(v) for v in client.hgetall("sparse:ledger:res").values()]
    assert len(reservations) == 20
    per_gpu: dict[str, list[int]] = {}
    for r in reservations:
        for gpu, (mem, milli) in r.per_gpu().items():
            acc = per_gpu.setdefault(gpu, [0, 0])
            acc[0] += mem
            acc[1] += milli
    assert all(mem <= 16384 and milli <= 1000 for mem, milli in per_gpu.values())
    booked = {k.decode(): int(v) for k, v in client.hgetall("sparse:ledger:milli").items()}
    assert booked == {gpu: acc[1] for gpu, acc in per_gpu.items()}
    assert sum(acc[1] for acc in per_gpu.values()) == 2000
    assert pytest.approx(sum(acc[0] for acc in per_gpu.values())) == 20 * 1024
