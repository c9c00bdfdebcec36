"""How many GPUs the best packing of the pods arrived so far needs (FGD protocol order), to set
against a policy's moment of running out of empty GPUs.

For the pods arrived up to ``pct`` % of capacity: the configuration LP (Gilmore-Gomory, column
generation with an unbounded-knapsack pricing step over 10-milli steps) for the fewest GPUs
that hold every share, plus one GPU per whole-GPU request. CPU, memory, models, nodes and the
arrival order are ignored, so it is a lower bound on the GPUs any policy has touched there.

    PYTHONPATH=. python bench/reports/fgd-heldout/share-heavy-pack/prefix_lp.py LIST SEED PCT...
"""

from __future__ import annotations

import sys
from collections import Counter

import numpy as np
from scipy.optimize import linprog

import bench.sim.fgd as fgd
from bench.sim.trace import NODE_LIST, load_nodes, load_pods
from extender.placement.policies.share_price import STEP, _knapsack, _packing


def min_gpus(sizes: list[int], counts: np.ndarray) -> float:
    weights = -(-np.array(sizes) // STEP)
    cols = [np.eye(len(sizes), dtype=np.int64)[i] for i in range(len(sizes))]
    while True:
        a = np.array(cols).T
        res = linprog(np.ones(a.shape[1]), A_ub=-a, b_ub=-counts, method="highs")
        prices = -res.ineqlin.marginals
        best, pick = _knapsack(weights, prices)
        if best[-1] <= 1 + 1e-9:
            return float(res.fun)
        cfg = _packing(pick, weights, len(sizes))
        if any((cfg == c).all() for c in cols):
            return float(res.fun)
        cols.append(cfg)


def main() -> None:
    workload, seed = sys.argv[1], int(sys.argv[2])
    nodes = load_nodes(NODE_LIST)
    capacity = int(nodes["gpu"].sum()) * 1000
    order = fgd.prepare(load_pods(workload), seed, 1.3, capacity)
    request = (order.num_gpu * order.gpu_milli).to_numpy()
    for pct in map(float, sys.argv[3:]):
        pre = order[np.cumsum(request) <= pct / 100 * capacity]
        share = pre[(pre.num_gpu == 1) & (pre.gpu_milli < 1000) & (pre.gpu_milli > 0)]
        whole = int(pre.num_gpu[pre.gpu_milli >= 1000].sum())
        counts = Counter(share.gpu_milli.tolist())
        sizes = sorted(counts)
        gpus = min_gpus(sizes, np.array([counts[s] for s in sizes], dtype=np.float64))
        print(f"arrived {pct}%: shares need {gpus:.1f} GPUs + whole {whole} = "
              f"{gpus + whole:.1f} of {capacity // 1000}")


if __name__ == "__main__":
    main()
