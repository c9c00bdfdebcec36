"""sparse: least interference first, then least fragmentation.

For a share of class a on GPU g with resident pods of classes b1..bk:

    share cost(g) = interference_weight * sum_i loss(a, bi)          (see extender/interference)
                  + open_gpu_cost            if g is empty (sharing nothing costs a GPU)
                  + fit_weight * free fraction left on g after the share   (best fit)
    whole cost(g) = fit_weight * fraction of g's node still free     (keep empty nodes whole)

``loss`` is the throughput both jobs lose, in GPUs' worth of work, so with the defaults a share
joins a GPU when the pair together does more than one GPU alone (loss < 1) and opens an empty
GPU otherwise. With no class information every pair gets the mean loss of the matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from extender.demand import PodDemand
from extender.placement.fit import GpuMasks
from extender.placement.policies.base import gpu_free_after, node_free_fraction
from extender.placement.state import ClusterState

NAME = "sparse"


@dataclass(frozen=True)
class Sparse:
    interference_weight: float = 1.0
    open_gpu_cost: float = 1.0
    fit_weight: float = 0.1
    name: str = NAME

    def costs(
        self, state: ClusterState, demand: PodDemand, masks: GpuMasks
    ) -> tuple[np.ndarray, np.ndarray]:
        gpus = masks.gpus
        loss_row = state.matrix.loss[state.matrix.index(demand.job_class)]
        residents = state.class_count[gpus]
        interference = residents @ loss_row
        empty = residents.sum(axis=1) == 0
        share = (
            self.interference_weight * interference
            + self.open_gpu_cost * empty
            + self.fit_weight * gpu_free_after(state, demand, gpus)
        )
        whole = self.fit_weight * node_free_fraction(state, masks)
        return share, whole
