"""Read-through lookups: the node's cache first, the store for what it lacks, then fill.

The node cache is a node-local redis-server started with ``maxmemory`` and
``maxmemory-policy allkeys-lfu`` (the DaemonSet, ``charts/sparse/templates/embed-cache.yaml``):
Redis bounds its memory and evicts by its approximated LFU counter, so no eviction code lives
here. One lookup is one pipelined ``MGET`` to the cache, one to the store for the misses and one
pipelined ``MSET`` back into the cache. Once the cache is full, only misses its doorkeeper
has seen before are written back (``embed.admission``: rows looked up once in a long while
would each evict a row worth keeping). When the cache is unreachable the lookup goes to the
store alone and the cache is tried again after ``retry_s``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import redis

from embed import layout
from embed.admission import Admission
from embed.metrics import ClientMetrics
from embed.store import EmbeddingStore, group_by_tag, mget_blocks

log = logging.getLogger("sparse.embed")

CACHE_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)

# The node cache's eviction settings (the chart's embedCache values mirror them; bench/embed
# measures the hit ratio they give against Belady's optimum).
LFU_SETTINGS = {"maxmemory-policy": "allkeys-lfu", "maxmemory-samples": "10",
                "lfu-log-factor": "1", "lfu-decay-time": "1"}


class ReadThrough:
    def __init__(self, cache: Any | None, store: EmbeddingStore, *, retry_s: float = 5.0,
                 metrics: ClientMetrics | None = None, admission: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cache = cache
        self.admission = Admission(cache, clock=clock) if admission and cache is not None \
            else None
        self.store = store
        self.retry_s = retry_s
        self.metrics = metrics or ClientMetrics()
        self.clock = clock
        self._down_until = 0.0

    @property
    def cache_up(self) -> bool:
        return self.cache is not None and self.clock() >= self._down_until

    def _cache_lost(self, exc: Exception) -> None:
        if self.cache_up:
            log.warning("node cache unreachable (%s); reading the store for %.0f s", exc,
                        self.retry_s)
        self._down_until = self.clock() + self.retry_s
        self.metrics.fallbacks.inc()

    def lookup(self, table: str, ids: np.ndarray) -> np.ndarray:
        """float32 rows (len(ids) x dim) for ``ids``."""
        t0 = time.perf_counter()
        meta = self.store.meta(table)
        ids = layout.check_ids(meta, ids)
        blocks = np.unique(ids // meta.block_rows)
        keys = layout.block_keys(meta, blocks)
        values: list[bytes | None] = [None] * len(keys)
        source = "store"
        if self.cache_up:
            try:
                values = mget_blocks(self.cache, meta, blocks, keys)
                source = "cache"
            except CACHE_ERRORS as exc:
                self._cache_lost(exc)
        absent = np.array([v is None for v in values], dtype=bool)
        missing = np.flatnonzero(absent)
        hits = len(keys) - len(missing)
        if len(missing):
            fetched = self.store.fetch(meta, blocks[missing])
            for i, v in zip(missing.tolist(), fetched, strict=True):
                values[i] = v
            if source == "cache":
                fill = self._admitted(meta, blocks, absent)
                if len(fill):
                        self._fill(meta, blocks[fill], [keys[i] for i in fill.tolist()],
                               [values[i] for i in fill.tolist()])
        out = layout.gather(meta, ids, blocks, values)
        self.metrics.record(source, hits, len(missing), time.perf_counter() - t0)
        return out

    def _admitted(self, meta: layout.TableMeta, blocks: np.ndarray,
                  absent: np.ndarray) -> np.ndarray:
        """Positions of the missed blocks to write into the cache."""
        if self.admission is None:
            return np.flatnonzero(absent)
        try:
            mask = self.admission.fill_mask(meta.name, blocks, meta.block_rows * meta.row_bytes,
                                            absent)
        except CACHE_ERRORS as exc:
            self._cache_lost(exc)
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero(mask)

    def _fill(self, meta: layout.TableMeta, blocks: np.ndarray, keys: list[str],
              values: list[bytes | None]) -> None:
        """Put fetched blocks into the cache (it evicts by LFU when full)."""
        try:
            pipe = self.cache.pipeline(transaction=False)
            for g in group_by_tag(meta, blocks):
                pipe.mset({keys[i]: values[i] for i in g.tolist() if values[i] is not None})
            pipe.execute()
        except CACHE_ERRORS as exc:
            self._cache_lost(exc)
        except redis.ResponseError as exc:  # e.g. OOM with a noeviction policy: still served
            log.warning("node cache refused a fill: %s", exc)
