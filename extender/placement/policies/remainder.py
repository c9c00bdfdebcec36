"""What a share's remainder is worth against the current mix of share sizes. Pure.

A GPU with ``r`` milli left is filled by the pods that come: each time, a pod of the mix that
fits (one GPU's worth or less) takes its size from ``r``, in proportion to its popularity,
until none fits. ``waste(r)`` is the milli expected to stay free at the end:

    waste(r) = r                                          if no pod of the mix fits in r
             = sum_{m <= r} q_m waste(r - m) / sum_{m <= r} q_m   otherwise

Placing a share of ``s`` on a GPU with ``L`` left turns ``L`` into ``L - s``: the capacity the
placement makes idle in expectation is ``waste(L - s) - waste(L)`` (negative where the share
takes a remainder that the coming pods would have used worse). Unlike a per-shape measure
(``FragModel.fill_frag``: copies of one shape at a time), the pods that fill a remainder are a
mix, as they are on a real GPU: 470 left beside a 530 share is filled by one 470 share or by a
320 and a 150, and its worth is what that mix makes of it.
"""

from __future__ import annotations

import numpy as np

from extender.placement.policies.fgd import TypicalTasks

MILLI = 1000


def waste_table(tasks: TypicalTasks) -> np.ndarray:
    """``waste(r)`` for r = 0..1000 milli, from the tasks that fit on one GPU (shares, and a
    whole GPU as 1000), weighed by popularity; models and CPU are left out."""
    one = (tasks.num <= 1) & (tasks.milli > 0)
    sizes = np.clip(np.rint(tasks.milli[one]), 1, MILLI).astype(np.int64)
    weights = tasks.p[one]
    if not len(sizes):
        return np.arange(MILLI + 1, dtype=np.float64)
    size_w = np.bincount(sizes, weights=weights, minlength=MILLI + 1)
    sizes = np.flatnonzero(size_w)
    q = size_w[sizes]
    waste = np.zeros(MILLI + 1)
    # waste(r) reads waste(r - m), m >= the smallest size: a block of r as long as that size
    # reads only values below the block, so the block is filled at once
    step = max(int(sizes.min()), 1)
    for start in range(0, MILLI + 1, step):
        r = np.arange(start, min(start + step, MILLI + 1))
        fit = sizes[None, :] <= r[:, None]
        weight = np.where(fit, q[None, :], 0.0)
        below = waste[np.where(fit, r[:, None] - sizes[None, :], 0)]
        total = weight.sum(axis=1)
        waste[r] = np.where(total > 0, (weight * below).sum(axis=1) / np.maximum(total, 1e-300),
                            r)
    return waste


def remainder_cost(waste: np.ndarray, left: np.ndarray, share_milli: int) -> np.ndarray:
    """GPUs made idle in expectation by a share of ``share_milli`` on GPUs with ``left`` milli
    free (``waste(left - s) - waste(left)`` / 1000); where it does not fit, 0 (never read)."""
    left = np.clip(np.asarray(left, dtype=np.int64), 0, MILLI)
    after = np.clip(left - int(share_milli), 0, MILLI)
    return (waste[after] - waste[left]) / MILLI
