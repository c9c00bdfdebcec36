"""binpack: fill the fullest GPU on the fullest node first (gpushare's behaviour).

share cost(g) = free fraction left on g after the share + fraction of g's node still free
whole cost(g) = fraction of g's node still free
"""

from __future__ import annotations

import numpy as np

from extender.demand import PodDemand
from extender.placement.fit import GpuMasks
from extender.placement.policies.base import gpu_free_after, node_free_fraction
from extender.placement.state import ClusterState

NAME = "binpack"


class Binpack:
    name = NAME

    def costs(
        self, state: ClusterState, demand: PodDemand, masks: GpuMasks
    ) -> tuple[np.ndarray, np.ndarray]:
        node_free = node_free_fraction(state, masks)
        return gpu_free_after(state, demand, masks.gpus) + node_free, node_free
