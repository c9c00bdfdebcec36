"""random-fit (FGD paper baseline ``Random``, ``random_score.go``): a node drawn uniformly among
the feasible ones, and inside it a GPU drawn uniformly among those that fit (the original's
reservoir sample). Seeded: ``RandomFit(seed)`` or ``reseed(seed)``.
"""

from __future__ import annotations

import numpy as np

from extender.demand import PodDemand
from extender.placement.fit import GpuMasks
from extender.placement.policies.common import TIE, candidate_nodes, local_index, node_fits
from extender.placement.state import ClusterState

NAME = "random-fit"


class RandomFit:
    name = NAME
    score_step = 1.0

    def __init__(self, seed: int | None = None) -> None:
        self.reseed(seed)

    def reseed(self, seed: int | None) -> None:
        self.rng = np.random.default_rng(seed)

    def costs(
        self, state: ClusterState, demand: PodDemand, masks: GpuMasks
    ) -> tuple[np.ndarray, np.ndarray]:
        n = len(candidate_nodes(state, masks))
        score = np.zeros(n)
        feasible = np.flatnonzero(node_fits(demand, masks, n))
        if len(feasible):
            score[self.rng.choice(feasible)] = 100.0
        per_gpu = 100.0 - score[masks.owner]
        share = per_gpu + TIE * self.rng.permutation(len(masks.gpus))
        whole = per_gpu / max(demand.whole_gpus, 1) + TIE * local_index(state, masks.gpus)
        return share, whole

    def host_costs(self, state: ClusterState, demand: PodDemand, nodes: np.ndarray) -> np.ndarray:
        out = np.full(len(nodes), 100.0)
        if len(nodes):
            out[self.rng.integers(len(nodes))] = 0.0
        return out
