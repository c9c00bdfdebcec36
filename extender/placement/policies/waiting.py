"""Pods that wait for room, and what placing another pod costs them. Pure.

A pod the core is asked to place again (kube-scheduler retries an unschedulable pod; the trace
replay retries its queue after every departure) and that holds no reservation is *waiting*.
``WaitingPods`` remembers the pods it was asked about (once per scoring round, like the mix in
``sparse_mix``) and forgets them once booked or not asked about for ``window`` rounds. A pod
scored once only (the FGD protocol: one attempt per pod) never counts as waiting.

``drain_costs``: a waiting pod of k whole GPUs can start only on a node with k free GPUs. While
it waits, every pod placed on a node that could host it when empty takes that node further from
hosting it, and the closer the node was, the more it costs: with f = min(free GPUs, k), a node's
closeness to the pod is (f / k)^2 (convex: the last GPUs a node needs matter most, as only a
node with all k free helps), and a placement that takes the node from f to f' costs
``k * ((f/k)^2 - (f'/k)^2)`` GPUs, averaged over the waiting pods. A share that joins a GPU
already in use takes no free GPU and costs nothing; other pods go to the nodes farthest from
hosting the waiting pod, or to nodes that never can (too few GPUs, a model it may not use, too
little CPU or host memory in all), so the nodes nearest to it drain.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from extender.demand import PodDemand
from extender.placement.fit import GpuMasks
from extender.placement.policies.common import host_of, pod_cpu, pod_mem
from extender.placement.state import ClusterState

WINDOW = 5000  # scoring rounds a waiting pod is remembered without being asked about again


@dataclass(slots=True)
class Seen:
    gpus: int  # whole GPUs
    cpu: int
    mem: int
    models: frozenset[str] | None
    rounds: int  # scoring rounds it was asked about
    last: int  # the round it was last asked about


@dataclass
class WaitingPods:
    window: int = WINDOW
    _seen: dict[str, Seen] = field(default_factory=dict)  # multi-GPU pods asked about
    _retried: dict[str, Seen] = field(default_factory=dict)  # those asked about again
    _round: int = 0
    _last_uid: str | None = None

    def observe(self, demand: PodDemand) -> None:
        """Count one scoring round of the pod (repeated calls for one pod in a row: one)."""
        if demand.uid == self._last_uid:
            return
        self._last_uid = demand.uid
        self._round += 1
        if self._round % 1024 == 0:  # forget pods not asked about for a window
            old = self._round - self.window
            self._seen = {u: s for u, s in self._seen.items() if s.last >= old}
            self._retried = {u: s for u, s in self._retried.items() if u in self._seen}
        s = self._seen.get(demand.uid)
        if s is None:
            if demand.whole_gpus < 2:  # only multi-GPU pods are kept (they need whole nodes)
                return
            s = self._seen[demand.uid] = Seen(demand.whole_gpus, pod_cpu(demand),
                                              pod_mem(demand), demand.allowed_models, 0, 0)
        s.rounds += 1
        s.last = self._round
        if s.rounds == 2:
            self._retried[demand.uid] = s

    def waiting(self, state: ClusterState, exclude: str = "") -> list[Seen]:
        """The multi-GPU pods asked about more than once, unbooked, recently (only the pods
        asked about again are looked at: a cheap call when none is)."""
        if not self._retried:
            return []
        old = self._round - self.window
        booked = state.reservations
        gone = [u for u, s in self._retried.items() if s.last < old or u in booked]
        for u in gone:
            del self._retried[u]
            self._seen.pop(u, None)
        return [s for u, s in self._retried.items() if u != exclude]


def drain_costs(state: ClusterState, demand: PodDemand, masks: GpuMasks, pods: list[Seen]
                ) -> tuple[np.ndarray, np.ndarray]:
    """(share cost per candidate GPU, whole cost per candidate GPU slot), in GPUs (module
    doc); zeros without waiting pods."""
    gpus = masks.gpus
    share = np.zeros(len(gpus))
    whole = np.zeros(len(gpus))
    if not pods or not len(gpus):
        return share, whole
    idle = (state.milli_used == 0) & (state.mem_used == 0)
    nodes = state.gpu_node[gpus]
    free = np.bincount(state.gpu_node, weights=idle, minlength=len(state.node_names))[nodes]
    size = (state.node_stop - state.node_start)[nodes]
    host = host_of(state)
    cpu_cap = host.cpu_cap[nodes]
    mem_cap = host.mem_cap[nodes]
    model = state.gpu_model[gpus]
    takes_share = idle[gpus].astype(np.float64)  # a share on an idle GPU takes one
    w = demand.whole_gpus
    for p in pods:
        k = float(p.gpus)
        can = (size >= p.gpus) & (cpu_cap >= p.cpu) & (mem_cap >= p.mem)
        if p.models is not None:
            can &= np.array([state.models[m] in p.models for m in model], dtype=bool)
        f = np.minimum(free, k)

        def loss(taken: np.ndarray | float, f: np.ndarray = f, k: float = k) -> np.ndarray:
            f2 = np.minimum(np.maximum(free - taken, 0.0), k)
            return (f * f - f2 * f2) / k

        share += np.where(can, loss(takes_share + w), 0.0)
        if w:
            whole += np.where(can, loss(float(w)), 0.0) / w
    return share / len(pods), whole / len(pods)

