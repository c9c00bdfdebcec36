"""Where predicted demands come from: nowhere (embedded default) or the predictor's Redis hashes."""

from __future__ import annotations

from typing import Protocol

import redis.asyncio as aioredis
from redis import exceptions as rex

from extender.annotations import DEMAND_KEY_PREFIX
from extender.demand import Prediction
from extender.errors import LedgerUnavailable
from extender.ledger.connect import RedisOptions, close_client, make_client


class DemandSource(Protocol):
    async def get(self, pod_uid: str) -> Prediction | None: ...

    async def close(self) -> None: ...


class NoPredictions:
    async def get(self, pod_uid: str) -> Prediction | None:
        return None

    async def close(self) -> None:
        return None


class RedisPredictions:
    """Reads ``sparse:demand:<pod-uid>``: one round trip per pod (not per node)."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._r = client

    @classmethod
    def from_url(cls, url: str, options: RedisOptions | None = None) -> RedisPredictions:
        return cls(make_client(url, options or RedisOptions()))

    @property
    def client(self) -> aioredis.Redis:
        """The connection, shared with the reader of live pair estimates."""
        return self._r

    async def get(self, pod_uid: str) -> Prediction | None:
        try:
            fields = await self._r.hgetall(DEMAND_KEY_PREFIX + pod_uid)
        except (rex.ConnectionError, rex.TimeoutError, OSError) as exc:
            # Guessing without the prediction could book differently than filter did.
            raise LedgerUnavailable(f"predicted demands (Redis) unavailable: {exc}") from exc
        if not fields:
            return None
        return Prediction.from_hash({k.decode(): v.decode() for k, v in fields.items()})

    async def close(self) -> None:
        await close_client(self._r)
