"""Shared fixtures: a real redis-server on a free port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.redis_server import RedisNotInstalled, RedisServer


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    try:
        server = RedisServer()
    except RedisNotInstalled as e:
        pytest.fail(f"{e} (run `make setup`, which installs it)")
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    redis_server.flush()
    return redis_server.url


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent
