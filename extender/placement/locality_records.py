"""What the locality term knows of the cluster, as arrays per node: zone, rack and what each
node's embedding cache published (tables, rows held, readers, their ids per step, its size),
and where each store's shards run. Pure, no I/O: the extender's node and pod watches (and the
locality replay) feed it; ``locality.LocalityIndex`` scores from it.

Updates are cheap when nothing changed (a node's annotation and labels are compared first),
and every change gives the node a fresh ``stamp``, so that kept results (``BonusMemo``) are
recomputed only for the nodes that moved.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping

import numpy as np

from extender.annotations import ANN_EMBEDDING_CACHE, DEFAULT_RACK_LABEL, LABEL_ZONE
from extender.placement.cache_room import gather
from extender.placement.embedding_annotations import CacheContent, decode_cache


def positions(index: Mapping[str, int], names: list[str]) -> np.ndarray:
    """Per name: its position in ``index``, -1 when it has none."""
    if not names:
        return np.zeros(0, dtype=np.int64)
    try:  # every name known: one C-level lookup
        found = operator.itemgetter(*names)(index)
    except KeyError:
        return np.array([index.get(n, -1) for n in names], dtype=np.int64)
    return np.array(found if len(names) != 1 else [found], dtype=np.int64)


class LocalityRecords:
    """Per node: zone, rack and cache content; per store: the nodes its shards run on. Kept up
    to date from Node and Pod events; queried with vectors. ``zone_label`` and ``rack_label``
    name the node labels read (``LocalityIndex`` takes them from its weights)."""

    zone_label: str = LABEL_ZONE
    rack_label: str = DEFAULT_RACK_LABEL

    def __init__(self) -> None:
        self.slot: dict[str, int] = {}
        self.zone_id = np.zeros(0, dtype=np.int64)  # 0 = unknown
        self.rack_id = np.zeros(0, dtype=np.int64)
        self.fill = np.zeros(0)
        self._any_fill: bool | None = None  # whether some cache holds something (None: ask)
        self.cap_bytes = np.zeros(0)  # the cache's maxmemory (0 = not published)
        self.row_bytes = np.zeros(0)  # bytes per cached row, from used bytes / rows (0 = unknown)
        self.active = np.zeros(0)  # tables that running pods on the node read
        self.pods = np.zeros(0)  # running pods on the node that read embeddings (-1: unknown)
        # Per node slot, the tables its cache published (entries, padded to the widest node):
        # column id (``col``; -1 = none), rows cached, readers, their ids per step summed.
        self.col: dict[str, int] = {}
        self.ent_col = np.full((0, 0), -1, dtype=np.int64)
        self.ent_held = np.zeros((0, 0))
        self.ent_readers = np.zeros((0, 0))
        self.ent_ids = np.zeros((0, 0))
        self.total = np.zeros(0)  # per column: the table's size in rows (0 = unknown)
        self._ids: dict[str, int] = {}
        self._seen: dict[str, tuple[str | None, str | None, str | None]] = {}
        self.store_nodes: dict[str, frozenset[str]] = {}
        # Per slot, a stamp that changes whenever the node's labels or cache do: a pod
        # shape's bonus is recomputed only for the nodes whose stamp moved (``BonusMemo``).
        self.stamp = np.zeros(0, dtype=np.int64)
        self._clock = 0
        self._row_size: tuple[int, float] | None = None  # (clock, value)

    # --- updates ------------------------------------------------------------------------

    def _id(self, value: str | None) -> int:
        return 0 if not value else self._ids.setdefault(value, len(self._ids) + 1)

    def _slot(self, name: str) -> int:
        i = self.slot.get(name)
        if i is None:
            i = self.slot[name] = len(self.slot)
            if i >= len(self.zone_id):
                grow = max(64, 2 * len(self.zone_id))
                self.zone_id = np.resize(self.zone_id, grow)
                self.rack_id = np.resize(self.rack_id, grow)
                for attr in ("fill", "cap_bytes", "row_bytes", "active", "pods"):
                    setattr(self, attr, np.resize(getattr(self, attr), grow))
                self._grow_entries(grow, self.ent_col.shape[1])
                self.stamp = np.resize(self.stamp, grow)
            self._touch(i)
            self.zone_id[i] = self.rack_id[i] = 0
            self.fill[i] = self.cap_bytes[i] = self.row_bytes[i] = self.active[i] = 0.0
            self.pods[i] = 0.0
            self._any_fill = None
        return i

    def _touch(self, i: int) -> None:
        self._clock += 1
        self.stamp[i] = self._clock

    def _grow_entries(self, n_slots: int, width: int) -> None:
        for attr in ("ent_col", "ent_held", "ent_readers", "ent_ids"):
            old = getattr(self, attr)
            new = np.full((n_slots, width), -1 if attr == "ent_col" else 0, dtype=old.dtype)
            new[:old.shape[0], :old.shape[1]] = old
            setattr(self, attr, new)

    def _col(self, table: str) -> int:
        c = self.col.get(table)
        if c is None:
            c = self.col[table] = len(self.col)
            if c >= len(self.total):
                self.total = np.concatenate([self.total, np.zeros(max(16, len(self.total)))])
        return c

    def observe_node(self, name: str, annotations: Mapping[str, str] | None,
                     labels: Mapping[str, str] | None) -> bool:
        """Record a node's labels and cache annotation; False when nothing changed."""
        labels = labels or {}
        key = ((annotations or {}).get(ANN_EMBEDDING_CACHE), labels.get(self.zone_label),
               labels.get(self.rack_label))
        if self._seen.get(name) == key:
            return False
        self._seen[name] = key
        i = self._slot(name)
        self._touch(i)
        self.zone_id[i] = self._id(key[1] and f"zone:{key[1]}")
        self.rack_id[i] = self._id(key[2] and f"rack:{key[1]}/{key[2]}")
        self._set_cache(i, decode_cache(key[0]))
        return True

    def _set_cache(self, i: int, content: CacheContent | None) -> None:
        self.ent_col[i] = -1
        self.ent_held[i] = self.ent_readers[i] = self.ent_ids[i] = 0.0
        self.fill[i] = self.cap_bytes[i] = self.row_bytes[i] = self.active[i] = 0.0
        self.pods[i] = 0.0
        self._any_fill = None
        if content is None:
            return
        self.pods[i] = -1.0 if content.pods is None else content.pods
        self.fill[i] = content.fill
        self.cap_bytes[i] = content.capacity_bytes
        self.row_bytes[i] = content.row_bytes
        self.active[i] = content.tables_in_use
        entries = content.entries()
        if len(entries) > self.ent_col.shape[1]:
            self._grow_entries(self.ent_col.shape[0], len(entries))
        for e, (table, held, readers, ids) in enumerate(entries):
            self.ent_col[i, e] = self._col(table)
            self.ent_held[i, e] = held
            self.ent_readers[i, e] = readers
            self.ent_ids[i, e] = ids
        for table, total in content.totals.items():
            c = self._col(table)
            self.total[c] = max(self.total[c], total)

    def cache_of(self, name: str) -> dict[str, dict[str, int]]:
        """What the index knows of a node's cache, per table: rows held, readers and their ids
        per step (empty when the node published nothing); for inspection."""
        i = self.slot.get(name)
        if i is None or not self.ent_col.shape[1]:
            return {}
        names = {c: t for t, c in self.col.items()}
        return {names[int(c)]: {"rows": int(h), "readers": int(r), "ids": int(d)}
                for c, h, r, d in zip(self.ent_col[i], self.ent_held[i], self.ent_readers[i],
                                      self.ent_ids[i], strict=True) if c >= 0}

    @property
    def table_total(self) -> dict[str, int]:
        """Per table: its size in rows, where a cache published it."""
        return {t: int(self.total[c]) for t, c in self.col.items() if self.total[c] > 0}

    def forget_node(self, name: str) -> None:
        i = self.slot.get(name)
        if i is not None:
            self._seen.pop(name, None)
            self._touch(i)
            self.zone_id[i] = self.rack_id[i] = 0
            self._set_cache(i, None)

    def set_store(self, store: str, nodes: frozenset[str] | set[str]) -> None:
        if nodes:
            self.store_nodes[store] = frozenset(nodes)
        else:
            self.store_nodes.pop(store, None)

    # --- queries ------------------------------------------------------------------------

    def slots_of(self, names: list[str]) -> np.ndarray:
        """Slot per name, -1 for nodes never seen."""
        return positions(self.slot, names)

    _gather = staticmethod(gather)

    def store_places(self, store: str) -> tuple[set[int], set[int]]:
        """(rack ids, zone ids) where the store's shards run; empty when unknown."""
        slots = self.slots_of(sorted(self.store_nodes.get(store, ())))
        slots = slots[slots >= 0]
        racks = {int(r) for r in self.rack_id[slots] if r}
        zones = {int(z) for z in self.zone_id[slots] if z}
        return racks, zones

    def row_size(self) -> float:
        """Bytes a row takes, as the caches publish it (median over nodes; 0 = unknown)."""
        if self._row_size is not None and self._row_size[0] == self._clock:
            return self._row_size[1]
        known = self.row_bytes[:len(self.slot)]
        known = known[known > 0]
        value = float(np.median(known)) if len(known) else 0.0
        self._row_size = (self._clock, value)
        return value

    def tables_held(self, tables: tuple[str, ...], name: str) -> float:
        """Share of ``tables`` of which the node's cache holds rows (0 for an unknown node)."""
        i = self.slot.get(name)
        if i is None or not tables or not self.ent_col.shape[1]:
            return 0.0
        held = {int(c) for c, h in zip(self.ent_col[i], self.ent_held[i], strict=True)
                if c >= 0 and h >= 1}
        return sum(self.col.get(t, -1) in held for t in tables) / len(tables)

    def warm_nodes(self, tables: tuple[str, ...]) -> list[str]:
        """Nodes whose cache holds rows of any of ``tables``."""
        cols = [self.col[t] for t in tables if t in self.col]
        if not cols or not self.ent_col.shape[1]:
            return []
        n = len(self.slot)
        hit = (np.isin(self.ent_col[:n], cols) & (self.ent_held[:n] >= 1)).any(axis=1)
        names = list(self.slot)
        return [names[i] for i in np.flatnonzero(hit).tolist()]

    def shard_share(self, store: str, place_id: np.ndarray, slots: np.ndarray) -> np.ndarray:
        """Per node: share of the store's shards in its rack (``place_id`` = ``rack_id``) or
        zone (``zone_id``). A table's blocks are spread over all shards, so a job reads that
        share of its misses without leaving its rack (zone); 1 when the store sits in one.
        Shards on nodes without the label count in no rack (zone)."""
        shards = self.slots_of(sorted(self.store_nodes.get(store, ())))
        shards = shards[shards >= 0]
        if not len(shards) or not len(place_id):
            return np.zeros(len(slots))
        ids = place_id[shards].astype(np.int64)
        counts = np.bincount(ids[ids > 0], minlength=int(place_id.max()) + 1).astype(float)
        mine = self._gather(place_id, slots).astype(np.int64)
        return np.where(mine > 0, counts[np.clip(mine, 0, len(counts) - 1)], 0.0) / len(shards)
