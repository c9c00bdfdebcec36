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

Cache room: an LFU cache shared by the tables that jobs on the node read gives each table about
an equal part (their rows are drawn at comparable rates), and tables nobody reads any more are
evicted first (their counters decay). ``room`` is that part.
"""

from __future__ import annotations

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
