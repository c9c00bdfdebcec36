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

from dataclasses import dataclass

import numpy as np

from extender.annotations import DEFAULT_RACK_LABEL, LABEL_ZONE
from extender.demand import MILLI_PER_GPU, PodDemand
from extender.placement.cache_model import (  # noqa: F401 (served_share, zipf_norm re-exported)
    served_share,
    zipf_norm,
)
from extender.placement.cache_room import CacheRoomModel
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
from extender.placement.locality_records import LocalityRecords, positions
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
    # creation, for a warm node predicted to have room soon; 0: never waits.
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




def combine(costs: np.ndarray, term: np.ndarray) -> np.ndarray:
    """Policy costs plus the locality term; infeasible (inf) nodes stay infeasible."""
    out = np.asarray(costs, dtype=np.float64).copy()
    finite = np.isfinite(out)
    out[finite] += term[finite]
    return out


class LocalityIndex(LocalityRecords):
    """The locality term over what the records hold (``LocalityRecords``: per node zone, rack
    and cache content, per store its shards' nodes): each node's bonus for a pod, kept per
    pod shape while valid (``BonusMemo``), and the term added to the policy's costs."""

    def __init__(self, weights: LocalityWeights | None = None) -> None:
        super().__init__()
        self.weights = weights or LocalityWeights()
        self._kept = BonusMemo(self)  # each pod shape's bonus per node, while valid
        self._readers: tuple[int, float] | None = None  # (clock, store_readers)
        # What the caches hold and would hold for a job: a unit of its own, reading these arrays.
        self.cache_room = CacheRoomModel(self)

    @property  # the labels the records read: the weights', which may be replaced
    def zone_label(self) -> str:  # type: ignore[override]
        return self.weights.zone_label

    @property
    def rack_label(self) -> str:  # type: ignore[override]
        return self.weights.rack_label

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
