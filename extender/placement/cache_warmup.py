"""A node cache over time: how many of a table's rows it holds after it has seen a given number
of the table's ids, and what share of a step's fetched rows those serve. Pure, no I/O; used by
the locality term (``cache_room``) and the locality replay's caches (``bench/sim/locality.py``),
so both apply one model.

The node cache is filled on miss (``embed.cache.ReadThrough``: every miss is written back
while the cache is not full) and evicts by LFU. Ids are Zipf(``alpha``) over the table's ``n``
rows, drawn independently (the independent reference model). After the cache has seen
``E`` ids of the table (its *exposure*: the sum over its readers' steps of their ids per step),
row ``k`` has been drawn at least once, hence fetched and written, with probability
``1 - exp(-E p_k)``, ``p_k = k^-alpha / Z(n)`` (Poisson approximation of the draws; the same
expression gives the expected number of distinct items in a sample, as used by Fagin,
"Asymptotic miss ratios over independent references", JCSS 1977, and by Che, Tung and Wang's
characteristic-time approximation, IEEE JSAC 2002). LFU under independent references keeps
the most frequently read rows (Aho, Denning and Ullman, JACM 1971: A0 is optimal), so a table
whose room in the cache is ``R`` rows keeps, of the rows it has seen, those of rank ``<= R``:

    held(E, R) = sum_{k <= R} (1 - exp(-E p_k))

A table that was warm before (its hottest ``b`` rows held: what a node publishes, or what is
left after its room shrank) keeps them and fills the ranks above from the ids read since
(``held(b, E, R) = b + sum_{b < k <= R} (1 - exp(-E p_k))``).

A step of ``d`` ids fetches row ``k`` with probability ``f_k = 1 - exp(-d p_k)`` (its batch is
deduplicated), and that fetch is a hit when the row is held:

    hit(E, R) = sum_{k <= R} f_k (1 - exp(-E p_k)) / sum_k f_k

(the ``b`` warm rows count with ``1`` for the bracket). ``hit(inf, R)`` is the warm cache's
share (``cache_model.served_share`` with ``draws``), so a warm-up always ends at the steady
state the room split (``cache_model.lfu_room``) gives. The warm-up is set by the Zipf
exposure alone: the rows of rank ``k`` are in once ``E ~ 1 / p_k``, so the top ``R`` rows take
about ``Z(n) R^alpha / d`` steps of one reader.

Both sums are tabulated once per (table size, alpha, ids per step) on a log grid of exposures
and ranks (trapezoid over log-spaced ranks, as ``cache_model.distinct_curve``), with ``hit``'s
integral over the exposure (a job's mean hit over its steps is that integral over the
exposures its steps span, divided by the span), and read by bilinear interpolation,
vectorised over nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from extender.placement.cache_model import zipf_norm

RANKS = 256  # log-spaced ranks
EXPOSURES = 128  # exposure 0, then log-spaced from 1 id to the one that holds the whole table
FULL = 30.0  # exposure of the table's coldest row at the top of the grid (held: 1 - e^-30)


@dataclass(frozen=True)
class WarmCurve:
    """``held`` and ``hit`` of one table (``n`` rows, Zipf ``alpha``, ``draws`` ids a step)
    on the (exposure, rank) grid, and ``hit``'s integral over the exposure (for its mean over
    a job's steps); rows of the tables: exposures, columns: ranks."""

    n: float
    alpha: float
    draws: float
    e: np.ndarray  # the exposure grid (0, then log-spaced)
    held_cum: np.ndarray  # (EXPOSURES, RANKS): rows held among ranks <= x at exposure e
    hit_cum: np.ndarray  # same: share of a step's fetched rows held among ranks <= x
    hit_int: np.ndarray  # same: the integral of hit_cum over the exposure from 0 to e

    @staticmethod
    @lru_cache(maxsize=64)
    def of(n: float, alpha: float, draws: float) -> WarmCurve:
        n = max(float(n), 2.0)
        p1 = 1.0 / float(zipf_norm(n, alpha))
        x = np.geomspace(1.0, n, RANKS)
        p = p1 * x ** -alpha
        e = np.concatenate([[0.0], np.geomspace(1.0, FULL / p[-1], EXPOSURES - 1)])
        g = -np.expm1(-e[:, None] * p[None, :])  # held with probability g
        f = -np.expm1(-draws * p)  # fetched in a step with probability f

        def cum(y: np.ndarray) -> np.ndarray:
            steps = (y[..., 1:] + y[..., :-1]) / 2 * np.diff(x)
            return np.concatenate([y[..., :1], y[..., :1] + np.cumsum(steps, axis=-1)], axis=-1)

        held, hit = cum(g), cum(f[None, :] * g) / cum(f)[-1]
        area = np.concatenate([np.zeros((1, RANKS)), np.cumsum(
            (hit[1:] + hit[:-1]) / 2 * np.diff(e)[:, None], axis=0)])
        tables = [t.astype(np.float32) for t in (held, hit, area)]
        for t in tables:
            t.setflags(write=False)
        return WarmCurve(n, float(alpha), float(draws), e, *tables)

    # --- lookups, all element-wise over arrays ------------------------------------------

    def _epos(self, exposure: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Row and fraction of each exposure on the grid (linear in the exposure between
        rows; clipped at the top)."""
        e = self.e
        ex = np.clip(exposure, 0.0, e[-1])
        pe = np.where(ex < 1.0, ex, 1.0 + np.log(np.maximum(ex, 1.0)) * (
            (EXPOSURES - 2) / np.log(e[-1])))
        ie = np.minimum(pe.astype(np.int64), EXPOSURES - 2)
        return ie, np.clip((ex - e[ie]) / (e[ie + 1] - e[ie]), 0.0, 1.0)

    def _rpos(self, rank: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Column and fraction of each rank on the grid (linear in its log), and whether it
        is a row at least (below one, nothing is held)."""
        pr = np.clip(np.log(np.maximum(rank, 1.0)) * ((RANKS - 1) / np.log(self.n)), 0.0,
                     RANKS - 1)
        ir = np.minimum(pr.astype(np.int64), RANKS - 2)
        return ir, pr - ir, rank >= 1

    def _gather(self, table: np.ndarray, epos: tuple, rpos: tuple) -> np.ndarray:
        (ie, fe), (ir, fr, ok) = epos, rpos
        flat = table.ravel()
        at = ie * RANKS + ir
        lo = flat[at] * (1 - fr) + flat[at + 1] * fr
        hi = flat[at + RANKS] * (1 - fr) + flat[at + RANKS + 1] * fr
        return np.where(ok, lo + (hi - lo) * fe, 0.0)

    def _top(self, rpos: tuple) -> np.ndarray:
        """``hit_cum`` at the grid's top exposure (everything seen)."""
        ir, fr, ok = rpos
        last = self.hit_cum[-1]
        return np.where(ok, last[ir] * (1 - fr) + last[ir + 1] * fr, 0.0)

    def _integral(self, epos: tuple, exposure: np.ndarray, rpos: tuple) -> np.ndarray:
        """``hit_int``; beyond the grid's top exposure it grows by the top row."""
        out = self._gather(self.hit_int, epos, rpos)
        over = np.maximum(exposure - self.e[-1], 0.0)
        return out + over * self._top(rpos) if over.any() else out

    def _ranks(self, base: np.ndarray | float, room: np.ndarray | float) -> tuple:
        room = np.minimum(np.asarray(room, dtype=np.float64), self.n)
        base = np.minimum(np.asarray(base, dtype=np.float64), room)
        return self._rpos(base), self._rpos(room)

    def held(self, base: np.ndarray | float, exposure: np.ndarray | float,
             room: np.ndarray | float) -> np.ndarray:
        """Rows of the table the cache holds: its ``base`` hottest rows (what it held warm
        before, e.g. the rows a node publishes) and, of the ranks above them up to its
        ``room``, those seen in the ``exposure`` ids read since."""
        base = np.minimum(np.minimum(np.asarray(base, dtype=np.float64), room), self.n)
        rb, rr = self._ranks(base, room)
        ep = self._epos(np.asarray(exposure, dtype=np.float64))
        grown = self._gather(self.held_cum, ep, rr) - self._gather(self.held_cum, ep, rb)
        return np.minimum(base + grown, np.minimum(room, self.n))

    def hit(self, base: np.ndarray | float, exposure: np.ndarray | float,
            room: np.ndarray | float) -> np.ndarray:
        """Share of one step's fetched (distinct) rows the cache serves (``held``'s rows:
        the ``base`` ones all hit)."""
        rb, rr = self._ranks(base, room)
        ep = self._epos(np.asarray(exposure, dtype=np.float64))
        return self._top(rb) + self._gather(self.hit_cum, ep, rr) - self._gather(
            self.hit_cum, ep, rb)

    def mean_hit(self, base: np.ndarray | float, exposure: np.ndarray | float,
                 room: np.ndarray | float, rate: np.ndarray | float, steps: float
                 ) -> np.ndarray:
        """Mean of ``hit`` over a job's next ``steps`` steps, the exposure growing by ``rate``
        ids a step (the job's ids and its co-readers') from ``exposure`` now: the integral of
        ``hit`` over the exposures they span, over their span."""
        rb, rr = self._ranks(base, room)
        e0 = np.asarray(exposure, dtype=np.float64)
        span = np.asarray(rate, dtype=np.float64) * max(float(steps), 0.0)
        e1 = e0 + span
        p1 = self._epos(e1)
        area = self._integral(p1, e1, rr) - self._integral(p1, e1, rb)
        p0 = None
        if e0.any():  # from a cache already filling (the replay); the scheduler starts at 0
            p0 = self._epos(e0)
            area = area - self._integral(p0, e0, rr) + self._integral(p0, e0, rb)
        if (span > 0).all():
            return self._top(rb) + area / span
        p0 = p0 or self._epos(np.zeros_like(e1))
        with np.errstate(divide="ignore", invalid="ignore"):
            grown = np.where(span > 0, area / span, self._gather(self.hit_cum, p0, rr)
                             - self._gather(self.hit_cum, p0, rb))
        return self._top(rb) + grown

    # --- the same lookups for one table on one node, in plain floats (the replay's caches
    # ask one at a time; numpy's per-call overhead would dominate) ---------------------------
    # Each twin is held equal to its vectorised lookup, edges included, by test_cache_warmup.

    @cached_property
    def _flat(self) -> tuple[list[float], list[float], list[float], list[float], float, float]:
        return (*(t.ravel().tolist() for t in (self.held_cum, self.hit_cum, self.hit_int)),
                self.e.tolist(), (EXPOSURES - 2) / math.log(self.e[-1]),
                (RANKS - 1) / math.log(self.n))

    def _epos1(self, exposure: float) -> tuple[int, float]:
        e, scale = self._flat[3], self._flat[4]
        x = min(max(exposure, 0.0), e[-1])
        pe = x if x < 1.0 else 1.0 + math.log(x) * scale
        ie = min(int(pe), EXPOSURES - 2)
        return ie, min(max((x - e[ie]) / (e[ie + 1] - e[ie]), 0.0), 1.0)

    def _rpos1(self, rank: float) -> tuple[int, float] | None:
        if rank < 1:
            return None
        pr = min(max(math.log(rank) * self._flat[5], 0.0), RANKS - 1)
        ir = min(int(pr), RANKS - 2)
        return ir, pr - ir

    @staticmethod
    def _gather1(flat: list[float], epos: tuple[int, float],
                 rpos: tuple[int, float] | None) -> float:
        if rpos is None:
            return 0.0
        (ie, fe), (ir, fr) = epos, rpos
        at = ie * RANKS + ir
        lo = flat[at] * (1 - fr) + flat[at + 1] * fr
        hi = flat[at + RANKS] * (1 - fr) + flat[at + RANKS + 1] * fr
        return lo + (hi - lo) * fe

    def _top1(self, rpos: tuple[int, float] | None) -> float:
        return self._gather1(self._flat[1], (EXPOSURES - 2, 1.0), rpos)

    def _integral1(self, exposure: float, rpos: tuple[int, float] | None) -> float:
        out = self._gather1(self._flat[2], self._epos1(exposure), rpos)
        over = exposure - self._flat[3][-1]
        return out + over * self._top1(rpos) if over > 0 else out

    def held_at(self, base: float, exposure: float, room: float) -> float:
        """``held`` for one table on one node."""
        room = min(room, self.n)
        base = min(base, room)
        ep = self._epos1(exposure)
        grown = (self._gather1(self._flat[0], ep, self._rpos1(room))
                 - self._gather1(self._flat[0], ep, self._rpos1(base)))
        return min(base + grown, room)

    def mean_hit_at(self, base: float, exposure: float, room: float, rate: float,
                    steps: float) -> float:
        """``mean_hit`` for one table on one node."""
        room = min(room, self.n)
        base = min(base, room)
        rb, rr = self._rpos1(base), self._rpos1(room)
        span = rate * max(steps, 0.0)
        if span <= 0:
            ep = self._epos1(exposure)
            grown = (self._gather1(self._flat[1], ep, rr)
                     - self._gather1(self._flat[1], ep, rb))
        else:
            e1 = exposure + span
            grown = (self._integral1(e1, rr) - self._integral1(e1, rb)
                     - self._integral1(exposure, rr) + self._integral1(exposure, rb)) / span
        return self._top1(rb) + grown

    def warm_steps(self, room: float, rate: float, share: float = 0.9) -> float:
        """Steps at ``rate`` ids a step until the cache serves ``share`` of what it serves
        warm (for reports)."""
        target = share * float(self.hit(0.0, self.e[-1], room))
        e = np.geomspace(1.0, self.e[-1], 4 * EXPOSURES)
        h = self.hit(0.0, e, room)
        return float(e[np.argmax(h >= target)] / max(rate, 1e-12))


def warm_curve(n: float, alpha: float, draws: float) -> WarmCurve:
    """The table's curve (cached per table size, alpha and ids per step)."""
    return WarmCurve.of(float(n), float(alpha), float(draws))
