"""Redis clients for the ledger: bounded waits everywhere, never a hang, never a 5-second stall.

* A *blocking* pool: when every connection is busy a request waits (up to ``pool_wait_s``)
  instead of failing at once (redis-py's default pool raises at its limit).
* Socket and connect timeouts well below the scheduler's extender ``httpTimeout`` (5 s in the
  shipped scheduler config): a frozen Redis costs a request at most ``socket_timeout_s``.
* No retry after a timeout (a script that timed out may have run; the caller decides), one
  after a broken connection.
* ``sentinel://host1:26379,host2:26379/<master-name>[/db]``: the master is found through
  Sentinel and followed across failovers; ``on_master_change`` fires when it moves.

A password (``--redis-password-file`` or ``SPARSE_REDIS_PASSWORD``) is used for Redis and for
the sentinels alike; one inside a ``redis://:pw@host`` URL takes precedence for that URL.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote

import redis.asyncio as aioredis
from redis import exceptions as rex
from redis.asyncio.connection import BlockingConnectionPool
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import NoBackoff

log = logging.getLogger("sparse.ledger.redis")

SENTINEL_SCHEME = "sentinel://"


@dataclass(frozen=True)
class RedisOptions:
    password: str | None = None
    socket_timeout_s: float = 1.0
    connect_timeout_s: float = 0.5
    pool_size: int = 64  # connections per replica; more requests wait for one
    pool_wait_s: float = 1.0
    min_replicas: int = 0  # replicas that must hold a change before it is acknowledged
    replica_wait_ms: int = 500

    def connection_kwargs(self) -> dict[str, object]:
        kwargs: dict[str, object] = {
            "socket_timeout": self.socket_timeout_s,
            "socket_connect_timeout": self.connect_timeout_s,
            # One retry on a broken connection (a pooled one that a Redis restart or
            # failover closed), none on a timeout: a retried change is harmless (every
            # script is idempotent and reports "no change"), a doubled wait is not.
            "retry": Retry(NoBackoff(), 1, supported_errors=(rex.ConnectionError,)),
            "health_check_interval": 0,
        }
        if self.password:
            kwargs["password"] = self.password
        return kwargs


@dataclass(frozen=True)
class SentinelTarget:
    sentinels: tuple[tuple[str, int], ...]
    master: str
    db: int = 0


def parse_sentinel_url(url: str) -> SentinelTarget:
    """``sentinel://h1:26379,h2:26379/mymaster[/db]`` -> hosts, master name, db."""
    if not url.startswith(SENTINEL_SCHEME):
        raise ValueError(f"not a sentinel:// URL: {url!r}")
    hosts, _, path = url[len(SENTINEL_SCHEME):].partition("/")
    parts = [p for p in path.split("/") if p]
    if not hosts or not parts or len(parts) > 2:
        raise ValueError(f"expected sentinel://host:port[,host:port...]/<master-name>[/db],"
                         f" got {url!r}")
    sentinels = []
    for item in hosts.split(","):
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"sentinel address {item!r} is not host:port")
        sentinels.append((host.strip("[]"), int(port)))
    if len(parts) == 2 and not parts[1].isdigit():
        raise ValueError(f"database {parts[1]!r} in {url!r} is not a number")
    return SentinelTarget(tuple(sentinels), unquote(parts[0]),
                          int(parts[1]) if len(parts) == 2 else 0)


class _BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """Sentinel's master discovery with the blocking pool's waiting; tells when the master
    moves (its data may be behind what this replica saw: a failover loses async writes)."""

    def __init__(self, service_name: str, sentinel_manager: Sentinel,
                 on_master_change: Callable[[tuple[str, int]], None], **kwargs: object) -> None:
        super().__init__(service_name, sentinel_manager, **kwargs)
        self._on_master_change = on_master_change
        self._known: tuple[str, int] | None = None  # survives the pool's reset()

    async def get_master_address(self):  # type: ignore[no-untyped-def]
        address = await super().get_master_address()
        if self._known is not None and address != self._known:
            log.warning("redis master moved from %s:%s to %s:%s", *self._known, *address)
            self._on_master_change(address)
        self._known = address
        return address


def make_client(url: str, options: RedisOptions,
                on_master_change: Callable[[tuple[str, int]], None] = lambda a: None,
                ) -> aioredis.Redis:
    """A client for ``redis://``, ``rediss://``, ``unix://`` or ``sentinel://`` URLs."""
    kwargs = options.connection_kwargs()
    if url.startswith(SENTINEL_SCHEME):
        target = parse_sentinel_url(url)
        sentinel_kwargs = {k: v for k, v in kwargs.items() if k != "retry"}
        sentinel = Sentinel(list(target.sentinels), sentinel_kwargs=sentinel_kwargs, **kwargs)
        pool = _BlockingSentinelPool(
            target.master, sentinel, on_master_change, max_connections=options.pool_size,
            timeout=options.pool_wait_s, db=target.db, **kwargs)
        return aioredis.Redis(connection_pool=pool)
    pool = BlockingConnectionPool.from_url(url, max_connections=options.pool_size,
                                           timeout=options.pool_wait_s, **kwargs)
    return aioredis.Redis(connection_pool=pool)


async def close_client(client: aioredis.Redis, timeout_s: float = 2.0) -> None:
    """Close every connection, but never let a dead server hold up shutdown."""
    try:
        await asyncio.wait_for(client.aclose(), timeout_s)
    except (TimeoutError, OSError, rex.RedisError) as exc:
        log.warning("closing the Redis client: %s", exc)
