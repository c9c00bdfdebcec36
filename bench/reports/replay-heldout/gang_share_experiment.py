"""Experiment (not shipped): the long gangs' class ahead of every band only while the GPUs
the running long gangs book are below the long gangs' share of the predicted work left
(waiting and running, as the latest-start drain counts it) x the cluster's GPUs; otherwise a
waiting long gang keeps its band. Applied at each pass over sparse's queue (after the
latest-start promotion, whose jobs keep their place). One JSON line per run:

    python bench/reports/replay-heldout/gang_share_experiment.py <workload> high-load:42 ...
"""

import json
import sys

import numpy as np

from bench.sim import queueing, replay
from extender.queueorder import DurationBands

state: dict = {}
shipped = queueing.CriticalPath.promote


def promote(self: queueing.CriticalPath, now: float, started: np.ndarray,
            done: np.ndarray) -> int:
    q = self.queue
    bands = state["bands"]
    if "gang" not in state:  # the ranks as the queue was built: the gang class's own value
        rank0 = q.rank.copy()
        state["gang"] = (rank0 == -bands.gang_priority()) & np.isfinite(self.predicted)
        state["band_rank"] = np.array(
            [-bands.priority(bands.band(float(p))) if np.isfinite(p) else r
             for p, r in zip(self.predicted, rank0, strict=True)])
    n = shipped(self, now, started, done)
    gang = state["gang"]
    running = np.isfinite(started) & ~np.isfinite(done)
    waiting = ~np.isfinite(started)
    left = np.where(running, np.maximum(self.expected - (now - started), 0.0), self.expected)
    use = self.known & (running | waiting)
    if self.arrive is not None:
        use &= self.arrive <= now
    work = np.where(use, left * self.gpus, 0.0)
    share = work[gang].sum() / work.sum() if work.sum() > 0 else 0.0
    ahead = self.gpus[running & gang].sum() < share * self.n_gpus
    changed = False
    for j in q.jobs:
        if gang[j] and not self.promoted[j]:
            rank = -bands.gang_priority() if ahead else state["band_rank"][j]
            changed |= bool(q.rank[j] != rank)
            q.rank[j] = rank
    if changed:
        q.jobs.sort(key=lambda k: (q.rank[k], q.seq[k]))
    return n


queueing.CriticalPath.promote = promote
workload = sys.argv[1]
pods = replay.load_pods(replay.workload_path(workload))
cap = replay.duration_cap(pods[(pods["num_gpu"] > 0) & (pods["gpu_milli"] > 0)])
for spec in sys.argv[2:]:
    mode, seed = spec.split(":")
    state.clear()
    state["bands"] = DurationBands.log_spaced(
        replay.MIN_DURATION_S, max(cap, 2 * replay.MIN_DURATION_S), 4, order="latest-start")
    run = replay.run_replay(workload, "sparse", int(seed), mode=mode, n_jobs=1000)
    print(json.dumps({"workload": workload.split("/")[-1], "mode": mode, "seed": int(seed),
                      "rule": "gang-share", "makespan": round(run.makespan, 1),
                      "jct_mean": round(run.jct_mean, 1)}), flush=True)
