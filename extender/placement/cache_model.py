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
most often, so a table's part grows with its readers and their ids per step and shrinks with
its size (``lfu_room``: one function, vectorised over caches, for the replay's caches and the
scheduler's estimate); tables nobody reads any more are evicted first (their counters decay).

``extender.placement.cache_room.CacheRoomModel`` applies this to every candidate node at once,
from what the locality index knows of each node's cache (its size, rows held, readers and their
ids per step per table).
"""

from __future__ import annotations

import threading
from functools import lru_cache

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


class _CurveBank:
    """Every fetched-row curve computed so far, one row each (the share of a step's distinct
    rows among the top ranks, on ``distinct_curve``'s log-spaced grid: log rank linear in the
    column; zeros for a size <= 1), so a table's curve is computed once however many tables
    the cluster reads: a new table adds its row, the others are reused."""

    def __init__(self) -> None:
        self.rows = np.zeros((16, GRID))
        self.at: dict[tuple[float, float, float], int] = {}
        self.lock = threading.Lock()

    def index(self, keys: tuple[tuple[float, float], ...], alpha: float) -> np.ndarray:
        with self.lock:
            out = np.empty(len(keys), dtype=np.int64)
            for g, (n, draws) in enumerate(keys):
                i = self.at.get((n, draws, alpha))
                if i is None:
                    i = len(self.at)
                    if i == len(self.rows):
                        self.rows = np.concatenate([self.rows, np.zeros_like(self.rows)])
                    if n > 1:
                        cum = distinct_curve(n, alpha, draws)[1]
                        self.rows[i] = cum / cum[-1]
                    self.at[(n, draws, alpha)] = i
                out[g] = i
            out.setflags(write=False)
            return out


_BANK = _CurveBank()


@lru_cache(maxsize=64)
def _stacked_curves(keys: tuple[tuple[float, float], ...], alpha: float) -> np.ndarray:
    """The fetched-row curves of ``keys`` (table size, ids per step), one row each, taken
    from the bank (a new key costs a copy of its rows, not their curves)."""
    index = _BANK.index(keys, alpha)  # first: it may grow the bank
    out = _BANK.rows[index]
    out.setflags(write=False)
    return out


def served_shares(cached: np.ndarray, group: np.ndarray, size: np.ndarray, alpha: float,
                  draws: np.ndarray) -> np.ndarray:
    """``served_share`` element-wise, all in one pass: ``cached`` rows held of table
    ``group[i]``'s hot set of ``size[group[i]]`` rows, counting fetched rows at
    ``draws[group[i]]`` ids per step (NaN: lookups)."""
    size_i = size[group]
    cached = np.minimum(np.asarray(cached, dtype=np.float64), size_i)
    out = np.zeros(len(cached))
    ok = (cached >= 1) & (size_i >= 1)
    if alpha == 0 or not ok.any():
        return np.where(ok, cached / np.maximum(size_i, 1.0), 0.0)
    by_draws = ~np.isnan(draws) & (size > 1)
    lookups = ok & ~by_draws[group]
    if lookups.any():
        out[lookups] = zipf_norm(cached[lookups], alpha) / zipf_norm(size_i[lookups], alpha)
    fetched = ok & by_draws[group]
    if fetched.any():
        keys = tuple((float(n), float(d)) if b else (0.0, 0.0)
                     for n, d, b in zip(size.tolist(), draws.tolist(), by_draws.tolist(),
                                        strict=True))
        curves = _stacked_curves(keys, float(alpha))
        # The grid is log-spaced, so a rank's place on it is linear in its log: no search.
        pos = np.log(cached[fetched]) / np.log(size_i[fetched]) * (GRID - 1)
        i = np.minimum(pos.astype(np.int64), GRID - 2)
        frac = np.minimum(pos - i, 1.0)
        g = group[fetched]
        out[fetched] = curves[g, i] * (1 - frac) + curves[g, i + 1] * frac
    return out


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


def lfu_weights(reads: np.ndarray, rows: np.ndarray, alpha: float,
                norm: np.ndarray | None = None) -> np.ndarray:
    """A table's pull on LFU room (``lfu_room``): ``(reads / Z(rows))^(1/alpha)`` where it is
    read (0 elsewhere); ``rows`` per table (the last axis) or per element; ``norm``: ``Z(rows)``
    when the caller has it."""
    reads = np.asarray(reads, dtype=np.float64)
    rows = np.asarray(rows, dtype=np.float64)
    out = np.zeros(reads.shape)
    on = (reads > 0) & (rows >= 1)
    if not on.any():
        return out
    if alpha <= 0:  # rows by count: the room follows the reads
        return np.where(on, reads, 0.0)
    z = zipf_norm(rows, alpha) if norm is None else norm
    per_row = np.broadcast_to(1.0 / np.maximum(z, 1e-300), reads.shape)
    out[on] = (reads[on] * per_row[on]) ** (1.0 / alpha)
    return out


def water_fill(capacity: np.ndarray, weight: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per cache (row of ``weight``): ``capacity`` split over its tables in proportion to
    ``weight``, no table above its ``rows``; what a table that fits whole leaves goes to the
    others. An infinite capacity gives inf everywhere."""
    n, t = weight.shape
    out = np.zeros((n, t))
    if not n or not t:
        return out
    cap = np.broadcast_to(np.asarray(capacity, dtype=np.float64), (n,))
    unknown = ~np.isfinite(cap)
    left = np.where(unknown, 0.0, np.maximum(cap, 0.0))
    rows = np.broadcast_to(np.maximum(np.asarray(rows, dtype=np.float64), 1.0), (n, t))
    for _ in range(t + 1):
        total = weight.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = np.where(total > 0, left / total, 0.0)
        share = scale[:, None] * weight
        full = share >= rows  # never where the weight is 0: a table has a row at least
        if not full.any():
            out += share
            break
        out[full] = rows[full]
        left = left - np.where(full, rows, 0.0).sum(axis=1)
        weight = np.where(full, 0.0, weight)
    out[unknown] = np.inf
    return out


def lfu_room(capacity: np.ndarray | float, readers: np.ndarray, rows: np.ndarray, alpha: float,
             draws: np.ndarray | float | None = None) -> np.ndarray:
    """Rows of each table an LFU cache of ``capacity`` rows keeps when ``readers[..., i]``
    running jobs read table ``i`` of ``rows[i]`` rows, each ``draws[..., i]`` ids per step (1
    when None). Vectorised over caches: ``readers`` (and ``draws``) of shape ``(tables,)`` for
    one cache or ``(caches, tables)`` with ``capacity`` per cache; the result has their shape.
    An infinite capacity (size unknown) gives inf for every table. The one model of the room
    split: the replay's caches (``bench/sim/locality.py``) and the scheduler's estimate
    (``CacheRoomModel``) both use it.

    LFU keeps the rows read most often. Rank ``k`` of table ``i`` is read about
    ``readers_i * draws_i * p1_i * k^-alpha`` times per step (``p1_i = 1 / Z(rows_i)``; a step
    fetches a row once however often its batch draws it, which only caps the hottest rows, all
    kept anyway), so the rows above a common rate threshold are
    ``c_i ~ (readers_i * draws_i * p1_i)^(1/alpha)`` (``lfu_weights``): a table read by three
    jobs keeps about three times the rows of one read by one. Tables that fit whole give their
    spare room to the rest (``water_fill``, all caches at once)."""
    reads = np.asarray(readers, dtype=np.float64)
    if draws is not None:
        reads = reads * np.asarray(draws, dtype=np.float64)
    one = reads.ndim == 1
    reads = np.atleast_2d(reads)
    out = water_fill(np.asarray(capacity, dtype=np.float64), lfu_weights(reads, rows, alpha),
                     np.asarray(rows, dtype=np.float64))
    return out[0] if one else out
