"""SimCluster: one simulated cluster driven through the extender's placement core.

Per pod: kube-scheduler's in-tree ``NodeResourcesFit`` (CPU, host memory, pod count) is modelled
here as a pre-filter producing the candidate list, exactly what the extender receives in a real
cluster; then the core decides: ``fit`` -> ``node_costs`` -> best node (ties to the smallest
name) -> ``assign`` -> ``reservation_for``; the booking passes the ledger's capacity rule
(``rules.check_fits`` over a ``rules.Usage``) before ``state.apply``. No GPU accounting lives
here. Pods without GPUs never reach the extender; a policy may score them through its optional
``host_costs`` (the kube-scheduler score plugin it models), otherwise the first node wins.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bench.sim.trace import TraceDemand, inventory, make_demand
from extender.interference import InterferenceMatrix
from extender.interference.matrix import default_matrix
from extender.ledger import rules
from extender.ledger.rules import Reservation
from extender.placement import ClusterState, assign, fit, node_costs, reservation_for
from extender.placement.holds import HoldBook
from extender.placement.locality import EmbeddingSpec, LocalityIndex, combine, idle_nodes
from extender.placement.policies.base import Policy
from extender.placement.policies.common import HostView, pod_tag

MAX_PODS = 1001  # the FGD simulator's per-node pod cap


@dataclass(frozen=True, slots=True)
class Placed:
    demand: TraceDemand
    node: int
    reservation: Reservation | None  # None for pods without GPUs


class SimCluster:
    def __init__(
        self,
        nodes: pd.DataFrame,
        names: list[str],
        policy: Policy,
        matrix: InterferenceMatrix | None = None,
    ) -> None:
        self.policy = policy
        self.state = ClusterState.build(inventory(nodes, names), matrix or default_matrix())
        order = np.array([self.state.node_index[n] for n in names])  # trace row -> state index
        cpu = np.zeros(len(names), dtype=np.int64)
        mem = np.zeros(len(names), dtype=np.int64)
        cpu[order] = nodes["cpu_milli"].to_numpy()
        mem[order] = nodes["memory_mib"].to_numpy()
        self.host = HostView(cpu, cpu.copy(), mem, mem.copy(), np.zeros(len(names), np.int64))
        self.state.host = self.host  # what kube-scheduler knows; read by some baselines
        self.models = set(nodes["model"]) - {""}
        self.caps = self.state.capacities(self.state.gpu_uuid)
        self.names = np.array(self.state.node_names, dtype=object)
        self.usage = rules.Usage()
        self.placed: dict[str, Placed] = {}
        self.exclusive = bool(getattr(policy, "exclusive", False))
        self.step = getattr(policy, "score_step", None)
        self.host_costs = getattr(policy, "host_costs", None)
        self.allocated_milli = 0  # booked milli-GPU (sum of state.milli_used)
        self.total_milli = int(self.state.milli_cap.sum())
        self.locality: LocalityIndex | None = None  # the extender's locality term, when set
        # An experiment's own pick for embedding readers (the locality replay's oracle):
        # (candidate names, their costs, the declaration) -> costs; None: the policy's.
        self.reader_costs: (Callable[[list[str], np.ndarray, EmbeddingSpec], np.ndarray]
                            | None) = None
        self.holds: HoldBook | None = None  # the hold for a waiting gang (placement/holds.py)
        # GPU pods placed, and those of them that had more than one node to choose from
        self.placements = 0
        self.with_choice = 0

    def demand(self, uid: str, cpu: int, mem: int, num_gpu: int, gpu_milli: int, spec: str,
               job_class: str = "unknown", predicted_s: float | None = None) -> TraceDemand:
        return make_demand(uid, cpu, mem, num_gpu, gpu_milli, spec, self.models,
                           exclusive=self.exclusive, job_class=job_class,
                           predicted_s=predicted_s)

    def candidates(self, d: TraceDemand) -> np.ndarray:
        h = self.host
        ok = (h.cpu_left >= d.cpu_milli) & (h.mem_left >= d.host_mem_mib) & (h.pods < MAX_PODS)
        return np.flatnonzero(ok)

    def pick(self, costs: np.ndarray) -> int | None:
        """The position ``schedule`` places on from these costs (None: nowhere)."""
        if self.step:
            costs = np.round(costs / self.step)
        if not len(costs) or not np.isfinite(costs).any():
            return None
        return int(np.argmin(costs))  # first minimum = smallest node name

    def _choose(self, d: TraceDemand, now: float, embedding: EmbeddingSpec | None
                ) -> tuple[list[str], np.ndarray, int] | None:
        """The GPU pod's candidate names, their costs and the chosen one's position (None:
        nowhere fits); nothing changes."""
        cand = self.candidates(d)
        if not len(cand):
            return None
        st = self.state
        result = fit(st, d, self.names[cand].tolist(), explain=False)
        costs = node_costs(st, d, result, self.policy)
        if self.holds is not None and self.holds.hold is not None:
            idx = np.array([st.node_index[n] for n in result.names], dtype=np.int64)
            costs = np.where(self.holds.refused(st, d, idx, now), np.inf, costs)
        if self.locality is not None:
            idle = idle_nodes(st, result.names) if embedding is None else None
            costs = combine(costs, self.locality.term(embedding, d, result.names, idle))
        if self.reader_costs is not None and embedding is not None:
            costs = self.reader_costs(result.names, costs, embedding)
        j = self.pick(costs)
        return None if j is None else (result.names, costs, j)

    def best_node(self, d: TraceDemand, now: float = 0.0,
                  embedding: EmbeddingSpec | None = None) -> str | None:
        """The node ``schedule`` would place the GPU pod on now, without placing it."""
        chosen = self._choose(d, now, embedding) if d.slot_count else None
        return None if chosen is None else chosen[0][chosen[2]]

    def schedule(self, d: TraceDemand, now: float = 0.0,
                 embedding: EmbeddingSpec | None = None) -> Placed | None:
        """One scheduling attempt; returns the placement or None (nothing changes then).
        With ``locality`` set, the node costs get the extender's locality term for the pod's
        ``embedding`` declaration, exactly as prioritize adds it."""
        if d.slot_count == 0:
            cand = self.candidates(d)
            if not len(cand):
                return None
            costs = (self.host_costs(self.state, d, cand) if self.host_costs is not None
                     else np.zeros(len(cand)))
            j = self.pick(costs)
            if j is None:
                return None
            return self._commit(d, int(cand[j]), None)
        chosen = self._choose(d, now, embedding)
        if chosen is None:
            return None
        names, costs, j = chosen
        st = self.state
        self.placements += 1
        self.with_choice += int(np.isfinite(costs).sum() > 1)
        node = names[j]
        a = assign(st, d, node, self.policy)
        if a is None:  # cannot happen when node_costs is finite; kept as a guard
            return None
        r = reservation_for(d, a, st, now, None)
        rules.check_fits(self.usage, r, self.caps)  # the ledger's rule, raises on overbooking
        return self._commit(d, st.node_index[node], r)

    def _commit(self, d: TraceDemand, node: int, r: Reservation | None) -> Placed:
        h = self.host
        h.cpu_left[node] -= d.cpu_milli
        h.mem_left[node] -= d.host_mem_mib
        h.pods[node] += 1
        tag = pod_tag(d)
        if tag >= 0:
            h.tag_count[node, tag] += 1
        if r is not None:
            self.usage.add(r)
            self.state.apply(r)
            self.allocated_milli += sum(a.milli for a in r.allocations)
        p = Placed(d, node, r)
        self.placed[d.uid] = p
        return p

    def release(self, uid: str) -> Placed | None:
        p = self.placed.pop(uid, None)
        if p is None:
            return None
        h, d = self.host, p.demand
        h.cpu_left[p.node] += d.cpu_milli
        h.mem_left[p.node] += d.host_mem_mib
        h.pods[p.node] -= 1
        tag = pod_tag(d)
        if tag >= 0:
            h.tag_count[p.node, tag] -= 1
        if p.reservation is not None:
            self.usage.add(p.reservation, -1)
            self.state.unapply(d.uid)
            self.allocated_milli -= sum(a.milli for a in p.reservation.allocations)
        return p
