"""gpu-packing (FGD paper baseline ``GpuPacking``, ``gpu_packing_score.go``).

Score of node n for a GPU pod (num GPUs of m milli each), highest first:

* case 3, every GPU of n fully free:   max(33 - k_n, k_n)            (fewer GPUs preferred)
* otherwise take, in ascending milli-left order, the first ``num`` GPUs with left >= m; with f
  of them fully free:
  * case 2, f > 0:                      max(50 - f, 33)
  * case 1, f = 0:                      max(100 - (sum_chosen left*100 // 1000) // 10, 50)

CPU-only pods score 0 everywhere (``host_costs``). GPU inside the node: least milli left that
still fits, ties to the lowest index.
"""

from __future__ import annotations

import numpy as np

from extender.demand import PodDemand
from extender.placement.fit import GpuMasks
from extender.placement.policies.common import candidate_nodes, node_score_costs, segment_sum
from extender.placement.state import ClusterState

NAME = "gpu-packing"


def packing_scores(
    left: np.ndarray, owner: np.ndarray, n: int, num: int, milli: int
) -> np.ndarray:
    """Per candidate node; ``left`` = milli left per GPU, ``owner`` sorted."""
    k = np.bincount(owner, minlength=n)
    full = left >= 1000
    n_full = np.bincount(owner, weights=full, minlength=n)
    case3 = np.maximum(33 - n_full, n_full)
    ok = left >= milli
    # Rank of each eligible GPU within its node in ascending milli-left order.
    order = np.lexsort((np.arange(len(left)), left, owner))
    o_owner, o_ok = owner[order], ok[order]
    cum = np.cumsum(o_ok)
    first = np.searchsorted(o_owner, o_owner)
    before = np.where(first > 0, cum[first - 1], 0)
    rank = cum - before  # 1-based among eligible, on eligible GPUs
    chosen = np.zeros(len(left), dtype=bool)
    chosen[order] = o_ok & (rank <= num)
    f = np.bincount(owner, weights=chosen & full, minlength=n)
    ratio = np.where(chosen, left * 100 // 1000, 0)
    case1 = np.maximum(100 - segment_sum(ratio, owner, n).astype(np.int64) // 10, 50)
    case2 = np.maximum(50 - f, 33)
    return np.where(n_full == k, case3, np.where(f > 0, case2, case1)).astype(np.float64)


class GpuPacking:
    name = NAME
    score_step = 1.0

    def costs(
        self, state: ClusterState, demand: PodDemand, masks: GpuMasks
    ) -> tuple[np.ndarray, np.ndarray]:
        n = len(candidate_nodes(state, masks))
        num = demand.whole_gpus + (1 if demand.has_share else 0)
        milli = demand.share_milli if demand.has_share else 1000
        score = packing_scores(state.milli_free[masks.gpus], masks.owner, n, num, milli)
        return node_score_costs(state, demand, masks, score)

    def host_costs(self, state: ClusterState, demand: PodDemand, nodes: np.ndarray) -> np.ndarray:
        return np.zeros(len(nodes))
