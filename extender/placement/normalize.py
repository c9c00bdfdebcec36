"""One scaler from policy costs to the extender's integer scores 0..10. Pure."""

from __future__ import annotations

import numpy as np

MAX_SCORE = 10


def scores_from_costs(costs: np.ndarray) -> list[int]:
    """Lowest finite cost -> 10, highest -> 0, linear between; infeasible (inf) -> 0.
    When every feasible node costs the same they all get 10."""
    lo, hi = (costs.min(), costs.max()) if len(costs) else (np.inf, np.inf)
    if np.isfinite(lo) and np.isfinite(hi):  # every node feasible (no NaN either): no masking
        if hi - lo <= 1e-12:
            return [MAX_SCORE] * len(costs)
        return np.rint(MAX_SCORE * (hi - costs) / (hi - lo)).astype(np.int64).tolist()
    out = np.zeros(len(costs), dtype=np.int64)
    finite = np.isfinite(costs)
    if not finite.any():
        return out.tolist()
    lo, hi = costs[finite].min(), costs[finite].max()
    if hi - lo <= 1e-12:
        out[finite] = MAX_SCORE
    else:
        out[finite] = np.rint(MAX_SCORE * (hi - costs[finite]) / (hi - lo)).astype(np.int64)
    return out.tolist()  # Python ints: JSON integers, never floats
