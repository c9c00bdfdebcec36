"""Data locality: a cost term that brings embedding consumers to their rows. Pure, no I/O.

A pod declares the embedding store and tables it reads (annotation ``sparse.io/embedding``,
JSON ``{"store": "s", "tables": ["a", "b"], "hotRows": 100000 | {"a": n}, "required": false}``).
Each node's embedding cache publishes what it holds (``sparse.io/embedding-cache``, written by
``embed.publisher``), and the store's shard pods (label ``sparse.io/embedding-store=<store>``)
say where the store runs. Per candidate node the locality *bonus*, in the policy's cost unit
(GPUs' worth of work; the pod's GPU amount scales it like the per-GPU policy costs), is

    bonus(n) = cache_weight * cached share of the job's hot set on n
             + rack_weight  * [n in a rack where a store shard runs]
             + zone_weight  * [n in a zone where a store shard runs]

and is subtracted from the node's policy cost. The cached share is the share of the job's
lookups the node's cache would serve: an LFU cache holds a table's hottest rows first, and ids
of recommendation tables are Zipf-distributed (exponent ``id_skew``, about 1 in click logs),
so ``c`` cached rows of a hot set of ``h`` serve ``Z(min(c, h)) / Z(h)`` of its lookups, with
``Z(n) = sum_{k<=n} k^-id_skew`` (1 % of a table's rows serves most of its lookups; a score by
row count would call that cache nearly empty). ``id_skew = 0`` scores by row count,
``min(c, h) / h``. Tables weigh by their hot rows; without ``hotRows`` a table's size from
the cache annotation stands in. Defaults 1.0 / 0.5 / 0.2 follow Fluid's node / zone /
region tiers (100 / 50 / 20), scored here from measured cache content instead of labels.

* Never overrides fit: only finite costs move; infeasible nodes stay infeasible.
* Missing data (no annotation, unknown store, node without labels) gives no bonus: neutral.
* ``required: true``: filter keeps only nodes in a rack of the store's shards (opt-in).
* Pods without embeddings get ``avoid_weight * cache fill`` (0.02 GPUs by default) added on
  *idle* nodes only: between idle nodes the policies' costs differ by little more than their
  node order, so this keeps cache-rich nodes for the jobs that read them when the choice is
  otherwise free, and never outweighs packing onto a partly used node.
"""

from __future__ import annotations

import json
import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from extender.annotations import (
    ANN_EMBEDDING,
    ANN_EMBEDDING_CACHE,
    DEFAULT_RACK_LABEL,
    LABEL_ZONE,
)
from extender.demand import MILLI_PER_GPU, PodDemand
from extender.errors import InvalidDemand
from extender.placement.state import ClusterState

CACHE_FORMAT = 1
MAX_TABLES = 256


class InvalidEmbedding(InvalidDemand):
    """A ``sparse.io/embedding`` annotation that cannot be understood."""


@dataclass(frozen=True)
class EmbeddingSpec:
    store: str
    tables: tuple[str, ...]
    hot_rows: Mapping[str, int] | None = None  # per table; None = table size stands in
    required: bool = False


@dataclass(frozen=True)
class LocalityWeights:
    cache: float = 1.0
    rack: float = 0.5
    zone: float = 0.2
    avoid: float = 0.02
    id_skew: float = 1.05
    rack_label: str = DEFAULT_RACK_LABEL
    zone_label: str = LABEL_ZONE

    @property
    def enabled(self) -> bool:
        return bool(self.cache or self.rack or self.zone or self.avoid)


def parse_embedding(annotations: Mapping[str, str] | None) -> EmbeddingSpec | None:
    """The pod's embedding declaration; None when it has none; InvalidEmbedding when bad."""
    raw = (annotations or {}).get(ANN_EMBEDDING)
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise InvalidEmbedding(f"{ANN_EMBEDDING} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidEmbedding(f"{ANN_EMBEDDING} must be a JSON object")
    store, tables = doc.get("store"), doc.get("tables")
    if not isinstance(store, str) or not store:
        raise InvalidEmbedding(f"{ANN_EMBEDDING}: 'store' must be a non-empty string")
    if (not isinstance(tables, list) or not tables or len(tables) > MAX_TABLES
            or not all(isinstance(t, str) and t for t in tables)):
        raise InvalidEmbedding(
            f"{ANN_EMBEDDING}: 'tables' must be a list of 1..{MAX_TABLES} table names")
    hot = doc.get("hotRows")
    hot_rows: dict[str, int] | None = None
    if isinstance(hot, bool):
        raise InvalidEmbedding(f"{ANN_EMBEDDING}: 'hotRows' must be a count or a map")
    if isinstance(hot, int):
        hot_rows = dict.fromkeys(tables, hot)
    elif isinstance(hot, dict):
        hot_rows = {t: hot.get(t) for t in tables if t in hot}
    elif hot is not None:
        raise InvalidEmbedding(f"{ANN_EMBEDDING}: 'hotRows' must be a count or a map")
    if hot_rows is not None and not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in hot_rows.values()):
        raise InvalidEmbedding(f"{ANN_EMBEDDING}: 'hotRows' values must be positive integers")
    required = doc.get("required", False)
    if not isinstance(required, bool):
        raise InvalidEmbedding(f"{ANN_EMBEDDING}: 'required' must be true or false")
    return EmbeddingSpec(store, tuple(dict.fromkeys(tables)), hot_rows or None, required)


@dataclass(frozen=True)
class CacheContent:
    """What one node's cache holds: rows (and table size, when known) per table."""

    rows: Mapping[str, int]
    totals: Mapping[str, int]
    used_bytes: int = 0
    capacity_bytes: int = 0

    @property
    def fill(self) -> float:
        """0..1: how much of the cache is in use (1 when it holds rows but states no size)."""
        if self.capacity_bytes > 0:
            return min(1.0, self.used_bytes / self.capacity_bytes)
        return 1.0 if any(self.rows.values()) else 0.0


def encode_cache(rows: Mapping[str, int], totals: Mapping[str, int], used_bytes: int,
                 capacity_bytes: int, at: float) -> str:
    """The node annotation's value (the cache's publisher writes it, the scheduler reads it)."""
    tables = {t: {"rows": int(n), **({"total": int(totals[t])} if t in totals else {})}
              for t, n in sorted(rows.items())}
    return json.dumps({"v": CACHE_FORMAT, "tables": tables, "bytes": int(used_bytes),
                       "capacityBytes": int(capacity_bytes), "at": round(at, 3)},
                      separators=(",", ":"), sort_keys=True)


def decode_cache(raw: str | None) -> CacheContent | None:
    """None for a missing or unusable annotation (the node then scores as holding nothing)."""
    if not raw:
        return None
    try:
        doc = json.loads(raw)
        rows, totals = {}, {}
        for table, entry in dict(doc.get("tables") or {}).items():
            rows[str(table)] = max(0, int(entry.get("rows", 0)))
            if entry.get("total") is not None:
                totals[str(table)] = max(0, int(entry["total"]))
        return CacheContent(rows, totals, max(0, int(doc.get("bytes", 0))),
                            max(0, int(doc.get("capacityBytes", 0))))
    except (ValueError, TypeError, AttributeError):
        return None


def zipf_norm(n: np.ndarray, alpha: float) -> np.ndarray:
    """``sum_{k<=n} k^-alpha`` for n >= 1 (Euler-Maclaurin; 0 for n < 1), vectorised."""
    n = np.asarray(n, dtype=np.float64)
    m = np.maximum(n, 1.0)
    if alpha == 0:
        head = m
    elif abs(alpha - 1.0) < 1e-9:
        head = np.log(m) + 0.5 * (1 + 1 / m) + 1 / 12 * (1 - m ** -2)
    else:
        head = (m ** (1 - alpha) - 1) / (1 - alpha) + 0.5 * (1 + m ** -alpha) + alpha / 12 * (
            1 - m ** (-alpha - 1))
    return np.where(n >= 1, head, 0.0)


def served_share(cached: np.ndarray, hot: float, alpha: float) -> np.ndarray:
    """Share of lookups over a hot set of ``hot`` Zipf(alpha) rows that its ``cached`` hottest
    rows serve."""
    if alpha == 0:
        return np.minimum(cached, hot) / hot
    return zipf_norm(np.minimum(cached, hot), alpha) / zipf_norm(np.array(hot), alpha)


def gpu_amount(demand: PodDemand) -> float:
    """GPUs the pod uses (whole plus its share's compute fraction): scales the bonus like the
    policies' per-GPU costs scale with the slots."""
    return demand.whole_gpus + (demand.share_milli / MILLI_PER_GPU if demand.has_share else 0.0)


def idle_nodes(state: ClusterState, names: list[str]) -> np.ndarray:
    """Per name: a node whose GPUs are all unbooked (False for unknown nodes)."""
    used = state.mem_used + state.milli_used
    cs = np.concatenate([[0], np.cumsum(used)])
    idle = (cs[state.node_stop] - cs[state.node_start]) == 0
    if not names:
        return np.zeros(0, dtype=bool)
    try:  # every name known: one C-level lookup
        found = operator.itemgetter(*names)(state.node_index)
        return idle[np.array(found if len(names) != 1 else [found], dtype=np.int64)]
    except KeyError:
        index = state.node_index
        return np.array([n in index and bool(idle[index[n]]) for n in names], dtype=bool)


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
        self.table_rows: dict[str, np.ndarray] = {}
        self.table_total: dict[str, int] = {}
        self._ids: dict[str, int] = {}
        self._seen: dict[str, tuple[str | None, str | None, str | None]] = {}
        self.store_nodes: dict[str, frozenset[str]] = {}

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
                self.fill = np.resize(self.fill, grow)
                for t, arr in self.table_rows.items():
                    self.table_rows[t] = np.concatenate([arr, np.zeros(grow - len(arr))])
            self.zone_id[i] = self.rack_id[i] = 0
            self.fill[i] = 0.0
        return i

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
        self.zone_id[i] = self._id(key[1] and f"zone:{key[1]}")
        self.rack_id[i] = self._id(key[2] and f"rack:{key[1]}/{key[2]}")
        self._set_cache(i, decode_cache(key[0]))
        return True

    def _set_cache(self, i: int, content: CacheContent | None) -> None:
        for arr in self.table_rows.values():
            arr[i] = 0.0
        self.fill[i] = 0.0
        if content is None:
            return
        self.fill[i] = content.fill
        for table, rows in content.rows.items():
            arr = self.table_rows.get(table)
            if arr is None:
                arr = self.table_rows[table] = np.zeros(len(self.zone_id))
            arr[i] = rows
        for table, total in content.totals.items():
            self.table_total[table] = max(self.table_total.get(table, 0), total)

    def forget_node(self, name: str) -> None:
        i = self.slot.get(name)
        if i is not None:
            self._seen.pop(name, None)
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
        if not names:
            return np.zeros(0, dtype=np.int64)
        try:
            found = operator.itemgetter(*names)(self.slot)
            return np.array(found if len(names) != 1 else [found], dtype=np.int64)
        except KeyError:
            return np.array([self.slot.get(n, -1) for n in names], dtype=np.int64)

    def _gather(self, arr: np.ndarray, slots: np.ndarray, default: float = 0) -> np.ndarray:
        if not len(arr):  # no node seen yet
            return np.full(len(slots), default, dtype=arr.dtype)
        return np.where(slots >= 0, arr[np.maximum(slots, 0)], default)

    def store_places(self, store: str) -> tuple[set[int], set[int]]:
        """(rack ids, zone ids) where the store's shards run; empty when unknown."""
        slots = self.slots_of(sorted(self.store_nodes.get(store, ())))
        slots = slots[slots >= 0]
        racks = {int(r) for r in self.rack_id[slots] if r}
        zones = {int(z) for z in self.zone_id[slots] if z}
        return racks, zones

    def cached_share(self, spec: EmbeddingSpec, slots: np.ndarray) -> np.ndarray:
        """Per node, 0..1: share of the job's hot rows its cache holds."""
        hot = []
        for t in spec.tables:
            h = (spec.hot_rows or {}).get(t) or self.table_total.get(t)
            hot.append(float(h) if h else math.nan)
        known = not any(math.isnan(h) for h in hot)
        weights = np.array(hot) if known else np.ones(len(hot))
        share = np.zeros(len(slots))
        for t, h, w in zip(spec.tables, hot, weights, strict=True):
            arr = self.table_rows.get(t)
            if arr is None:
                continue
            rows = self._gather(arr, slots)
            share += w * (served_share(rows, h, self.weights.id_skew) if not math.isnan(h)
                          else (rows > 0))
        return share / weights.sum()

    def bonus(self, spec: EmbeddingSpec, names: list[str]) -> np.ndarray:
        w = self.weights
        slots = self.slots_of(names)
        out = w.cache * self.cached_share(spec, slots) if w.cache else np.zeros(len(names))
        racks, zones = self.store_places(spec.store)
        if racks and w.rack:
            out += w.rack * np.isin(self._gather(self.rack_id, slots), list(racks))
        if zones and w.zone:
            out += w.zone * np.isin(self._gather(self.zone_id, slots), list(zones))
        return out

    def avoids(self) -> bool:
        """Whether pods without embeddings are kept off any node (some node's cache holds
        something); when not, their locality term is zero everywhere."""
        return bool(self.weights.avoid) and bool(self.fill[:len(self.slot)].any())

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
