"""How jobs sharing one GPU slow each other down in the replay (the simulator's ground truth).

Every policy's jobs run under this one model; no policy sees it. Per job, from its solo
profile: ``util`` (fraction of its step time with a kernel resident, NVML utilisation),
``sm`` (SM activity: the fraction of the GPU's SM-time its kernels fill) and ``dram`` (DRAM
bandwidth utilisation).

A job's step has a GPU part (``util`` of its solo step time) and a host part (data loading,
Python, launches). Sharing stretches only the GPU part: while its kernels run, the co-runners'
kernels hold the SMs they fill, so its GPU part takes ``1 + sum of the others' sm`` as long
(processor sharing of the SMs), and longer again when the jobs together ask for more DRAM
bandwidth than there is::

    step(i) / solo step(i) = (1 - util_i) + util_i * (1 + sum_{j != i} sm_j) * max(1, sum_j dram_j)

Two jobs that keep the GPU fully busy each run at 1/2 (time-slicing); two light jobs
(util 0.4, sm 0.15) keep 0.94 of their speed, as Lucid measured for NeuMF pairs; a light
job next to a heavy one loses more than the heavy one does, as in Gavel's measurements.
The SM-time delivered on a GPU never exceeds the GPU: speeds are scaled down when the sum of
``sm x speed`` would.
"""

from __future__ import annotations

import numpy as np


def shared_speeds(util: np.ndarray, sm: np.ndarray, dram: np.ndarray) -> np.ndarray:
    """Speed (fraction of solo throughput) of each job of one GPU."""
    util = np.asarray(util, dtype=np.float64)
    sm = np.asarray(sm, dtype=np.float64)
    if len(util) <= 1:
        return np.ones(len(util))
    bandwidth = max(1.0, float(np.sum(dram)))
    stretch = (1.0 - util) + util * (1.0 + (sm.sum() - sm)) * bandwidth
    speed = 1.0 / stretch
    delivered = float(np.dot(sm, speed))
    if delivered > 1.0:
        speed = speed / delivered
    return speed
