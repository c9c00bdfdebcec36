"""The training-side client: ``EmbeddingClient(table).lookup(ids) -> torch.Tensor``.

Where things are (all overridable by arguments):

* node cache: ``SPARSE_EMBED_CACHE`` — ``unix:///var/run/sparse-embed/redis.sock`` (the
  DaemonSet's socket, mounted from the host) or ``redis://$(HOST_IP):6390`` (its hostPort,
  ``HOST_IP`` from the downward API ``status.hostIP``);
* store: ``SPARSE_EMBED_STORE`` — ``redis://...`` or ``redis+cluster://...``;
* shared-memory tier: ``SPARSE_EMBED_TIER`` — the folder the agent writes snapshots to
  (``/var/run/sparse-embed/tier`` when it exists; ``embed.tier``).

Lookups take what the node's shared-memory tier holds (mapped read-only, no round trip), go to
the node cache for the rest and fall back to the store when the cache is gone
(``embed.cache.ReadThrough``). ``lookup(ids, next_ids=...)`` starts fetching the next batch in a
background thread while the caller computes; the next ``lookup`` of exactly those ids takes the
prefetched rows. Returns a ``torch.Tensor`` (float32) when torch is installed, else NumPy.
``hot_rows=K`` adds an in-process tier of the K most frequent recent rows (``embed.hot``).
"""

from __future__ import annotations

import importlib.util
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from embed.cache import ReadThrough
from embed.hot import HotRows
from embed.metrics import ClientMetrics
from embed.store import EmbeddingStore, connect
from embed.tier import TierReader

ENV_CACHE = "SPARSE_EMBED_CACHE"
ENV_STORE = "SPARSE_EMBED_STORE"
ENV_HOST_IP = "HOST_IP"
ENV_TIER = "SPARSE_EMBED_TIER"
DEFAULT_SOCKET = "/var/run/sparse-embed/redis.sock"
DEFAULT_TIER = "/var/run/sparse-embed/tier"
DEFAULT_PORT = 6390

HAVE_TORCH = importlib.util.find_spec("torch") is not None  # optional: NumPy without it


def _torch():
    import torch  # imported on first use: it takes seconds, and the cache agent never needs it

    return torch


def cache_url_from_env() -> str | None:
    if os.environ.get(ENV_CACHE):
        return os.environ[ENV_CACHE]
    if os.path.exists(DEFAULT_SOCKET):
        return f"unix://{DEFAULT_SOCKET}"
    if os.environ.get(ENV_HOST_IP):
        return f"redis://{os.environ[ENV_HOST_IP]}:{DEFAULT_PORT}/0"
    return None


def tier_dir_from_env() -> str | None:
    if os.environ.get(ENV_TIER):
        return os.environ[ENV_TIER]
    return DEFAULT_TIER if os.path.isdir(DEFAULT_TIER) else None


class EmbeddingClient:
    def __init__(self, table: str, *, cache_url: str | None = None,
                 store_url: str | None = None, prefetch: bool = True,
                 as_tensor: bool | None = None, metrics: ClientMetrics | None = None,
                 timeout_s: float = 2.0, hot_rows: int = 0, hot_refresh: int = 16,
                 tier_dir: str | None = None) -> None:
        store_url = store_url or os.environ.get(ENV_STORE)
        if not store_url:
            raise ValueError(f"no embedding store: pass store_url or set {ENV_STORE}")
        cache_url = cache_url if cache_url is not None else cache_url_from_env()
        cache = connect(cache_url, socket_timeout=timeout_s,
                        socket_connect_timeout=timeout_s) if cache_url else None
        self.table = table
        self.store = EmbeddingStore(connect(store_url, socket_timeout=10 * timeout_s))
        self.meta = self.store.meta(table)
        self.reader = ReadThrough(cache, self.store, metrics=metrics)
        self.hot = HotRows(hot_rows, refresh_every=hot_refresh)
        tier_dir = tier_dir if tier_dir is not None else tier_dir_from_env()
        self.tier = TierReader(tier_dir) if tier_dir else None
        self.as_tensor = HAVE_TORCH if as_tensor is None else as_tensor
        if self.as_tensor and not HAVE_TORCH:
            raise RuntimeError("as_tensor=True needs torch installed")
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="embed-prefetch") \
            if prefetch else None
        self._ahead: tuple[bytes, Future] | None = None

    @property
    def dim(self) -> int:
        return self.meta.dim

    @property
    def metrics(self) -> ClientMetrics:
        return self.reader.metrics

    def _read(self, ids: np.ndarray) -> np.ndarray:
        snap = self.tier.get(self.meta) if self.tier is not None else None
        if snap is None:
            return self.reader.lookup(self.table, ids)
        t0 = time.perf_counter()
        mask, held = snap.split(ids)
        if len(held) == len(ids):
            self.metrics.record_tier(len(ids), time.perf_counter() - t0)
            return held
        out = np.empty((len(ids), self.meta.dim), dtype=np.float32)
        out[mask] = held
        out[~mask] = self.reader.lookup(self.table, ids[~mask])
        self.metrics.record_tier(len(held))
        return out

    def _fetch(self, ids: np.ndarray) -> np.ndarray:
        if not self.hot.capacity:
            return self._read(ids)
        mask, pinned = self.hot.split(ids)
        if pinned is None:
            out = self._read(ids)
        else:
            out = np.empty((len(ids), self.meta.dim), dtype=np.float32)
            out[mask] = pinned
            if not mask.all():
                out[~mask] = self._read(ids[~mask])
        self.hot.observe(ids, self._read)
        return out

    def prefetch(self, ids: Any) -> None:
        """Start fetching ``ids`` in the background (one batch ahead)."""
        if self._pool is None:
            return
        ids = np.asarray(_numpy(ids), dtype=np.int64).ravel().copy()
        self._ahead = (ids.tobytes(), self._pool.submit(self._fetch, ids))

    def lookup(self, ids: Any, next_ids: Any = None) -> Any:
        """Rows for ``ids`` (shape ids.shape + (dim,)); ``next_ids`` is prefetched."""
        arr = np.asarray(_numpy(ids), dtype=np.int64)
        key = arr.ravel().tobytes()
        rows = None
        if self._ahead is not None:
            ahead_key, future = self._ahead
            self._ahead = None
            if ahead_key == key:
                rows = future.result()
            else:
                future.cancel()
        if rows is None:
            rows = self._fetch(arr.ravel())
        if next_ids is not None:
            self.prefetch(next_ids)
        rows = rows.reshape(*arr.shape, self.meta.dim)
        return _torch().from_numpy(rows) if self.as_tensor else rows

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> EmbeddingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _numpy(ids: Any) -> Any:
    if hasattr(ids, "detach") and hasattr(ids, "cpu"):  # a torch.Tensor, without importing torch
        return ids.detach().cpu().numpy()
    return ids
