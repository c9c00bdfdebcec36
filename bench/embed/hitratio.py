"""Hit ratio of the node cache's engine (redis-server, ``maxmemory`` + ``allkeys-lfu``, the
chart's settings) against Belady's offline optimum, on Zipf ids over a large table.

The trace: ``batches`` batches of ``batch`` Zipf(alpha) ids over ``rows`` ids; each batch is
looked up as the client does it (unique ids, one MGET, an MSET of the misses), so both the
engine and MIN see the sequence of per-batch unique keys. Capacity is a share of the table in
rows; Redis' ``maxmemory`` is set to hold that many keys of the real key format (measured per
key on the same server), and the keys it actually held at the end are reported. Values are
16 bytes (the hit ratio depends on how many rows fit, not on their size); ``maxmemory-samples``
is 10 as in the chart (Redis' default 5 approximates LFU more coarsely); ``allkeys-lru`` is
replayed too, for reference.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from bench.embed.belady import belady_hits, next_use
from bench.embed.zipf import ZipfIds
from bench.redis_server import RedisServer
from embed.admission import Admission
from embed.cache import LFU_SETTINGS
from embed.store import connect

VALUE = b"\x00" * 16
CHUNK = 4096


def make_trace(rows: int, batches: int, batch: int, alpha: float, seed: int
               ) -> tuple[np.ndarray, np.ndarray, ZipfIds]:
    """Concatenated per-batch unique ids and the batch boundaries."""
    rng = np.random.default_rng(seed)
    zipf = ZipfIds(rows, alpha, seed)
    parts = [np.unique(zipf.sample(batch, rng)) for _ in range(batches)]
    bounds = np.cumsum([0] + [len(p) for p in parts])
    return np.concatenate(parts), bounds, zipf


def _keys(ids: np.ndarray) -> list[bytes]:
    return [b"emb:{t}:%d" % i for i in ids.tolist()]


def memory_for(c, capacity: int, rows: int) -> int:
    """used_memory of this server holding ``capacity`` keys of the trace's format (ids of the
    same magnitude), measured, then emptied."""
    c.flushall()
    ids = np.arange(rows - capacity, rows)
    for i in range(0, capacity, CHUNK):
        c.mset(dict.fromkeys(_keys(ids[i:i + CHUNK]), VALUE))
    used = int(c.info("memory")["used_memory"])
    c.flushall()
    return used


def replay(trace: np.ndarray, bounds: np.ndarray, capacity: int, policy: str,
           rows: int, settings: dict[str, str] | None = None, admission: bool = True) -> dict:
    """Replay through a fresh redis-server bounded to the memory of ``capacity`` keys, with
    the node cache's settings (``embed.cache.LFU_SETTINGS``) unless ``settings`` are given."""
    srv = RedisServer()
    try:
        c = connect(srv.url)
        for name, value in (LFU_SETTINGS if settings is None else settings).items():
            c.config_set(name, value)
        c.config_set("maxmemory", str(memory_for(c, capacity, rows)))
        c.config_set("maxmemory-policy", policy)
        hits = 0
        admit = Admission(c, check_s=0.5) if admission else None
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            keys = _keys(trace[lo:hi])
            values = c.mget(keys)
            missing = np.array([v is None for v in values])
            hits += len(keys) - int(missing.sum())
            if admit is not None:  # as the client does (embed.cache.ReadThrough)
                missing = admit.fill_mask("t", trace[lo:hi], len(VALUE), missing)
            if missing.any():
                c.mset(dict.fromkeys([keys[i] for i in np.flatnonzero(missing)], VALUE))
        held = int(c.dbsize())
        evicted = int(c.info("stats")["evicted_keys"])
    finally:
        srv.stop()
    return {"hits": hits, "held": held, "evicted": evicted}


def run_hitratio(rows: int = 10_000_000, batches: int = 600, batch: int = 4096,
                 alpha: float = 1.05, shares: tuple[float, ...] = (0.01, 0.05, 0.20),
                 policies: tuple[str, ...] = ("allkeys-lfu", "allkeys-lru"), seed: int = 0,
                 progress: Callable[[str], None] = print) -> list[dict]:
    trace, bounds, zipf = make_trace(rows, batches, batch, alpha, seed)
    progress(f"trace: {len(trace)} lookups ({batches} batches of {batch} Zipf({alpha}) ids over "
             f"{rows} rows), {len(np.unique(trace))} distinct")
    nxt = next_use(trace)
    ranks = zipf.ranks_of(trace)
    out = []
    for share in shares:
        capacity = int(rows * share)
        opt = int(belady_hits(trace, capacity, nxt).sum())
        row = {"rows": rows, "share": share, "capacity": capacity, "lookups": len(trace),
               "batches": batches, "batch": batch, "alpha": alpha,
               "belady": opt / len(trace),
               # an oracle that knows the popularity and holds the top ids from the start
               "static_top_k": float((ranks < capacity).mean())}
        for policy in policies:
            got = replay(trace, bounds, capacity, policy, rows)
            name = policy.removeprefix("allkeys-")
            row[name] = got["hits"] / len(trace)
            row[f"{name}_held"] = got["held"]
            row[f"{name}_evicted"] = got["evicted"]
        row["lfu_over_belady"] = row.get("lfu", np.nan) / row["belady"] if row["belady"] else 0
        out.append(row)
        progress(f"cache {share:.0%} ({capacity} rows): Belady {row['belady']:.3f}, " + ", ".join(
            f"{p.removeprefix('allkeys-')} {row[p.removeprefix('allkeys-')]:.3f}"
            for p in policies) + f" (LFU/Belady {row['lfu_over_belady']:.3f})")
    return out
