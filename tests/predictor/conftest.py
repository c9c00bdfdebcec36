"""Fixtures for the predictor tests: a real redis-server on a free port, a toy dataset."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from bench.redis_server import RedisNotInstalled, RedisServer


@pytest.fixture(scope="session")
def redis_server() -> Iterator[str]:
    """URL of a throw-away redis-server (skipped only when the binary is missing)."""
    try:
        server = RedisServer()
    except RedisNotInstalled as e:
        pytest.skip(str(e))
    yield server.url
    server.stop()


@pytest.fixture
async def redis_client(redis_server: str) -> AsyncIterator[object]:
    import redis.asyncio as aioredis

    client = aioredis.from_url(redis_server, decode_responses=True)
    await client.flushdb()
    yield client
    await client.aclose()
