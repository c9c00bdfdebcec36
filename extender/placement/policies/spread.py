"""spread: the emptiest GPU on the emptiest node (kube-scheduler's default spreading).

share cost(g) = (1 - free fraction left on g after the share) + (1 - fraction of node free)
whole cost(g) = 1 - fraction of g's node still free
"""

from __future__ import annotations

import numpy as np

from extender.demand import PodDemand
from extender.placement.fit import GpuMasks
from extender.placement.policies.base import gpu_free_after, node_free_fraction
from extender.placement.state import ClusterState

NAME = "spread"


class Spread:
    name = NAME

    def costs(
        self, state: ClusterState, demand: PodDemand, masks: GpuMasks
    ) -> tuple[np.ndarray, np.ndarray]:
        node_busy = 1.0 - node_free_fraction(state, masks)
        return (1.0 - gpu_free_after(state, demand, masks.gpus)) + node_busy, node_busy
