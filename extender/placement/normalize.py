"""One scaler from policy costs to the extender's integer scores 0..10. Pure."""

from __future__ import annotations

import math

import numpy as np

MAX_SCORE = 10


def scores_from_costs(costs: np.ndarray) -> list[int]:
    """Lowest finite cost -> 10, highest -> 0, linear between; infeasible (inf) -> 0.
    When every feasible node costs the same they all get 10."""
    return score_array(costs).tolist()  # Python ints: JSON integers, never floats


def score_array(costs: np.ndarray) -> np.ndarray:
    """``scores_from_costs`` as an int64 array (each score in 0..10)."""
    if not len(costs):
        return np.zeros(0, dtype=np.int64)
    lo, hi = float(costs.min()), float(costs.max())  # Python floats: no NumPy scalar calls
    if math.isfinite(lo) and math.isfinite(hi):  # every node feasible (no NaN): no masking
        if hi - lo <= 1e-12:
            return np.full(len(costs), MAX_SCORE, dtype=np.int64)
        # MAX_SCORE * (hi - costs) / (hi - lo), in place: the same operations in the same
        # order, so the same doubles; 0 <= each <= MAX_SCORE since lo <= cost <= hi.
        scaled = np.subtract(hi, costs)
        np.multiply(scaled, MAX_SCORE, out=scaled)
        np.divide(scaled, hi - lo, out=scaled)
        return np.rint(scaled, out=scaled).astype(np.int64)
    out = np.zeros(len(costs), dtype=np.int64)
    finite = np.isfinite(costs)
    if not finite.any():
        return out
    lo, hi = costs[finite].min(), costs[finite].max()
    if hi - lo <= 1e-12:
        out[finite] = MAX_SCORE
    else:
        out[finite] = np.rint(MAX_SCORE * (hi - costs[finite]) / (hi - lo)).astype(np.int64)
    return out
