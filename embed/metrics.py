"""Prometheus metrics of the embedding cache.

* ``CacheCollector`` (the DaemonSet's agent): read from the node-local Redis at scrape time —
  hits, misses, hit ratio, evictions, bytes used and allowed, rows held per table.
* ``ClientMetrics`` (training processes): lookup latency histogram by source and rows served
  from the cache or the store; exported when the process serves a metrics port.
"""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

log = logging.getLogger("sparse.embed")

LATENCY_BUCKETS = (1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 1.0)


class ClientMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.latency = Histogram("sparse_embed_lookup_seconds", "Embedding lookup latency per "
                                 "batch", ["source"], buckets=LATENCY_BUCKETS,
                                 registry=self.registry)
        self.rows = Counter("sparse_embed_lookup_blocks", "Blocks looked up, by where they "
                            "were found", ["result"], registry=self.registry)
        self.fallbacks = Counter("sparse_embed_cache_fallbacks", "Lookups sent to the store "
                                 "because the node cache was unreachable",
                                 registry=self.registry)
        self.hits = 0
        self.misses = 0
        self.tier_hits = 0

    def record(self, source: str, hits: int, misses: int, seconds: float) -> None:
        self.hits += hits
        self.misses += misses
        self.latency.labels(source).observe(seconds)
        self.rows.labels("hit").inc(hits)
        self.rows.labels("miss").inc(misses)

    def record_tier(self, rows: int, seconds: float | None = None) -> None:
        """Rows served from the shared-memory tier (``seconds`` when it served the batch)."""
        self.tier_hits += rows
        self.rows.labels("tier").inc(rows)
        if seconds is not None:
            self.latency.labels("tier").observe(seconds)

    @property
    def hit_ratio(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class CacheCollector:
    """Scrape-time view of the node cache (one INFO call per scrape)."""

    def __init__(self, cache: Any, table_rows: Any = None, tier_rows: Any = None) -> None:
        self.cache = cache
        self.table_rows = table_rows  # callable -> {table: rows}, the publisher's last count
        self.tier_rows = tier_rows  # callable -> {table: blocks}, the shared-memory tier's

    def collect(self):
        try:
            stats = self.cache.info("stats")
            memory = self.cache.info("memory")
        except Exception as exc:  # a scrape must not fail because the cache restarts
            log.warning("cache metrics unavailable: %s", exc)
            up = GaugeMetricFamily("sparse_embed_cache_up", "Node cache reachable")
            up.add_metric([], 0)
            yield up
            return
        hits, misses = int(stats.get("keyspace_hits", 0)), int(stats.get("keyspace_misses", 0))
        up = GaugeMetricFamily("sparse_embed_cache_up", "Node cache reachable")
        up.add_metric([], 1)
        yield up
        for name, value, doc in (("hits", hits, "Block lookups found in the node cache"),
                                 ("misses", misses, "Block lookups not in the node cache"),
                                 ("evictions", int(stats.get("evicted_keys", 0)),
                                  "Blocks evicted by the cache's LFU policy")):
            c = CounterMetricFamily(f"sparse_embed_cache_{name}", doc)
            c.add_metric([], value)
            yield c
        ratio = GaugeMetricFamily("sparse_embed_cache_hit_ratio",
                                  "Hits / (hits + misses) since the cache started")
        ratio.add_metric([], hits / (hits + misses) if hits + misses else 0.0)
        yield ratio
        used = GaugeMetricFamily("sparse_embed_cache_bytes", "Memory used by the node cache")
        used.add_metric([], int(memory.get("used_memory", 0)))
        yield used
        cap = GaugeMetricFamily("sparse_embed_cache_max_bytes", "The cache's maxmemory")
        cap.add_metric([], int(memory.get("maxmemory", 0)))
        yield cap
        if self.table_rows is not None:
            rows = GaugeMetricFamily("sparse_embed_cache_rows", "Rows held per table",
                                     labels=["table"])
            for table, n in sorted(self.table_rows().items()):
                rows.add_metric([table], n)
            yield rows
        if self.tier_rows is not None:
            tier = GaugeMetricFamily("sparse_embed_tier_blocks", "Blocks per table in the "
                                     "shared-memory tier's snapshots", labels=["table"])
            for table, n in sorted(self.tier_rows().items()):
                tier.add_metric([table], n)
            yield tier
