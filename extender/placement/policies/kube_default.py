"""kube-exclusive and kube-shared: models of stock Kubernetes GPU scheduling, for benchmarks.

* ``kube-exclusive``: the NVIDIA device plugin alone. GPUs are whole: a pod asking for a share
  gets one whole GPU (``exclusive = True``; the simulator turns its share into one whole GPU).
  Nodes are chosen by the default scheduler's spreading, ``NodeResourcesLeastAllocated`` over
  CPU and host memory:  score = int((100 (cpu_free - c_p) / cpu_cap
  + 100 (mem_free - m_p) / mem_cap) / 2), highest first, ties to the first node.
* ``kube-shared``: Aliyun gpushare (scheduler extender + device plugin). Node choice is the same
  default spreading (gpushare only filters); inside the node the share goes to the GPU with the
  least GPU memory left that still fits (gpushare's binpack), ties to the lowest index.
"""

from __future__ import annotations

import numpy as np

from extender.demand import PodDemand
from extender.placement.fit import GpuMasks
from extender.placement.policies.common import (
    candidate_nodes,
    host_of,
    local_index,
    node_score_costs,
    pod_cpu,
)
from extender.placement.state import ClusterState

EXCLUSIVE = "kube-exclusive"
SHARED = "kube-shared"


def least_allocated(state: ClusterState, demand: PodDemand, nodes: np.ndarray) -> np.ndarray:
    host = host_of(state)
    mem = int(getattr(demand, "host_mem_mib", 0))
    cpu_cap = np.maximum(host.cpu_cap[nodes], 1)
    mem_cap = np.maximum(host.mem_cap[nodes], 1)
    cpu = (host.cpu_left[nodes] - pod_cpu(demand)) * 100 // cpu_cap
    mem = (host.mem_left[nodes] - mem) * 100 // mem_cap
    return ((cpu + mem) // 2).astype(np.float64)


class KubeExclusive:
    name = EXCLUSIVE
    score_step = 1.0
    exclusive = True

    def costs(
        self, state: ClusterState, demand: PodDemand, masks: GpuMasks
    ) -> tuple[np.ndarray, np.ndarray]:
        score = least_allocated(state, demand, candidate_nodes(state, masks))
        return node_score_costs(state, demand, masks, score, local_index(state, masks.gpus))

    def host_costs(self, state: ClusterState, demand: PodDemand, nodes: np.ndarray) -> np.ndarray:
        return -least_allocated(state, demand, nodes)


class KubeShared:
    name = SHARED
    score_step = 1.0
    exclusive = False

    def costs(
        self, state: ClusterState, demand: PodDemand, masks: GpuMasks
    ) -> tuple[np.ndarray, np.ndarray]:
        gpus = masks.gpus
        score = least_allocated(state, demand, candidate_nodes(state, masks))
        mem_left = (state.mem_free[gpus] - demand.share_mem_mib) / state.mem_cap[gpus]
        rank = np.floor(np.clip(mem_left, 0, 1) * 999) * 100 + np.minimum(
            local_index(state, gpus), 99)
        return node_score_costs(state, demand, masks, score, rank)

    def host_costs(self, state: ClusterState, demand: PodDemand, nodes: np.ndarray) -> np.ndarray:
        return -least_allocated(state, demand, nodes)
