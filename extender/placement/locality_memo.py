"""Each pod shape's locality bonus, kept per node while it stays valid. Pure, no I/O.

A burst of replicas of one job asks the same bonus over and over; only the nodes whose labels or
cache changed since (each node carries a change stamp), and those holding a table whose size or
readers' ids per step moved, are recomputed. Any change of the cluster-wide inputs (the job's
tables, the row size, where the store's shards run, the known tables, the weights, and the
store's readers where the network names its egress) recomputes all. So the figures equal a
fresh computation's (``LocalityIndex.fresh_bonus``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from extender.placement.embedding_annotations import EmbeddingSpec

MEMO_SHAPES = 64  # pod shapes whose bonus is kept (least recently used dropped)


class _CacheRoom(Protocol):
    def rates(self, spec: EmbeddingSpec, slots: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]: ...
    def sizes(self, spec: EmbeddingSpec) -> np.ndarray: ...


class BonusIndex(Protocol):
    """What the memo reads of ``locality.LocalityIndex``; a protocol, so this module need not
    import the index, which imports it."""

    weights: Any
    col: Mapping[str, int]
    ent_col: np.ndarray
    total: np.ndarray
    stamp: np.ndarray
    rack_id: np.ndarray
    zone_id: np.ndarray
    store_nodes: Mapping[str, frozenset[str]]
    cache_room: _CacheRoom

    def slots_of(self, names: list[str]) -> np.ndarray: ...
    def row_size(self) -> float: ...
    def store_readers(self) -> float: ...
    def fresh_bonus(self, spec: EmbeddingSpec, slots: np.ndarray,
                    rates: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray: ...


def spec_key(spec: EmbeddingSpec) -> tuple[Hashable, ...]:
    """What a pod's declaration contributes to its bonus, hashable: one key per pod shape
    (``required`` only filters)."""
    def items(m: Mapping[str, int] | None) -> tuple[tuple[str, int], ...]:
        return tuple(sorted((m or {}).items()))
    return (spec.store, spec.tables, items(spec.hot_rows), items(spec.ids_per_step),
            spec.steps, spec.step_compute_ms)


def same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element-wise: equal, NaN equal to NaN."""
    return (a == b) | (np.isnan(a) & np.isnan(b))


@dataclass
class _Memo:
    """One pod shape's bonus per node slot, valid where the slot's stamp is the one it was
    computed at and the cluster-wide inputs (``inputs``) are unchanged; per table (column
    id), the readers' ids per step and the size it was computed with."""

    inputs: tuple[Hashable, ...]
    per_reader: np.ndarray
    size: np.ndarray
    stamp: np.ndarray  # per slot: the node's stamp the value was computed at (-1: none)
    value: np.ndarray


class BonusMemo:
    def __init__(self, index: BonusIndex) -> None:
        self._index = index
        self._memo: OrderedDict[tuple[Hashable, ...], _Memo] = OrderedDict()

    def bonus(self, spec: EmbeddingSpec, names: list[str]) -> np.ndarray:
        """Per name, the locality bonus: kept values where valid, the rest recomputed."""
        ix = self._index
        slots = ix.slots_of(names)
        rates = ix.cache_room.rates(spec, slots)
        key, size = spec_key(spec), ix.cache_room.sizes(spec)
        inputs = self._inputs(spec, rates, size)
        memo = self._memo.get(key)
        n_slots = len(ix.stamp)
        if memo is None or memo.inputs != inputs:
            memo = _Memo(inputs, rates[0], size, np.full(n_slots, -1, dtype=np.int64),
                         np.zeros(n_slots))
            self._memo[key] = memo
            while len(self._memo) > MEMO_SHAPES:
                self._memo.popitem(last=False)
        else:
            self._memo.move_to_end(key)
            moved = ~(same(memo.per_reader, rates[0]) & same(memo.size, size))
            if moved.any():  # only the nodes holding those tables need them
                hold = np.isin(ix.ent_col[:len(memo.stamp)], np.flatnonzero(moved))
                memo.stamp[hold.any(axis=1)] = -1
                memo.per_reader, memo.size = rates[0], size
        if len(memo.stamp) < n_slots:
            memo.stamp = np.concatenate([memo.stamp, np.full(n_slots - len(memo.stamp), -1)])
            memo.value = np.resize(memo.value, n_slots)
        at = np.maximum(slots, 0)
        stale = (slots < 0) | (memo.stamp[at] != ix.stamp[at]) if n_slots else slots < 0
        if not stale.any():
            return memo.value[slots]
        out = memo.value[at] if n_slots else np.zeros(len(slots))
        redo = slots[stale]
        fresh = ix.fresh_bonus(spec, redo, rates)
        out[stale] = fresh
        known = redo >= 0
        memo.value[redo[known]] = fresh[known]
        memo.stamp[redo[known]] = ix.stamp[redo[known]]
        return out

    def _inputs(self, spec: EmbeddingSpec, rates: tuple[np.ndarray, np.ndarray],
                size: np.ndarray) -> tuple[Hashable, ...]:
        """What every node's bonus depends on besides its own labels and cache: the job's
        tables (their sizes, readers' ids per step, the job's), the tables known, the row
        size, where the store's shards run, the entries' width, the weights."""
        ix = self._index
        n_cols = len(ix.col)
        own = [ix.col.get(t, n_cols + j) for j, t in enumerate(spec.tables)]
        shards = ix.slots_of(sorted(ix.store_nodes.get(spec.store, ())))
        shards = shards[shards >= 0]
        # One reader's ids per step of a table weigh only on the nodes holding it (``bonus``
        # recomputes those); the job's own (its declaration, else that figure) on all.
        return (n_cols, tuple(own), rates[1].tobytes(),
                size[own].tobytes(), ix.total[[c for c in own if c < n_cols]].tobytes(),
                ix.ent_col.shape[1], ix.row_size(), shards.tobytes(),
                ix.rack_id[shards].tobytes(), ix.zone_id[shards].tobytes(), ix.weights,
                ix.store_readers())
