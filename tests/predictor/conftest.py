"""Fixtures for the predictor tests: a real redis-server on a free port, a toy dataset."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a throw-away redis-server (skipped only when the binary is missing)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server binary not found on PATH (apt-get install redis-server)")
    port = _free_port()
    workdir = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(workdir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"redis-server did not start on port {port}")
            time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0"
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture
async def redis_client(redis_server: str) -> AsyncIterator[object]:
    import redis.asyncio as aioredis

    client = aioredis.from_url(redis_server, decode_responses=True)
    await client.flushdb()
    yield client
    await client.aclose()
