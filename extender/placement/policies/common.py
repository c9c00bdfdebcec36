"""Helpers shared by the trace baselines (FGD paper policies and stock-Kubernetes models). Pure.

The baselines score *nodes* (kube-scheduler score plugins); the core asks a policy for per-GPU
costs. They are mapped onto that interface so that the core's optimum reproduces the node
score exactly:

* whole-GPU slots cost ``(100 - score) / W`` each (W slots sum to ``100 - score``), share
  slots cost ``100 - score`` (scores are 0..100; costs stay non-negative, which the core's
  infeasibility test relies on);
* the GPU the original picks inside the node gets the smallest offset ``TIE * rank`` (ranks
  < 1e5, so offsets stay far below one score point); the simulator rounds node costs to
  ``score_step`` before taking the minimum, so nodes with equal scores tie exactly and the
  first (smallest-name) node wins, as in the authors' ``selectHost``.

Beyond the GPU state, several baselines read the pod's CPU request (``demand.cpu_milli``, set by
the simulator's trace demands) and what kube-scheduler knows about each node (``state.host``, a
:class:`HostView` the simulator attaches). Without them CPU is treated as not binding.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from extender.demand import PodDemand
from extender.placement.fit import GpuMasks
from extender.placement.state import ClusterState

MAX_SPEC_CPU = 128_000  # the FGD simulator's normalisers (pkg/utils/const.go)
MAX_SPEC_GPU = 8_000
MAX_NODE_SCORE = 100
TIE = 1e-6
MAX_TAG = 64  # k-GPU pod tags 1..64, tag 0 = GPU share


@dataclass
class HostView:
    """Per node (state index order): CPU and host memory, and the GPU pods running there."""

    cpu_cap: np.ndarray
    cpu_left: np.ndarray
    mem_cap: np.ndarray
    mem_left: np.ndarray
    pods: np.ndarray
    tag_count: np.ndarray = field(default=None)  # type: ignore[assignment]
    # True when every change of a node's CPU or memory also renews its ``node_stamp`` in the
    # state (the extender's HostBook does): cost caches keyed by node stamps stay valid.
    stamped: bool = False

    def __post_init__(self) -> None:
        if self.tag_count is None:
            self.tag_count = np.zeros((len(self.cpu_cap), MAX_TAG + 1), dtype=np.int64)

    @classmethod
    def unlimited(cls, n: int) -> HostView:
        big = np.full(n, 10**12, dtype=np.int64)
        return cls(big, big.copy(), big.copy(), big.copy(), np.zeros(n, dtype=np.int64))


def pod_cpu(demand: PodDemand) -> int:
    return int(getattr(demand, "cpu_milli", 0))


def pod_mem(demand: PodDemand) -> int:
    """Host memory the pod asks (MiB; the simulator's trace demands carry it)."""
    return int(getattr(demand, "host_mem_mib", 0))


def pod_tag(demand: PodDemand) -> int:
    """GpuClustering's pod tag: 0 = GPU share, k = k whole GPUs, -1 = no GPU."""
    if demand.has_share and demand.whole_gpus == 0:
        return 0
    return min(demand.whole_gpus, MAX_TAG) if demand.whole_gpus else -1


def host_of(state: ClusterState) -> HostView:
    """The state's host view, or a read-only unlimited one (the extender knows no CPU: the
    scheduler's own plugins check it), built once per cluster size."""
    host = getattr(state, "host", None)
    if host is None:
        host = _unlimited(len(state.node_names))
    return host


@lru_cache(maxsize=4)
def _unlimited(n: int) -> HostView:
    host = HostView.unlimited(n)
    for a in (host.cpu_cap, host.cpu_left, host.mem_cap, host.mem_left, host.pods,
              host.tag_count):
        a.setflags(write=False)
    return host


def candidate_nodes(state: ClusterState, masks: GpuMasks) -> np.ndarray:
    """State node index of each candidate (position = ``masks.owner`` value)."""
    n = int(masks.owner.max()) + 1 if len(masks.owner) else 0
    nodes = np.zeros(n, dtype=np.int64)
    nodes[masks.owner] = state.gpu_node[masks.gpus]
    return nodes


def local_index(state: ClusterState, gpus: np.ndarray) -> np.ndarray:
    """Position of each GPU inside its node (0 = the node's first GPU)."""
    return gpus - state.node_start[state.gpu_node[gpus]]


def segment_sum(values: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
    """Sum rows of ``values`` (G or G x M) per owner; owners are sorted (contiguous runs)."""
    values = np.asarray(values, dtype=np.float64)
    ids = np.arange(n)
    lo = np.searchsorted(owner, ids, "left")
    hi = np.searchsorted(owner, ids, "right")
    zero = np.zeros((1, *values.shape[1:]))
    cs = np.concatenate([zero, np.cumsum(values, axis=0)], axis=0)
    return cs[hi] - cs[lo]


def node_sums(values: np.ndarray, owner: np.ndarray, n: int, alike: int = 0) -> np.ndarray:
    """``segment_sum``; where every node has ``alike`` GPUs (runs of one length), a row sum
    of the reshaped values (a few operations, not a dozen: a node's refill after a bind)."""
    if alike:
        return values.reshape(n, alike, *values.shape[1:]).sum(axis=1, dtype=np.float64)
    return segment_sum(values, owner, n)


def node_milli_left(state: ClusterState, masks: GpuMasks, n: int) -> np.ndarray:
    """U_n: GPU milli left summed over each candidate node's GPUs."""
    return segment_sum(state.milli_free[masks.gpus], masks.owner, n)


def node_fits(demand: PodDemand, masks: GpuMasks, n: int) -> np.ndarray:
    """Per candidate: can the pod's GPU slots be placed (same rule as ``fit``)."""
    free = np.bincount(masks.owner, weights=masks.free, minlength=n)
    share = np.bincount(masks.owner, weights=masks.share, minlength=n)
    either = np.bincount(masks.owner, weights=masks.free | masks.share, minlength=n)
    w = demand.whole_gpus
    if demand.has_share:
        return (free >= w) & (share >= 1) & (either >= w + 1)
    return free >= w


def best_gpu_rank(state: ClusterState, demand: PodDemand, gpus: np.ndarray) -> np.ndarray:
    """The FGD simulator's ``best`` GPU choice as a rank: least milli left after the share
    first, ties to the lowest index."""
    left = state.milli_free[gpus] - demand.share_milli
    return np.maximum(left, 0) * 100 + np.minimum(local_index(state, gpus), 99)


def node_score_costs(
    state: ClusterState, demand: PodDemand, masks: GpuMasks, score: np.ndarray,
    share_rank: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-GPU costs that make the core's node optimum ``100 - score[node]`` (module doc)."""
    per_gpu = MAX_NODE_SCORE - score[masks.owner].astype(np.float64)
    idx = local_index(state, masks.gpus)
    if share_rank is None:
        share_rank = best_gpu_rank(state, demand, masks.gpus)
    share = per_gpu + TIE * share_rank
    whole = per_gpu / max(demand.whole_gpus, 1) + TIE * idx
    return share, whole


def gpu_total_request(demand: PodDemand) -> int:
    """G_p = num_gpu x per-GPU milli."""
    return demand.whole_gpus * 1000 + (demand.share_milli if demand.has_share else 0)


def all_milli_left(state: ClusterState) -> np.ndarray:
    """U_n for every node of the state."""
    return segment_sum(state.milli_free, state.gpu_node, len(state.node_names))


class CpuGpuScore:
    """A baseline whose node score is ``score(cpu_left, gpu_left, pod_cpu, pod_gpu)`` with
    U_n as GPU left; the GPU inside the node is the simulator's ``best`` choice, and CPU-only
    pods get the same formula with no GPU request. Subclasses set ``name`` and ``score``."""

    name = ""
    score_step = 1.0

    @staticmethod
    def score(cpu_left: np.ndarray, gpu_left: np.ndarray, cpu: int, gpu: int) -> np.ndarray:
        raise NotImplementedError

    def costs(
        self, state: ClusterState, demand: PodDemand, masks: GpuMasks
    ) -> tuple[np.ndarray, np.ndarray]:
        nodes = candidate_nodes(state, masks)
        u = node_milli_left(state, masks, len(nodes))
        score = self.score(host_of(state).cpu_left[nodes], u, pod_cpu(demand),
                           gpu_total_request(demand))
        return node_score_costs(state, demand, masks, score)

    def host_costs(self, state: ClusterState, demand: PodDemand, nodes: np.ndarray) -> np.ndarray:
        u = all_milli_left(state)[nodes]
        return -self.score(host_of(state).cpu_left[nodes], u, pod_cpu(demand), 0)
