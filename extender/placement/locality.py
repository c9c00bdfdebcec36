"""Data locality: a cost term that brings embedding consumers to their rows. Pure, no I/O.

A pod declares the embedding store and tables it reads (annotation ``sparse.io/embedding``,
JSON ``{"store": "s", "tables": ["a", "b"], "hotRows": 100000 | {"a": n},
"idsPerStep": 4096 | {"a": n}, "steps": 100000, "stepComputeMs": 12.5, "required": false}``).
Each node's embedding cache publishes what it holds (``sparse.io/embedding-cache``, written by
``embed.publisher``), and the store's shard pods (label ``sparse.io/embedding-store=<store>``)
say where the store runs. Per candidate node the locality *bonus*, in the policy's cost unit
(GPUs' worth of work; the pod's GPU amount scales it like the per-GPU policy costs), is

    bonus(n) = cache_weight * cached share of the job's hot set on n
             + (1 - cached share) * (rack_weight * share of the store's shards in n's rack
                                     + zone_weight * share of the store's shards in n's zone)

and is subtracted from the node's policy cost. The cached share is the share of the job's
traffic the node's cache is expected to serve (``extender.placement.cache_model``): an LFU cache
holds a table's hottest rows first, and ids of recommendation tables are Zipf-distributed
(exponent ``id_skew``, about 1 in click logs), so ``c`` cached rows of a hot set of ``h`` serve
``Z(min(c, h)) / Z(h)`` of its lookups, ``Z(n) = sum_{k<=n} k^-id_skew`` (1 % of a table's rows
serves most of its lookups; a score by row count would call that cache nearly empty). When the
job declares ``idsPerStep`` the share counts the rows its steps *fetch* (a batch's ids are
deduplicated), which is what relieves the store's links. ``id_skew = 0`` scores by row count.
Tables weigh by their hot rows; without ``hotRows`` a table's size from the cache annotation
stands in. When the cache publishes its size and which tables running pods read
(``readers``), the share also counts cache *room*: the cache's rows split over the tables in
use there once the job's new tables join, a warm-up from what is held now to what the room
allows, and the rows the tables in use lose to the newcomer (``squeeze``, per reader). With
``steps`` and ``idsPerStep`` declared, the warm-up is the cache's fill over the job's steps
(``cache_warmup``: the published rows are served at once, the rest of the room fills at the
readers' ids per step), so a warm node scores the warm-up it saves over the job's run. So a
node whose cache already serves the job's tables to other pods ranks first, an idle cache next,
a cache crowded with other tables in use last. Only misses travel: the rack and zone tiers
weigh the share of the job's traffic the cache leaves to the store, times the share of the
store's shards there (a table's blocks are spread over all shards). Defaults 1.0 / 0.5 / 0.2
follow Fluid's node / zone / region tiers (100 / 50 / 20), scored here from measured cache
content instead of labels.

With ``score = "time"`` (the default), when the job also declares ``stepComputeMs`` (a
step's compute alone) and ``idsPerStep`` for every table, the bonus is instead the share of the
job's step time the node saves (``step_time``): its step there (compute, hits at local speed,
misses over its path to the store's shards, each table's served share as the cache fills over
the job's steps, from the same cache model) against the step with nothing cached across
zones, less the step time the readers already on the node lose to it, times ``cache_weight``.
A job whose steps are fetch-bound weighs a warm node near the store heavily; a compute-bound
one barely. The rack and zone tiers are then the network's figures (``network``), not weights.

* Never overrides fit: only finite costs move; infeasible nodes stay infeasible.
* Missing data (no annotation, unknown store, node without labels) gives no bonus: neutral.
* ``required: true``: filter keeps only nodes in a rack of the store's shards (opt-in).
* Pods without embeddings get ``avoid_weight * cache fill`` (0.02 GPUs by default) added on
  *idle* nodes only: between idle nodes the policies' costs differ by little more than their
  node order, so this keeps cache-rich nodes for the jobs that read them when the choice is
  otherwise free, and never outweighs packing onto a partly used node.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from extender.annotations import ANN_EMBEDDING_CACHE, DEFAULT_RACK_LABEL, LABEL_ZONE
from extender.demand import MILLI_PER_GPU, PodDemand
from extender.placement.cache_model import (  # noqa: F401 (served_share, zipf_norm re-exported)
    served_share,
    zipf_norm,
)
from extender.placement.cache_room import CacheRoomModel, gather
from extender.placement.embedding_annotations import (  # noqa: F401 (the codec, re-exported)
    CACHE_FORMAT,
    MAX_TABLES,
    CacheContent,
    EmbeddingSpec,
    InvalidEmbedding,
    decode_cache,
    encode_cache,
    parse_embedding,
)
from extender.placement.locality_memo import BonusMemo
from extender.placement.state import ClusterState
from extender.placement.step_time import (
    NetworkModel,
    reference_seconds,
    saved_share,
    squeeze_share,
)

SCORES = ("time", "share")


@dataclass(frozen=True)
class LocalityWeights:
    cache: float = 1.0
    rack: float = 0.5
    zone: float = 0.2
    avoid: float = 0.02
    id_skew: float = 1.05
    rack_label: str = DEFAULT_RACK_LABEL
    zone_label: str = LABEL_ZONE
    # ``time``: a job declaring its ids per step and its compute per step is scored by the
    # step time each node saves (``step_time``); ``share``: by the cached share and tiers.
    score: str = "time"
    network: NetworkModel = NetworkModel()
    # Delay scheduling (``delay.warm_wait``): a reader may wait this long at most, from its
    # first filter, for a warm node predicted to have room soon; 0: never waits.
    max_wait_s: float = 0.0

    def __post_init__(self) -> None:
        if self.score not in SCORES:
            raise ValueError(f"locality score must be one of {SCORES}, got {self.score!r}")
        if not (np.isfinite(self.max_wait_s) and self.max_wait_s >= 0):
            raise ValueError(f"locality max wait must be >= 0 seconds, got {self.max_wait_s!r}")

    @property
    def enabled(self) -> bool:
        return bool(self.cache or self.rack or self.zone or self.avoid)


def gpu_amount(demand: PodDemand) -> float:
    """GPUs the pod uses (whole plus its share's compute fraction): scales the bonus like the
    policies' per-GPU costs scale with the slots."""
    return demand.whole_gpus + (demand.share_milli / MILLI_PER_GPU if demand.has_share else 0.0)


def idle_nodes(state: ClusterState, names: list[str]) -> np.ndarray:
    """Per name: a node whose GPUs are all unbooked (False for unknown nodes)."""
    used = state.mem_used + state.milli_used
    cs = np.concatenate([[0], np.cumsum(used)])
    idle = (cs[state.node_stop] - cs[state.node_start]) == 0
    at = positions(state.node_index, names)
    known = at >= 0
    if known.all():
        return idle[at]
    out = np.zeros(len(names), dtype=bool)
    out[known] = idle[at[known]]
    return out


def positions(index: Mapping[str, int], names: list[str]) -> np.ndarray:
    """Per name: its position in ``index``, -1 when it has none."""
    if not names:
        return np.zeros(0, dtype=np.int64)
    try:  # every name known: one C-level lookup
        found = operator.itemgetter(*names)(index)
    except KeyError:
        return np.array([index.get(n, -1) for n in names], dtype=np.int64)
    return np.array(found if len(names) != 1 else [found], dtype=np.int64)


def combine(costs: np.ndarray, term: np.ndarray) -> np.ndarray:
    """Policy costs plus the locality term; infeasible (inf) nodes stay infeasible."""
    out = np.asarray(costs, dtype=np.float64).copy()
    finite = np.isfinite(out)
    out[finite] += term[finite]
    return out


class LocalityIndex:
    """Per node: zone, rack and cache content; per store: the nodes its shards run on. Kept up
    to date from Node and Pod events (cheap when nothing changed); queried with vectors."""

    def __init__(self, weights: LocalityWeights | None = None) -> None:
        self.weights = weights or LocalityWeights()
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
        self._kept = BonusMemo(self)  # each pod shape's bonus per node, while valid
        self._row_size: tuple[int, float] | None = None  # (clock, value)
        self._readers: tuple[int, float] | None = None  # (clock, store_readers)
        # What the caches hold and would hold for a job: a unit of its own, reading these arrays.
        self.cache_room = CacheRoomModel(self)

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
        key = ((annotations or {}).get(ANN_EMBEDDING_CACHE), labels.get(self.weights.zone_label),
               labels.get(self.weights.rack_label))
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

    # --- cache room (``CacheRoomModel``; kept here as the index's public queries) --------

    def capacity_rows(self, slots: np.ndarray) -> np.ndarray:
        """Per node: the cache's size in rows (``CacheRoomModel.capacity_rows``)."""
        return self.cache_room.capacity_rows(slots)

    def room(self, spec: EmbeddingSpec, slots: np.ndarray, job: bool = True
             ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Rows an LFU cache gives each table in use (``CacheRoomModel.room``)."""
        return self.cache_room.room(spec, slots, job)

    def cached_share(self, spec: EmbeddingSpec, slots: np.ndarray) -> np.ndarray:
        """Served less squeezed share per node (``CacheRoomModel.cached_share``)."""
        return self.cache_room.cached_share(spec, slots)

    def expected(self, spec: EmbeddingSpec, slots: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
        """(served, squeezed) shares per node (``CacheRoomModel.expected``)."""
        return self.cache_room.expected(spec, slots)

    def squeeze(self, spec: EmbeddingSpec, slots: np.ndarray) -> np.ndarray:
        """What readers already on each node lose (``CacheRoomModel.squeeze``)."""
        return self.cache_room.squeeze(spec, slots)

    def row_size(self) -> float:
        """Bytes a row takes, as the caches publish it (median over nodes; 0 = unknown)."""
        if self._row_size is not None and self._row_size[0] == self._clock:
            return self._row_size[1]
        known = self.row_bytes[:len(self.slot)]
        known = known[known > 0]
        value = float(np.median(known)) if len(known) else 0.0
        self._row_size = (self._clock, value)
        return value

    def store_readers(self) -> float:
        """Running pods that read embeddings, over every node whose cache published: as the
        caches count them, else (an older publisher) the most readers any one of a node's
        tables has there. What shares the store's egress (``step_time.loaded_per_byte``);
        0 where the network names no egress (misses priced on an idle network)."""
        if not self.weights.network.store_gbps > 0:
            return 0.0
        if self._readers is not None and self._readers[0] == self._clock:
            return self._readers[1]
        n = len(self.slot)
        pods = self.pods[:n]
        widest = self.ent_readers[:n].max(axis=1) if self.ent_readers.shape[1] else np.zeros(n)
        value = float(np.where(pods >= 0, pods, widest).sum())
        self._readers = (self._clock, value)
        return value

    def time_bonus(self, spec: EmbeddingSpec, slots: np.ndarray,
                   rates: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray | None:
        """Per node: the share of the job's step time it saves (``step_time.saved_share``;
        with the store's egress known and binding, the time its misses would hold the store's
        other readers back counts too), less the step time the readers already there lose to
        it, times the cache weight; None when the job does not declare what prices it (ids per
        step for every table, a step's compute) or no cache has published its row size."""
        if self.weights.score != "time" or spec.step_compute_ms is None:
            return None
        rows, row_bytes = self.cache_room.fetched_rows(spec), self.row_size()
        if rows is None or not row_bytes:
            return None
        per_table, _, squeezed = self.cache_room.expected_tables(spec, slots, rates)
        step_bytes = rows * row_bytes
        rack = self.shard_share(spec.store, self.rack_id, slots)
        zone = self.shard_share(spec.store, self.zone_id, slots)
        compute = spec.step_compute_ms / 1e3
        net = self.weights.network
        readers = self.store_readers()
        saved = saved_share(net, compute, per_table, step_bytes, rack, zone, readers)
        lost = squeeze_share(net, compute, squeezed * len(spec.tables), step_bytes, rack, zone,
                             readers)
        return self.weights.cache * (saved - lost)

    def reference_run_seconds(self, spec: EmbeddingSpec) -> float | None:
        """The job's steps at its reference step time (``step_time.reference_seconds``), the
        run time the time bonus is a share of; None when the job does not declare what prices
        it (as ``time_bonus``) or its steps."""
        if spec.step_compute_ms is None or not spec.steps:
            return None
        rows, row_bytes = self.cache_room.fetched_rows(spec), self.row_size()
        if rows is None or not row_bytes:
            return None
        ref = reference_seconds(self.weights.network, spec.step_compute_ms / 1e3,
                                rows * row_bytes, self.store_readers())
        return float(spec.steps) * ref

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

    def bonus(self, spec: EmbeddingSpec, names: list[str]) -> np.ndarray:
        """Per name, the locality bonus (the module's formula), kept per pod shape and node
        (``locality_memo.BonusMemo``): equal to a fresh computation's."""
        return self._kept.bonus(spec, names)

    def fresh_bonus(self, spec: EmbeddingSpec, slots: np.ndarray,
                     rates: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        w = self.weights
        timed = self.time_bonus(spec, slots, rates)
        if timed is not None:
            return timed
        served, squeezed = self.cache_room.expected(spec, slots, rates)
        out = w.cache * np.maximum(served - squeezed, -1.0)
        # Only the misses travel to the store: the rack and zone tiers pay on what the cache
        # does not serve (a node serving all the job's rows gains nothing from the store's rack).
        miss = 1.0 - np.clip(served, 0.0, 1.0)
        if w.rack:
            out += w.rack * miss * self.shard_share(spec.store, self.rack_id, slots)
        if w.zone:
            out += w.zone * miss * self.shard_share(spec.store, self.zone_id, slots)
        return out

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

    def avoids(self) -> bool:
        """Whether pods without embeddings are kept off any node (some node's cache holds
        something); when not, their locality term is zero everywhere."""
        if not self.weights.avoid:
            return False
        if self._any_fill is None:  # asked once per change of some node's cache, not per pod
            self._any_fill = bool(self.fill[:len(self.slot)].any())
        return self._any_fill

    def term(self, spec: EmbeddingSpec | None, demand: PodDemand, names: list[str],
             idle: np.ndarray | None = None) -> np.ndarray:
        """What to add to the nodes' policy costs for this pod (negative = preferred);
        ``idle`` (per name) limits the avoidance of pods without embeddings to idle nodes."""
        if spec is None:
            if not self.weights.avoid:
                return np.zeros(len(names))
            avoid = self.weights.avoid * self._gather(self.fill, self.slots_of(names))
            return avoid if idle is None else avoid * idle
        return -gpu_amount(demand) * self.bonus(spec, names)

    def required_misses(self, spec: EmbeddingSpec, names: list[str]) -> dict[str, str]:
        """Nodes a ``required`` pod may not use, with the reason (the rest may)."""
        racks, _ = self.store_places(spec.store)
        if not racks:
            why = f"embedding store {spec.store!r}: no shard with a known rack"
            return dict.fromkeys(names, why)
        ok = np.isin(self._gather(self.rack_id, self.slots_of(names)), list(racks))
        why = f"not in a rack of embedding store {spec.store!r} (required)"
        return {n: why for n, good in zip(names, ok, strict=True) if not good}
