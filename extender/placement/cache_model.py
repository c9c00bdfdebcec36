"""How much of a job's embedding traffic a node cache serves. Pure, no I/O; used by the
locality term (``extender.placement.locality``) and by the locality replay (``bench/sim``).

Ids of recommendation tables are Zipf(``alpha``) over a table's ``n`` rows, and an LFU cache
holds a table's hottest rows first, so a cache holding ``c`` rows serves its top ``c`` ranks.

* By *draws* (lookups): the top ``c`` ranks take ``Z(c) / Z(n)`` of them, ``Z(k) =
  sum_{i<=k} i^-alpha``; 1 % of a table serves most lookups.
* By *fetched rows* (what crosses the network): a training step deduplicates its batch's ids,
  so a row drawn many times in a step is fetched once. With ``draws`` ids per step, rank ``k``
  is among the step's distinct rows with probability ``1 - exp(-draws p_k)``; the top ``c``
  ranks serve the share of the step's distinct rows that this sums to over ``k <= c``, far
  less than their share of the draws. This is the share that relieves the store's links.

Cache room: an LFU cache shared by the tables that jobs on the node read keeps the rows read
most often, so a table's part grows with its readers and shrinks with its size (``lfu_room``,
what the replay's caches do); tables nobody reads any more are evicted first (their counters
decay). ``CacheRoomModel.room`` is the scheduler's estimate of that part per node.

``CacheRoomModel`` applies this per node to what the locality index knows of each node's cache
(its size, rows held and readers per table).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import lru_cache
from typing import Protocol

import numpy as np

GRID = 1024  # log-spaced ranks of the fetched-row curve


def zipf_norm(n: np.ndarray | float, alpha: float) -> np.ndarray:
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


@lru_cache(maxsize=1024)
def distinct_curve(n: float, alpha: float, draws: float, grid: int = GRID
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``(log rank, expected distinct rows among ranks <= rank)`` for one step of ``draws``
    Zipf(alpha) ids over ``n`` rows (trapezoid over a log-spaced rank grid)."""
    p1 = 1.0 / float(zipf_norm(n, alpha))
    x = np.geomspace(1.0, max(n, 1.0), grid)
    f = -np.expm1(-draws * p1 * x ** -alpha)
    cum = np.concatenate([[f[0]], f[0] + np.cumsum((f[1:] + f[:-1]) / 2 * np.diff(x))])
    cum.setflags(write=False)
    return np.log(x), cum


def served_share(cached: np.ndarray | float, hot: float, alpha: float,
                 draws: float | None = None) -> np.ndarray:
    """Share of a job's traffic over a hot set of ``hot`` Zipf(alpha) rows that a cache
    holding the ``cached`` hottest of them serves: of its lookups (``draws`` None), or of the
    rows its steps fetch (``draws`` ids per step)."""
    cached = np.minimum(np.asarray(cached, dtype=np.float64), hot)
    if hot < 1:
        return np.zeros_like(cached)
    if alpha == 0:
        return cached / hot
    if draws is None:
        return zipf_norm(cached, alpha) / zipf_norm(hot, alpha)
    log_rank, cum = distinct_curve(float(hot), float(alpha), float(draws))
    held = np.interp(np.log(np.maximum(cached, 1.0)), log_rank, cum) / cum[-1]
    return np.where(cached >= 1, held, 0.0)


def draws_for_distinct(n: float, alpha: float, distinct: float) -> float:
    """The ids per step whose deduplication leaves ``distinct`` rows (bisection in log space;
    ``distinct`` is capped at 99 % of ``n``)."""
    distinct = min(distinct, 0.99 * n)
    lo, hi = distinct, distinct * 1e6
    for _ in range(80):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if distinct_curve(float(n), alpha, mid, 2048)[1][-1] < distinct \
            else (lo, mid)
    return hi


def lfu_room(capacity: float, readers: np.ndarray, rows: np.ndarray, alpha: float,
             draws: np.ndarray | None = None) -> np.ndarray:
    """Rows of each table an LFU cache of ``capacity`` rows keeps when ``readers[i]`` running
    jobs read table ``i`` of ``rows[i]`` rows (``draws[i]`` ids per step; equal when None).

    LFU keeps the rows read most often. Rank ``k`` of table ``i`` is read about
    ``readers_i * draws_i * p1_i * k^-alpha`` times per step (``p1_i = 1 / Z(rows_i)``; a step
    fetches a row once however often its batch draws it, which only caps the hottest rows, all
    kept anyway), so the rows above a common rate threshold are
    ``c_i ~ (readers_i * draws_i * p1_i)^(1/alpha)``: a table read by three jobs keeps about three
    times the rows of one read by one. Tables that fit whole give their spare room to the rest
    (water-filling)."""
    readers = np.asarray(readers, dtype=np.float64)
    rows = np.asarray(rows, dtype=np.float64)
    out = np.zeros(len(rows))
    if capacity <= 0 or not len(rows):
        return out
    a = max(alpha, 1e-3)
    rate = readers / zipf_norm(rows, alpha) * (1.0 if draws is None else np.asarray(draws))
    weight = np.where((readers > 0) & (rows >= 1), np.maximum(rate, 0.0) ** (1.0 / a), 0.0)
    left, open_ = float(capacity), weight > 0
    for _ in range(len(rows) + 1):
        total = weight[open_].sum()
        if total <= 0:
            break
        share = np.where(open_, left * weight / total, 0.0)
        full = open_ & (share >= rows)
        if not full.any():
            out[open_] = share[open_]
            break
        out[full] = rows[full]
        left -= rows[full].sum()
        open_ &= ~full
    return out


class _Weights(Protocol):
    @property
    def cache(self) -> float: ...
    @property
    def id_skew(self) -> float: ...


class TableDemand(Protocol):
    """The tables a job reads (``locality.EmbeddingSpec``)."""

    @property
    def tables(self) -> tuple[str, ...]: ...
    @property
    def hot_rows(self) -> Mapping[str, int] | None: ...
    @property
    def ids_per_step(self) -> Mapping[str, int] | None: ...


class CacheIndex(Protocol):
    """The per-node arrays ``CacheRoomModel`` reads (``locality.LocalityIndex`` has them); a
    protocol, so this module need not import the index, which imports it."""

    weights: _Weights
    slot: Mapping[str, int]
    cap_bytes: np.ndarray  # the cache's maxmemory per node (0 = not published)
    row_bytes: np.ndarray  # bytes per cached row per node (0 = unknown)
    table_rows: dict[str, np.ndarray]
    table_readers: dict[str, np.ndarray]
    table_total: dict[str, int]


def gather(arr: np.ndarray, slots: np.ndarray, default: float = 0) -> np.ndarray:
    """``arr`` per slot, ``default`` for slot -1 (a node never seen) or before any node."""
    if not len(arr):  # no node seen yet
        return np.full(len(slots), default, dtype=arr.dtype)
    return np.where(slots >= 0, arr[np.maximum(slots, 0)], default)


@lru_cache(maxsize=4096)
def _zipf_total(size: float, alpha: float) -> float:
    return float(zipf_norm(size, alpha))


class CacheRoomModel:
    """What each node's cache holds and would hold for a job: its size in rows, the LFU room
    each table in use gets there, the share of a job's traffic it serves and what the job's
    arrival costs the readers already there. Split from the index so the index keeps the
    node/store bookkeeping; it reads the index's arrays at call time (they grow by
    reallocation, so no reference to them is kept)."""

    def __init__(self, index: CacheIndex) -> None:
        self.index = index

    def _hot_rows(self, spec: TableDemand) -> list[float]:
        """Per table of the job: its hot set in rows (declared, else the table's published size;
        NaN when neither is known)."""
        hot = []
        for t in spec.tables:
            h = (spec.hot_rows or {}).get(t) or self.index.table_total.get(t)
            hot.append(float(h) if h else math.nan)
        return hot

    def capacity_rows(self, slots: np.ndarray) -> np.ndarray:
        """Per node: the cache's size in rows (its bytes over its bytes per row, or the
        cluster's median row size for an empty cache); inf where unknown."""
        known = self.index.row_bytes[:len(self.index.slot)]
        known = known[known > 0]
        fallback = float(np.median(known)) if len(known) else 0.0
        row_bytes = gather(self.index.row_bytes, slots)
        row_bytes = np.where(row_bytes > 0, row_bytes, fallback)
        cap = gather(self.index.cap_bytes, slots)
        with np.errstate(divide="ignore", invalid="ignore"):
            rows = cap / row_bytes
        return np.where((cap > 0) & (row_bytes > 0), rows, np.inf)

    def _table_size(self, table: str, spec: TableDemand | None = None) -> float:
        """A table's rows: published total, else declared hot rows, else the most any node holds."""
        size = self.index.table_total.get(table) or (spec and (spec.hot_rows or {}).get(table))
        if size:
            return float(size)
        arr = self.index.table_rows.get(table)
        return max(float(arr.max()), 1.0) if arr is not None and len(arr) else 1.0

    def _weight(self, readers: np.ndarray, size: float) -> np.ndarray:
        """A table's pull on LFU room per node (``lfu_room``; the tables' ids per
        step taken as comparable)."""
        alpha = self.index.weights.id_skew
        if alpha <= 0:
            return np.maximum(readers, 0.0)
        rate = np.maximum(readers, 0.0) / _zipf_total(size, alpha)
        return rate ** (1.0 / alpha)

    def room(self, spec: TableDemand, slots: np.ndarray, job: bool = True
             ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """``({table: rows per node}, capacity rows per node)``: the rows an LFU cache gives
        each table running pods read there, with this job reading its tables too (``job``)
        or without it; inf where the cache's size is unknown."""
        cap = self.capacity_rows(slots)
        pull: dict[str, np.ndarray] = {}
        for u, readers in self.index.table_readers.items():
            r = gather(readers, slots)
            if r.any() or u in spec.tables:
                pull[u] = r
        for t in spec.tables:
            r = pull.get(t, np.zeros(len(slots)))
            pull[t] = r + 1 if job else r
        weights = {u: self._weight(r, self._table_size(u, spec)) for u, r in pull.items()}
        total = sum(weights.values(), np.zeros(len(slots)))
        with np.errstate(divide="ignore", invalid="ignore"):
            rooms = {u: np.where(total > 0, cap * w / total, 0.0) for u, w in weights.items()}
        return {u: np.where(np.isfinite(cap), r, np.inf) for u, r in rooms.items()}, cap

    def cached_share(self, spec: TableDemand, slots: np.ndarray) -> np.ndarray:
        """Per node, -1..1: share of the job's hot-set traffic the node's cache is expected to
        serve, less what its arrival costs the jobs already reading there (``expected``)."""
        served, squeezed = self.expected(spec, slots)
        return np.maximum(served - squeezed, -1.0)

    def expected(self, spec: TableDemand, slots: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
        """Per node: (share of the job's hot-set traffic the cache is expected to serve, 0..1;
        share of one table's traffic the tables in use there lose to it, ``squeeze``).

        With the cache's size known, a table's rows are capped by the LFU ``room`` it gets
        there once the job reads it too; the job is served between what the cache holds of
        its tables at its start and what it will hold once warm (the declaration carries no
        run length: the midpoint). Each table in use on the node loses, per reader, the share
        its fewer rows no longer serve (``squeeze``); a reader's read of one table weighs like
        one of the job's tables. Shares count fetched rows when the job declares
        ``idsPerStep`` (what relieves the store), else lookups."""
        alpha = self.index.weights.id_skew
        hot = self._hot_rows(spec)
        known = not any(math.isnan(h) for h in hot)
        weights = np.array(hot) if known else np.ones(len(hot))
        draws = spec.ids_per_step or {}
        rooms, cap = self.room(spec, slots) if self.index.weights.cache else ({}, None)
        share = np.zeros(len(slots))
        for t, h, w in zip(spec.tables, hot, weights, strict=True):
            arr = self.index.table_rows.get(t)
            rows = gather(arr, slots) if arr is not None else np.zeros(len(slots))
            if math.isnan(h):
                share += w * (rows > 0)
                continue
            d = draws.get(t)
            room = rooms.get(t, np.full(len(slots), np.inf))
            now = served_share(np.minimum(rows, room), h, alpha, d)
            warm = served_share(np.minimum(h, room), h, alpha, d)
            share += w * np.where(np.isfinite(room), (now + warm) / 2, now)
        share /= weights.sum()
        squeezed = self.squeeze(spec, slots, rooms) if cap is not None else 0.0 * share
        return share, squeezed

    def squeeze(self, spec: TableDemand, slots: np.ndarray,
                rooms: dict[str, np.ndarray] | None = None) -> np.ndarray:
        """Per node: share of one table's traffic that the tables already read there lose to
        the job's arrival (summed over their readers, per table of the job)."""
        rooms = rooms if rooms is not None else self.room(spec, slots)[0]
        loss = np.zeros(len(slots))
        alpha = self.index.weights.id_skew
        declared = list((spec.ids_per_step or {}).values())
        stand_in = float(np.mean(declared)) if declared else None
        for u, readers in self.index.table_readers.items():
            r = gather(readers, slots)
            room = rooms.get(u)
            if room is None or not r.any():
                continue
            rows = gather(self.index.table_rows[u], slots) if u in self.index.table_rows else 0 * r
            hit = np.flatnonzero((r > 0) & (rows > room))  # only where the table must shrink
            if not len(hit):
                continue
            size = self._table_size(u)
            d = (spec.ids_per_step or {}).get(u, stand_in)
            lost = (served_share(rows[hit], size, alpha, d)
                    - served_share(room[hit], size, alpha, d))
            loss[hit] += r[hit] * lost
        return loss / len(spec.tables)
