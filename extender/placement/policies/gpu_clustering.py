"""gpu-clustering (FGD paper baseline ``GpuClustering``, ``gpu_clustering_score.go``): keep pods
of the same shape together.

Pod tag: ``share-gpu`` (1 GPU, < 1000 milli) or ``<k>-gpu``; a node's tags are those of the GPU
pods on it (``state.host.tag_count``, kept by the simulator; CPU-only pods excluded).

    term = (25 * (8000 - U_n)) // 8000
    score = 75 + term  only the pod's own tag on n
            50 + term  own tag and others
            25 + term  no GPU pod on n
             0 + term  only other tags

CPU-only pods score 0 everywhere. GPU inside the node: least milli left that still fits.
"""

from __future__ import annotations

import numpy as np

from extender.demand import PodDemand
from extender.placement.fit import GpuMasks
from extender.placement.policies.common import (
    MAX_SPEC_GPU,
    candidate_nodes,
    host_of,
    node_milli_left,
    node_score_costs,
    pod_tag,
)
from extender.placement.state import ClusterState

NAME = "gpu-clustering"


def clustering_scores(tags: np.ndarray, gpu_left: np.ndarray, tag: int) -> np.ndarray:
    """``tags``: (nodes, tags) counts of GPU pods per tag."""
    term = (25 * (MAX_SPEC_GPU - gpu_left.astype(np.int64))) // MAX_SPEC_GPU
    present = tags > 0
    own = present[:, tag]
    others = present.sum(axis=1) - own
    base = np.where(own & (others == 0), 75, np.where(own, 50, np.where(others == 0, 25, 0)))
    return (base + term).astype(np.float64)


class GpuClustering:
    name = NAME
    score_step = 1.0

    def costs(
        self, state: ClusterState, demand: PodDemand, masks: GpuMasks
    ) -> tuple[np.ndarray, np.ndarray]:
        nodes = candidate_nodes(state, masks)
        u = node_milli_left(state, masks, len(nodes))
        score = clustering_scores(host_of(state).tag_count[nodes], u, max(pod_tag(demand), 0))
        return node_score_costs(state, demand, masks, score)

    def host_costs(self, state: ClusterState, demand: PodDemand, nodes: np.ndarray) -> np.ndarray:
        return np.zeros(len(nodes))
