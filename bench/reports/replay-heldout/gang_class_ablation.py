"""sparse's shipped queue order with and without the long gangs' class (a gang of >= 2 whole
GPUs in a critical band ahead of every band, extender/queueorder.py ``is_critical_gang``), 5
seeds, both modes, 1,000 jobs: one JSON line per run.

    python bench/reports/replay-heldout/gang_class_ablation.py <workload>... > runs.jsonl
"""

import json
import sys

from bench.sim import replay
from extender import queueorder

shipped = queueorder.DurationBands.is_critical_gang


def never(self: queueorder.DurationBands, band: int, gang_gpus: int = 0) -> bool:
    return False


for workload in sys.argv[1:]:
    for mode in ("high-load", "continuous"):
        for seed in range(42, 47):
            for gang in (True, False):
                queueorder.DurationBands.is_critical_gang = shipped if gang else never
                run = replay.run_replay(workload, "sparse", seed, mode=mode, n_jobs=1000)
                print(json.dumps({"workload": workload.split("/")[-1], "mode": mode,
                                  "seed": seed, "gang_class": gang,
                                  "makespan": round(run.makespan, 1),
                                  "jct_mean": round(run.jct_mean, 1)}), flush=True)
