"""dot-product (FGD paper baseline ``DotProd``, ``dot_product_score.go``, merge/max), exactly as
the authors implemented it: the *smallest* dot product of free and requested resources wins.

    dp(n)    = [(c_n / 128000) (c_p / 128000) + (U_n / 8000) (G_p / 8000)] / 2
    score(n) = int(100 (1 - dp))

(the opposite of Tetris's max-alignment rule; it behaves like a best-fit variant). GPU inside
the node: least milli left that still fits, ties to the lowest index. CPU-only pods use the same
formula with G_p = 0.
"""

from __future__ import annotations

import numpy as np

from extender.placement.policies.common import (
    MAX_NODE_SCORE,
    MAX_SPEC_CPU,
    MAX_SPEC_GPU,
    CpuGpuScore,
)

NAME = "dot-product"


def dot_product_score(
    cpu_left: np.ndarray, gpu_left: np.ndarray, cpu: int, gpu: int
) -> np.ndarray:
    dp = (cpu_left / MAX_SPEC_CPU) * (cpu / MAX_SPEC_CPU) + (gpu_left / MAX_SPEC_GPU) * (
        gpu / MAX_SPEC_GPU
    )
    score = np.trunc(MAX_NODE_SCORE * (1.0 - dp / 2.0))
    return np.where(cpu_left < cpu, 0.0, score)


class DotProduct(CpuGpuScore):
    name = NAME
    score = staticmethod(dot_product_score)
