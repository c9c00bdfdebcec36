"""Lower bounds on what any placement policy can reach, to read the experiments against.

``sliver_bound`` (FGD protocol): GPUs left unallocated when the arrived workload reaches 100 %
of capacity. Take a threshold h > 500 milli. Two shares of h or more never fit on one GPU, so
each such pod holds a GPU of its own and leaves at most 1000 - m free beside it; only shares of
1000 - h milli or less can ever use that space. Whatever the policy does, either those slivers
stay free or the pods meant for them failed (and count as unallocated themselves), so

    unallocated >= sum over arrived shares m >= h of (1000 - m)
                   - sum over arrived shares m <= 1000 - h of m

for every h; the bound is the largest over h. CPU, host memory and GPU-model constraints only
make things worse, so it holds with them too.

``work_bound`` (replay): GPU-seconds of the jobs as they ask (shares as fractions) over their
GPU-seconds on whole GPUs, the ratio of the two amounts of work a cluster must carry. A policy
that shares without any slowdown and leaves no GPU idle cannot beat this makespan ratio
against an exclusive scheduler that is itself perfectly packed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

MILLI = 1000


def sliver_bound(order: pd.DataFrame, capacity_milli: int) -> float:
    """Lower bound, in GPUs, on unallocated capacity at 100 % arrived (pods in submission
    order, as ``fgd.prepare`` returns them)."""
    request = (order["num_gpu"] * order["gpu_milli"]).to_numpy(dtype=np.int64)
    arrived = np.cumsum(request) <= capacity_milli
    milli = order["gpu_milli"].to_numpy(dtype=np.int64)[arrived]
    shares = milli[(order["num_gpu"].to_numpy()[arrived] == 1) & (milli > 0) & (milli < MILLI)]
    if not len(shares):
        return 0.0
    best = 0
    for h in np.unique(shares[shares > MILLI // 2]):
        gaps = int((MILLI - shares[shares >= h]).sum())
        fill = int(shares[shares <= MILLI - h].sum())
        best = max(best, gaps - fill)
    return best / MILLI


def fgd_sliver_bound(workload: str, seed: int, tune: float, nodes_path: str | None = None
                     ) -> float:
    """``sliver_bound`` of one FGD-protocol run, rebuilt from the trace (same submission order
    as ``fgd.run_fgd``)."""
    from bench.sim.fgd import prepare
    from bench.sim.trace import NODE_LIST, load_nodes, load_pods, workload_path

    nodes = load_nodes(nodes_path or NODE_LIST)
    capacity = int(nodes["gpu"].sum()) * MILLI
    return sliver_bound(prepare(load_pods(workload_path(workload)), seed, tune, capacity),
                        capacity)


def work_bound(request_gpus: np.ndarray, duration_s: np.ndarray) -> float:
    """Shared over exclusive GPU-seconds (see the module docstring)."""
    work = float((duration_s * request_gpus).sum())
    exclusive = float((duration_s * np.ceil(request_gpus)).sum())
    return work / exclusive if exclusive else 1.0
