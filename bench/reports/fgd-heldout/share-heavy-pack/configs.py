"""What the unallocated GPUs of one FGD-protocol run are made of, GPU by GPU, against the best
packing of the same pods.

1. Runs the protocol (``bench.sim.fgd.run_fgd``) and, at arrived = 100 %, groups the GPUs by
   what they hold (the multiset of share sizes; a whole-GPU pod's GPU is "whole"; "empty"),
   printing per group the GPUs and the free milli it leaves.
2. A configuration-LP bound (Gilmore-Gomory column generation, pricing by an unbounded
   knapsack over 10-milli steps): the most GPU request the arrived pods could book on the
   cluster's GPUs if each GPU may take any set of shares that fits, CPU, memory, models,
   nodes and arrival order ignored. Its unallocated capacity is a lower bound for any policy,
   at least the sliver bound (``bench/sim/bounds.py``), which looks at one threshold only.
   The LP's own GPU groups are printed the same way.

    PYTHONPATH=. python bench/reports/fgd-heldout/share-heavy-pack/configs.py LIST SEED POLICY...
"""

from __future__ import annotations

import sys
from collections import Counter

import numpy as np
from scipy.optimize import linprog

import bench.sim.fgd as fgd
from bench.sim.trace import NODE_LIST, load_nodes, load_pods, workload_path

MILLI = 1000
STEP = 10


def arrived_pods(workload: str, seed: int):
    nodes = load_nodes(NODE_LIST)
    capacity = int(nodes["gpu"].sum()) * MILLI
    order = fgd.prepare(load_pods(workload_path(workload)), seed, 1.3, capacity)
    request = (order["num_gpu"] * order["gpu_milli"]).to_numpy(dtype=np.int64)
    return order[np.cumsum(request) <= capacity], capacity // MILLI


def lp_bound(order, gpus: int) -> tuple[float, list[tuple[Counter, float]]]:
    share = (order.num_gpu == 1) & (order.gpu_milli > 0) & (order.gpu_milli < MILLI)
    counts = Counter(order.gpu_milli[share].tolist())
    whole = int((order.num_gpu[order.gpu_milli >= MILLI]).sum())
    sizes = sorted(counts)
    n = np.array([counts[s] for s in sizes], dtype=np.float64)
    cols = [np.eye(len(sizes), dtype=np.int64)[i] for i in range(len(sizes))]  # one share
    while True:
        a = np.array(cols).T  # sizes x configs
        vol = np.array(sizes) @ a
        # max vol.x + 1000 w  s.t.  a x <= n,  sum x + w <= gpus,  w <= whole
        c = -np.concatenate([vol, [MILLI]]).astype(np.float64)
        a_ub = np.vstack([np.hstack([a, np.zeros((len(sizes), 1))]),
                          np.ones((1, a.shape[1] + 1))])
        b_ub = np.concatenate([n, [gpus]])
        bounds = [(0, None)] * a.shape[1] + [(0, whole)]
        res = linprog(c, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")
        duals = -res.ineqlin.marginals  # >= 0
        price, gpu_price = duals[:-1], duals[-1]
        # pricing: a set of shares on one GPU worth more than the GPU's price
        value = np.array(sizes) - price  # each share's reduced value
        cap = MILLI // STEP
        best = np.zeros(cap + 1)
        pick = np.full(cap + 1, -1)
        for r in range(1, cap + 1):
            best[r] = best[r - 1]
            pick[r] = -2  # leave a step free
            for i, s in enumerate(sizes):
                w = -(-s // STEP)
                if w <= r and value[i] > 0 and best[r - w] + value[i] > best[r] + 1e-9:
                    best[r], pick[r] = best[r - w] + value[i], i
        if best[cap] <= gpu_price + 1e-6:
            break
        cfg, r = np.zeros(len(sizes), dtype=np.int64), cap
        while r > 0:
            if pick[r] == -2:
                r -= 1
            else:
                cfg[pick[r]] += 1
                r -= -(-sizes[pick[r]] // STEP)
        if any((cfg == col).all() for col in cols):
            break
        cols.append(cfg)
    placed = -res.fun / MILLI
    groups = [(Counter({sizes[i]: int(k) for i, k in enumerate(col) if k}), x)
              for col, x in zip(cols, res.x[:-1], strict=True) if x > 1e-6]
    groups.append((Counter({"whole": 1}), res.x[-1]))
    return gpus - placed, groups


def label(cfg: Counter) -> str:
    return "+".join(f"{s}" + (f"x{k}" if k > 1 else "") for s, k in sorted(cfg.items(),
                                                                          key=str))


def show(groups: list[tuple[str, float, float]], top: int = 14) -> None:
    total = sum(w for _, _, w in groups)
    print(f"  free milli total {total / MILLI:.1f} GPUs")
    for name, gpus, waste in sorted(groups, key=lambda g: -g[2])[:top]:
        print(f"  {name:28s} GPUs {gpus:8.1f}  free {waste / MILLI:7.1f}")


def run_groups(workload: str, seed: int, policy: str) -> list[tuple[str, float, float]]:
    seen = {}
    breakdown = fgd.losses.breakdown

    def capture(sim, failed):
        if "groups" not in seen:
            st = sim.state
            uuid_index = {u: i for i, u in enumerate(st.gpu_uuid)}
            held = [Counter() for _ in range(len(st.gpu_uuid))]
            for p in sim.placed.values():
                if p.reservation is None:
                    continue
                for a in p.reservation.allocations:
                    key = "whole" if a.milli >= MILLI else a.milli
                    held[uuid_index[a.gpu]][key] += 1
            out = {}
            for g, cfg in enumerate(held):
                name = label(cfg) if cfg else "empty"
                n, w = out.get(name, (0, 0))
                out[name] = (n + 1, w + int(st.milli_cap[g] - st.milli_used[g]))
            seen["groups"] = [(k, n, w) for k, (n, w) in out.items()]
        return breakdown(sim, failed)

    fgd.losses.breakdown = capture
    try:
        run = fgd.run_fgd(workload, policy, seed)
    finally:
        fgd.losses.breakdown = breakdown
    print(f"{policy} seed {seed}: unallocated {run.unallocated_gpus_100:.1f}, sliver bound "
          f"{run.extra['unallocated_lower_bound_gpus']:.1f}")
    return seen["groups"]


def main() -> None:
    workload, seed, policies = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    order, gpus = arrived_pods(workload, seed)
    bound, groups = lp_bound(order, gpus)
    print(f"configuration-LP bound: {bound:.1f} unallocated GPUs ({gpus} GPUs)")
    show([(label(c), x, x * (MILLI - sum((0 if s == 'whole' else s) * k for s, k in c.items())
                             - (MILLI if 'whole' in c else 0)))
          for c, x in groups])
    for policy in policies:
        show(run_groups(workload, seed, policy))


if __name__ == "__main__":
    main()
