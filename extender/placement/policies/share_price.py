"""What a GPU's free milli is worth to the current mix of share sizes, priced by the mix's own
best packing. Pure.

The shares of a mix (sizes ``s`` with popularities ``q_s``) need, packed as well as possible,
``min sum_c x_c`` GPUs subject to ``sum_c a_sc x_c >= q_s``: ``x_c`` GPUs hold the set of
shares ``c`` (``a_sc`` of size ``s``, fitting in one GPU). The linear program's dual prices
``y_s >= 0`` (``sum_{s in c} y_s <= 1`` for every set that fits) say what one share of each
size costs in GPUs when the whole mix is packed at its best (Gilmore and Gomory, Operations
Research 1961, solved by column generation; the pricing step is an unbounded knapsack over
10-milli steps). A size that is scarce next to the gaps it could fill is worth nothing (the
mix has more room beside large shares than small shares to put there); a size whose partners
are plentiful costs its share of a full GPU.

``value(r)`` is the most a GPU with ``r`` milli free can still hold, in those prices (the same
knapsack, read at ``r``). A share of ``s`` placed on a GPU with ``L`` free turns ``L`` into
``L - s``: ``value(L) - value(L - s)`` GPUs of the mix's worth leave that GPU, of which the
share itself brings back ``y_s`` (the same on every GPU, so left out). Where the share joins
a set of the best packing the cost is the least (0 after ``y_s``); where it leaves a gap only
scarce sizes fill (a 320 beside a 470 when 470s pair and 160s are spent beside 810s) it costs
what that gap was worth to the sizes that would have closed it. Unlike a fill-by-popularity
model (``remainder.py``), which assumes every gap will be offered the small shares in
proportion to their popularity, the prices see how many gaps compete for how few of them.

Solving the table takes 10-70 ms (the LP's rounds and a Python knapsack), too long for a
request: a policy may hand the solve out as a ``PriceJob`` (the mix and the packings to start
from) and take back a ``PriceTable``; ``value_table(job.tasks, job.start)`` is all a worker
runs (its arguments and result pickle).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog

from extender.placement.policies.fgd import FragModel, TypicalTasks

MILLI = 1000
STEP = 10  # milli per knapsack step (the learned mix rounds share sizes up to this)
MAX_ROUNDS = 500  # column-generation rounds, a guard: the mixes here need tens


def _knapsack(weights: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Best value in ``r`` steps (r = 0..MILLI/STEP), any number of each item, and the item
    taken last at each r (-1: a step left empty)."""
    cap = MILLI // STEP
    best = np.zeros(cap + 1)
    pick = np.full(cap + 1, -1)
    for r in range(1, cap + 1):
        best[r], pick[r] = best[r - 1], -1
        fit = weights <= r
        if fit.any():
            gain = np.where(fit, best[np.maximum(r - weights, 0)] + values, -np.inf)
            i = int(np.argmax(gain))
            if gain[i] > best[r] + 1e-12:
                best[r], pick[r] = gain[i], i
    return best, pick


def _packing(best_pick: np.ndarray, weights: np.ndarray, n: int) -> np.ndarray:
    """The set of items the knapsack's full GPU holds."""
    cfg, r = np.zeros(n, dtype=np.int64), len(best_pick) - 1
    while r > 0:
        i = best_pick[r]
        if i < 0:
            r -= 1
        else:
            cfg[i] += 1
            r -= int(weights[i])
    return cfg


Packing = dict[int, int]  # share size (milli) -> how many on one GPU


def share_prices(sizes: np.ndarray, q: np.ndarray, start: tuple[Packing, ...] = ()
                 ) -> tuple[np.ndarray, tuple[Packing, ...]]:
    """Dual prices (GPUs per share) of the best packing of shares of ``sizes`` milli (< 1000,
    multiples of ``STEP``) in amounts ``q``, and the GPU packings the program ended with.
    ``start``: packings to begin from (an earlier mix's; those with sizes no longer in the
    mix are dropped), so a mix that changed a little is priced in a few rounds."""
    sizes = np.asarray(sizes, dtype=np.int64)
    weights = -(-sizes // STEP)
    n = len(weights)
    index = {int(s): i for i, s in enumerate(sizes)}
    cols = [np.eye(n, dtype=np.int64)[i] for i in range(n)]
    for packing in start:
        if all(s in index for s in packing):
            col = np.zeros(n, dtype=np.int64)
            for s, k in packing.items():
                col[index[s]] = k
            if col.sum() > 1:
                cols.append(col)
    prices = np.ones(n)
    for _ in range(MAX_ROUNDS):
        a = np.array(cols).T
        res = linprog(np.ones(a.shape[1]), A_ub=-a, b_ub=-q, bounds=(0, None), method="highs")
        if res.status != 0:
            break
        prices = np.maximum(-res.ineqlin.marginals, 0.0)
        best, pick = _knapsack(weights, prices)
        if best[-1] <= 1.0 + 1e-9:
            break
        cfg = _packing(pick, weights, n)
        if any((cfg == col).all() for col in cols):
            break
        cols.append(cfg)
    used = tuple({int(sizes[i]): int(k) for i, k in enumerate(col) if k}
                 for col in cols if col.sum() > 1)
    return prices, used


def share_tasks(tasks: TypicalTasks) -> np.ndarray:
    """Which of the mix's tasks are shares: one GPU's part, more than nothing, less than all."""
    return (tasks.num <= 1) & (tasks.milli > 0) & (tasks.milli < MILLI)


def value_table(tasks: TypicalTasks, start: tuple[Packing, ...] = ()
                ) -> tuple[np.ndarray, tuple[Packing, ...]]:
    """``value(r)`` for r = 0..1000 milli: the most, in the mix's share prices, a GPU with r
    free can hold (shares of the mix only; whole GPUs, CPU and models left out; all zeros
    when the mix has no shares), and the packings to start the next mix's prices from."""
    share = share_tasks(tasks)
    if not share.any():
        return np.zeros(MILLI + 1), start
    sizes = np.ceil(tasks.milli[share] / STEP).astype(np.int64) * STEP
    q = np.bincount(sizes // STEP, weights=tasks.p[share], minlength=MILLI // STEP + 1)
    kept = np.flatnonzero(q)
    sizes, q = kept * STEP, q[kept] / q[kept].sum()
    prices, used = share_prices(sizes, q, start)
    best, _ = _knapsack(sizes // STEP, prices)
    return best[np.arange(MILLI + 1) // STEP], used


@dataclass(frozen=True, eq=False)
class PriceJob:
    """A value table to solve: the mix's ``tasks`` (those of ``model``, the fragmentation
    model the table will price for, compared by identity and never sent to a worker) and the
    packings to warm-start from."""

    model: FragModel
    tasks: TypicalTasks
    start: tuple[Packing, ...]


@dataclass(frozen=True, eq=False)
class PriceTable:
    """A solved value table and the job it answers; held by identity (a cost cache's epoch)."""

    job: PriceJob
    value: np.ndarray
    packings: tuple[Packing, ...]  # the next mix's warm start


def solve(job: PriceJob) -> PriceTable:
    """The job's table, here and now."""
    return PriceTable(job, *value_table(job.tasks, job.start))


def price_cost(value: np.ndarray, left: np.ndarray, share_milli: int) -> np.ndarray:
    """GPUs of the mix's worth a share of ``share_milli`` takes from GPUs with ``left`` milli
    free (``value(left) - value(left - s)``, >= 0); where it does not fit, 0 (never read)."""
    left = np.clip(np.asarray(left, dtype=np.int64), 0, MILLI)
    after = np.clip(left - int(share_milli), 0, MILLI)
    return value[left] - value[after]


def host_share(tasks: TypicalTasks, cpu_left: np.ndarray | None, mem_left: np.ndarray | None,
               model_ok: np.ndarray | None = None) -> np.ndarray:
    """Per node: the part of the mix's shares (by popularity) that may use the node's GPU
    model (``model_ok``: nodes x tasks, None = all) and whose CPU and host memory fit what the
    node has left (None = not tested); 1 where the mix has no shares. A GPU's free milli is
    worth that part of ``value``: the shares that cannot reach it cannot use it."""
    share = share_tasks(tasks)
    p = tasks.p[share]
    total = p.sum()
    n = len(cpu_left) if cpu_left is not None else len(model_ok)
    if total <= 0:
        return np.ones(n)
    fits = model_ok[:, share] if model_ok is not None else None
    if cpu_left is not None:
        # float against float: a mixed int/float comparison casts element by element
        ok = np.asarray(cpu_left, dtype=np.float64)[:, None] >= tasks.cpu[share]
        if tasks.mem is not None and mem_left is not None:
            ok &= np.asarray(mem_left, dtype=np.float64)[:, None] >= tasks.mem[share]
        fits = ok if fits is None else fits & ok
    if fits is None:
        return np.ones(n)
    return np.dot(fits.astype(np.float64), p) / total
