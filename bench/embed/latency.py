"""Per-batch lookup latency and throughput: local hit, local miss, store direct, and the store
behind toxiproxy with added latency.

Each batch is ``batch`` Zipf ids over a ``rows`` x ``dim`` fp32 table (one row per key). Paths:

* ``local-hit``: the node cache holds every row of the batch in its shared-memory tier
  (``embed.tier``: the agent's ``TierBuilder`` wrote it from the warm node Redis; the client
  maps it read-only): a ``searchsorted`` and a gather, no round trip;
* ``local-hit-redis``: the node-local Redis (Unix socket) holds every row: one ``MGET``;
* ``process-hit``: the client's in-process tier (``embed.hot``) has every row pinned;
* ``local-miss``: the cache is emptied before each batch: cache MGET + store MGET + cache fill;
* ``store-direct``: the store over loopback TCP, no cache;
* ``store+Nms``: the store through toxiproxy adding N ms to each reply (toxiproxy's latency
  toxic takes whole milliseconds, so 0.5 ms is read off the line through the 0, 1 and 2 ms
  points: the time is linear in the added latency, one round trip per batch);
* ``local-miss+Nms``: a miss whose store is behind the same proxy.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench.embed.servers import Toxiproxy
from bench.embed.zipf import ZipfIds
from bench.redis_server import RedisServer
from embed.cache import ReadThrough
from embed.client import EmbeddingClient
from embed.hot import HotRows
from embed.layout import TableMeta
from embed.store import EmbeddingStore, connect
from embed.tier import TierBuilder

LATENCIES_MS = (0, 1, 2)


def _stats(times: list[float], batch: int) -> dict:
    t = np.array(times)
    return {"p50_ms": float(np.percentile(t, 50) * 1e3),
            "p99_ms": float(np.percentile(t, 99) * 1e3),
            "lookups_per_s": float(batch * len(t) / t.sum()),
            "lookups_per_s_at_p50": float(batch / np.percentile(t, 50)),
            "batches_per_s": float(len(t) / t.sum())}


def run_latency(rows: int = 200_000, dim: int = 64, batch: int = 4096, batches: int = 40,
                alpha: float = 1.05, seed: int = 0, progress: Callable[[str], None] = print
                ) -> list[dict]:
    """Every path runs once per batch, in rotating order, so a busy machine slows all of them
    alike; separate caches for hits (kept warm) and misses (emptied before each batch)."""
    rng = np.random.default_rng(seed)
    ids = ZipfIds(rows, alpha, seed)
    work = [ids.sample(batch, rng) for _ in range(batches)]
    servers: list = []
    try:
        store_srv, miss_srv = (RedisServer(unixsocket=True) for _ in range(2))
        hit_srv = RedisServer(unixsocket=True, maxmemory_policy="allkeys-lfu")
        servers += [store_srv, hit_srv, miss_srv]
        proxy = Toxiproxy()
        servers.append(proxy)
        store = EmbeddingStore.from_url(store_srv.url)
        meta = TableMeta("bench", rows, dim)
        progress(f"loading {rows} x {dim} rows into the store")
        data = rng.standard_normal((rows, dim), dtype=np.float32)
        store.write_table(meta, (data[i:i + 50_000] for i in range(0, rows, 50_000)))
        hit_cache, miss_cache = connect(hit_srv.unix_url), connect(miss_srv.unix_url)
        hit, miss = ReadThrough(hit_cache, store), ReadThrough(miss_cache, store)
        pinned = EmbeddingClient("bench", cache_url=hit_srv.unix_url, store_url=store_srv.url,
                                 as_tensor=False, prefetch=False, tier_dir="")
        pinned.hot = HotRows(rows, window=len(work), refresh_every=len(work))
        tier_dir = Path(hit_srv.dir) / "tier"
        tiered = EmbeddingClient("bench", cache_url=hit_srv.unix_url, store_url=store_srv.url,
                                 as_tensor=False, prefetch=False, tier_dir=str(tier_dir))
        paths: dict[str, tuple[float, Callable[[np.ndarray], object], Callable | None]] = {
            "local-hit": (0.0, tiered.lookup, None),
            "local-hit-redis": (0.0, lambda b: hit.lookup("bench", b), None),
            "process-hit": (0.0, pinned.lookup, None),
            "local-miss": (0.0, lambda b: miss.lookup("bench", b), miss_cache.flushdb),
            "store-direct": (0.0, lambda b: store.lookup("bench", b), None),
        }
        for ms in LATENCIES_MS:
            port = proxy.proxy(f"store{ms}", store_srv.port)
            proxy.set_latency(f"store{ms}", ms)
            far = EmbeddingStore.from_url(f"redis://127.0.0.1:{port}/0")
            far.meta("bench")
            paths[f"store+{ms}ms"] = (float(ms), lambda b, f=far: f.lookup("bench", b), None)
            far_miss = ReadThrough(miss_cache, far)
            paths[f"local-miss+{ms}ms"] = (
                float(ms), lambda b, r=far_miss: r.lookup("bench", b), miss_cache.flushdb)
        for b in work:  # warm: every row of the batches in the hit cache, connections up
            hit.lookup("bench", b)
            pinned.lookup(b)
        held = TierBuilder(connect(hit_srv.unix_url), store.meta, tier_dir,
                           budget_bytes=rows * meta.row_bytes).refresh()
        progress(f"shared-memory tier: {held.get('bench', 0)} rows")
        pinned.hot.refresh_every = 10**9  # pinned: every row of the batches, no refresh
        for _, fn, _ in paths.values():
            fn(work[0])
        times: dict[str, list[float]] = {p: [] for p in paths}
        names = list(paths)
        for i, b in enumerate(work):
            for name in names[i % len(names):] + names[:i % len(names)]:
                _, fn, before = paths[name]
                if before is not None:
                    before()
                t0 = time.perf_counter()
                fn(b)
                times[name].append(time.perf_counter() - t0)
    finally:
        for srv in reversed(servers):
            srv.stop()
    out = []
    for name, (added, _, _) in paths.items():
        row = {"path": name, "added_ms": added, "batch": batch, "dim": dim,
               **_stats(times[name], batch)}
        out.append(row)
        progress(f"{name:>16}: p50 {row['p50_ms']:.2f} ms, p99 {row['p99_ms']:.2f} ms, "
                 f"{row['lookups_per_s'] / 1e6:.3f} M lookups/s")
    return out


def at_latency(rows: list[dict], prefix: str, ms: float) -> dict:
    """Interpolate a path's p50/p99/throughput at ``ms`` added latency from measured points."""
    pts = sorted((r["added_ms"], r) for r in rows if r["path"].startswith(prefix + "+"))
    xs = np.array([p[0] for p in pts])
    out = {"path": f"{prefix}+{ms}ms (interpolated)", "added_ms": ms}
    for key in ("p50_ms", "p99_ms"):
        out[key] = float(np.interp(ms, xs, [p[1][key] for p in pts]))
    per_batch = np.interp(ms, xs, [1.0 / p[1]["batches_per_s"] for p in pts])
    out["batches_per_s"] = float(1.0 / per_batch)
    out["lookups_per_s"] = float(pts[0][1]["batch"] / per_batch)
    out["batch"], out["dim"] = pts[0][1]["batch"], pts[0][1]["dim"]
    out["lookups_per_s_at_p50"] = float(out["batch"] / (out["p50_ms"] / 1e3))
    return out
