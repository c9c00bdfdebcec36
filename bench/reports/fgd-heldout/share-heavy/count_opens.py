"""How often a policy opens an empty GPU for a share while a partly used GPU has room for it.

One FGD-protocol run (``bench.sim.fgd.run_fgd``) with the simulator wrapped to count, for every
share it places: did it land on an untouched GPU, and was there then a partly used GPU anywhere
with that much milli free (``opened_with_gap``), on a node whose CPU and host memory still fit
the pod (``gap_fits_node``). Prints one JSON line with the counts and the losses' window view.

    PYTHONPATH=. python bench/reports/fgd-heldout/share-heavy/count_opens.py WORKLOAD SEED POLICY
"""

from __future__ import annotations

import json
import sys

import numpy as np

import bench.sim.fgd as fgd
from bench.sim.cluster import SimCluster

COUNTS = {"shares": 0, "opened": 0, "opened_with_gap": 0, "gap_fits_node": 0}


class CountingCluster(SimCluster):
    def schedule(self, d):
        st = self.state
        share = 0 < d.gpu_milli < 1000 and d.num_gpu == 1
        if share:
            gap = (st.milli_used > 0) & (st.milli_cap - st.milli_used >= d.gpu_milli)
            before = st.milli_used.copy()
        placed = super().schedule(d)
        if share and placed is not None:
            COUNTS["shares"] += 1
            took = np.flatnonzero(st.milli_used != before)
            if len(took) and before[took[0]] == 0:
                COUNTS["opened"] += 1
                if gap.any():
                    COUNTS["opened_with_gap"] += 1
                    nodes = np.unique(st.gpu_node[gap])
                    host = self.host
                    fits = ((host.cpu_left[nodes] >= d.cpu_milli)
                            & (host.mem_left[nodes] >= d.host_mem_mib))
                    COUNTS["gap_fits_node"] += int(fits.any())
        return placed


def main() -> None:
    workload, seed, policy = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    fgd.SimCluster = CountingCluster
    run = fgd.run_fgd(workload, policy, seed)
    window = {k: round(v, 2) for k, v in run.extra["losses"].items()
              if k.startswith(("first", "window", "failed"))}
    print(json.dumps({"workload": run.workload, "policy": policy, "seed": seed,
                      "unalloc": round(run.unallocated_gpus_100, 1), **COUNTS, **window}))


if __name__ == "__main__":
    main()
