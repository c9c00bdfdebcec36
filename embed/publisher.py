"""Publish what the node cache holds on the Node (annotation ``sparse.io/embedding-cache``), at
a bounded rate, for the scheduler's locality term (``extender.placement.locality``).

Content: rows per table (cached blocks x block rows, counted with ``SCAN``, so Redis is never
blocked), each table's size from the store's metadata, bytes used and ``maxmemory``, and the
readers per table: the running pods on the node that declare it (``sparse.io/embedding``; one
pod list by ``spec.nodeName``, at most once per ``min_interval_s``) and the ids per step they
declare (``idsPerStep``, summed per table), which lets the scheduler tell the tables in use
from leftovers and split the cache's room as its LFU policy will (by how often each table's
rows are read). A patch is
sent at most every ``min_interval_s`` and only when the content moved materially (a table came
or went, or its rows changed by more than ``min_change``), plus every ``max_interval_s`` so a
reader can tell a live cache from a stale annotation.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from embed import layout
from embed.admission import Admission
from embed.store import EmbeddingStore
from extender.annotations import ANN_EMBEDDING_CACHE
from extender.placement.embedding_annotations import InvalidEmbedding, encode_cache, parse_embedding

log = logging.getLogger("sparse.embed.publisher")
MERGE = "application/merge-patch+json"


@dataclass(frozen=True)
class Snapshot:
    rows: dict[str, int]
    totals: dict[str, int]
    used_bytes: int
    capacity_bytes: int
    readers: dict[str, int] | None = None  # None = not counted
    ids: dict[str, int] | None = None  # per table: the readers' declared ids per step, summed
    row_bytes: float = 0.0  # bytes one cached row takes (0 = unknown)
    pods: int | None = None  # running pods on the node that read embeddings (None = not counted)


@dataclass(frozen=True)
class Readers:
    """The pods on the node that read embeddings: per table (``per_table``, as ``Snapshot``'s
    ``readers``) with the ids per step they declare, and in all (``pods``: a pod reading
    several tables counts once, as ``Snapshot``'s ``pods``)."""

    per_table: dict[str, int]
    ids: dict[str, int]
    pods: int = 0


def count_readers(annotations: Iterable[Mapping[str, str] | None]) -> Readers:
    """Per table, from the pods' ``sparse.io/embedding`` declarations: the pods that read it
    and their declared ids per step, summed (``idsPerStep``; pods without it add no ids).
    Unreadable declarations are skipped: the scheduler rejects those pods anyway."""
    per_table: dict[str, int] = {}
    ids: dict[str, int] = {}
    pods = 0
    for ann in annotations:
        try:
            spec = parse_embedding(ann)
        except InvalidEmbedding:
            continue
        if spec is None:
            continue
        pods += 1
        for table in spec.tables:
            per_table[table] = per_table.get(table, 0) + 1
        for table, n in (spec.ids_per_step or {}).items():
            ids[table] = ids.get(table, 0) + n
    return Readers(per_table, ids, pods)


async def node_readers(core: Any, node: str) -> Readers:
    """Readers per table among the pods running (or starting) on ``node``, and their ids per
    step: one list call."""
    pods = await core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")
    live = [p.metadata.annotations for p in pods.items
            if (p.status.phase if p.status else None) in ("Pending", "Running")]
    return count_readers(live)


def cached_row_bytes(meta: layout.TableMeta) -> float:
    """Bytes one row of ``meta``'s table takes in the cache: its value and its share of the
    block key's overhead."""
    return meta.row_bytes + Admission.KEY_OVERHEAD / meta.block_rows


def store_row_bytes(store: EmbeddingStore | None) -> float:
    """Mean bytes a cached row of the store's tables takes (0 without a store or tables): what
    a cache that holds nothing yet states, so its size in rows is known (one SCAN of the
    store's table metadata; call it once)."""
    metas = store.tables() if store is not None else []
    return float(sum(cached_row_bytes(m) for m in metas) / len(metas)) if metas else 0.0


def count_rows(cache: Any, store: EmbeddingStore | None, scan_count: int = 2000,
               default_row_bytes: float = 0.0) -> Snapshot:
    """Blocks per table in the cache (incremental SCAN), as rows; the bytes a cached row
    takes from the held tables' layouts (weighted by rows held), else ``default_row_bytes``
    (``store_row_bytes``)."""
    blocks: dict[str, int] = {}
    for key in cache.scan_iter(match=f"{layout.PREFIX}{{*", count=scan_count):
        table = layout.table_of_key(key)
        if table is not None:
            blocks[table] = blocks.get(table, 0) + 1
    rows, totals = {}, {}
    sized = weighed = 0.0
    for table, n in blocks.items():
        meta = None
        if store is not None:
            try:
                meta = store.meta(table)
            except (KeyError, ValueError):
                meta = None
        rows[table] = n * (meta.block_rows if meta else 1)
        if meta is not None:
            rows[table] = min(rows[table], meta.rows)
            totals[table] = meta.rows
            sized += rows[table] * cached_row_bytes(meta)
            weighed += rows[table]
    memory = cache.info("memory")
    return Snapshot(rows, totals, int(memory.get("used_memory", 0)),
                    int(memory.get("maxmemory", 0)),
                    row_bytes=sized / weighed if weighed else float(default_row_bytes))


def changed(old: Snapshot | None, new: Snapshot, min_change: float) -> bool:
    if (old is None or set(old.rows) != set(new.rows) or old.readers != new.readers
            or old.ids != new.ids or old.pods != new.pods):
        return True
    return any(abs(new.rows[t] - old.rows[t]) > min_change * max(old.rows[t], 1)
               for t in new.rows)


@dataclass
class CachePublisher:
    node: str
    snapshot: Callable[[], Snapshot]  # usually count_rows bound to the cache and store
    min_interval_s: float = 30.0
    max_interval_s: float = 600.0
    min_change: float = 0.05
    clock: Callable[[], float] = time.time
    # core -> readers per table (a dict, or ``Readers`` with their ids per step)
    readers: Callable[[Any], Awaitable[dict[str, int] | Readers]] | None = None
    last: Snapshot | None = None
    last_at: float = field(default=-1e18)
    writes: int = 0

    def due(self, snap: Snapshot, now: float) -> bool:
        if now - self.last_at < self.min_interval_s:
            return False
        return changed(self.last, snap, self.min_change) or (
            now - self.last_at >= self.max_interval_s)

    async def publish_once(self, core: Any, force: bool = False) -> bool:
        """Count, and patch the Node when due; True when a patch was sent."""
        snap = await asyncio.to_thread(self.snapshot)
        now = self.clock()
        if not force and now - self.last_at < self.min_interval_s:
            return False
        if self.readers is not None:
            got = await self.readers(core)
            snap = (dataclasses.replace(snap, readers=got.per_table, ids=got.ids, pods=got.pods)
                    if isinstance(got, Readers) else dataclasses.replace(snap, readers=got))
        if not force and not self.due(snap, now):
            return False
        value = encode_cache(snap.rows, snap.totals, snap.used_bytes, snap.capacity_bytes, now,
                             snap.readers, snap.ids, snap.row_bytes, snap.pods)
        body = {"metadata": {"annotations": {ANN_EMBEDDING_CACHE: value}}}
        await core.patch_node(self.node, body, _content_type=MERGE)
        self.last, self.last_at = snap, now
        self.writes += 1
        log.info("published cache content of node %s: %s", self.node,
                 ", ".join(f"{t}={n}" for t, n in sorted(snap.rows.items())) or "empty")
        return True

    async def run(self, core: Any, tick_s: float = 5.0) -> None:
        while True:
            try:
                await self.publish_once(core)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # API server or cache briefly away: try next tick
                log.warning("cannot publish cache content: %s", exc)
            await asyncio.sleep(tick_s)
