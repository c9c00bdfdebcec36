"""best-fit (FGD paper baseline ``BestFit``, ``best_fit_score.go``): least leftover CPU and GPU.

    score(n) = int(100 * (1 - [0.5 (c_n - c_p) / 128000 + 0.5 (U_n - G_p) / 8000]))

c = CPU milli left, U_n = GPU milli left summed over the node's GPUs, G_p = num_gpu x milli.
The min-max normalisation of the original preserves order (and is injective on 0..100), so it
is left out. GPU inside the node: least milli left that still fits, ties to the lowest index.
CPU-only pods are scored by the same formula (``host_costs``).
"""

from __future__ import annotations

import numpy as np

from extender.placement.policies.common import (
    MAX_NODE_SCORE,
    MAX_SPEC_CPU,
    MAX_SPEC_GPU,
    CpuGpuScore,
)

NAME = "best-fit"


def best_fit_score(cpu_left: np.ndarray, gpu_left: np.ndarray, cpu: int, gpu: int) -> np.ndarray:
    lead = 0.5 * (cpu_left - cpu) / MAX_SPEC_CPU + 0.5 * (gpu_left - gpu) / MAX_SPEC_GPU
    return np.trunc(MAX_NODE_SCORE * (1.0 - lead))


class BestFit(CpuGpuScore):
    name = NAME
    score = staticmethod(best_fit_score)
