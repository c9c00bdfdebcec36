"""fgd (Fragmentation Gradient Descent, Weng et al., USENIX ATC '23; ``fgd_score.go``,
``pkg/utils/frag.go``): place the pod where the expected fragmentation grows least.

Target workload M: typical tasks m (cpu, per-GPU milli, num GPUs, allowed models) with
popularity p_m (``TypicalTasks``; the simulator derives it from the pod list, otherwise a
generic default). Fragmentation of node n for task m:

    F_n(m) = U_n                          if m asks no GPU, n's model is not allowed for m,
                                          fewer than m.num GPUs have left >= m.milli, or
                                          c_n < m.cpu
           = sum_{g: left_g < m.milli} left_g   otherwise
    F_n(M) = sum_m p_m F_n(m)

Score for the pod on n (n' = n with the pod placed): int(100 * sigmoid((F_n - F_n') / 1000)).
A share is tried on every GPU that fits; the node scores its best GPU (first index on ties)
and that GPU is the one chosen. Whole GPUs: the lowest-index free ones. The int truncation and
the name tie-break are kept (``score_step``) to reproduce the authors' numbers.

Typical tasks may also carry host memory (``TypicalTasks.mem``, sparse's learned mix does):
then a node with less memory left than m asks counts as unable to host m, like the CPU test.
FGD's own tasks carry none, so its measure is the paper's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from extender.demand import PodDemand
from extender.placement.fit import GpuMasks, candidate_gpus
from extender.placement.policies.common import (
    TIE,
    candidate_nodes,
    host_of,
    local_index,
    node_sums,
    pod_cpu,
    pod_mem,
    segment_sum,
)
from extender.placement.state import ClusterState

NAME = "fgd"


@dataclass(frozen=True, eq=False)
class TypicalTasks:
    cpu: np.ndarray  # milli CPU
    milli: np.ndarray  # per-GPU milli (0 = CPU-only)
    num: np.ndarray  # GPUs
    models: tuple[frozenset[str] | None, ...]
    p: np.ndarray  # popularity, sums to 1
    mem: np.ndarray | None = None  # host memory MiB; None = not tested (FGD's measure)

    @classmethod
    def of(cls, rows: list[tuple[int, int, int, frozenset[str] | None, float]],
           mem: list[int] | None = None) -> TypicalTasks:
        cpu, milli, num, models, p = zip(*rows, strict=True) if rows else ((),) * 5
        weights = np.asarray(p, dtype=np.float64)
        return cls(
            np.asarray(cpu, dtype=np.float64),
            np.asarray(milli, dtype=np.float64),
            np.asarray(num, dtype=np.float64),
            tuple(models),
            weights / weights.sum(),
            None if mem is None else np.asarray(mem, dtype=np.float64),
        )

    def take(self, columns: np.ndarray) -> TypicalTasks:
        """These tasks alone, in this order (popularities as they are, not summed to 1: for
        per-task values, which do not read them)."""
        return TypicalTasks(self.cpu[columns], self.milli[columns], self.num[columns],
                            tuple(self.models[j] for j in columns.tolist()), self.p[columns],
                            None if self.mem is None else self.mem[columns])

    def model_ok(self, state: ClusterState) -> np.ndarray:
        """(state models, tasks): may task m run on a GPU of that model."""
        out = np.ones((len(state.models), len(self.p)), dtype=bool)
        for j, allowed in enumerate(self.models):
            if allowed is not None:
                out[:, j] = [m in allowed for m in state.models]
        return out


def column_map(old: tuple, new: tuple) -> np.ndarray | None:
    """Each task column of ``new`` (``FragModel.columns``)'s position in ``old``, -1 for a task
    ``old`` lacks: a re-read mix ranks its shapes anew, learns new ones and drops some.
    Per-task values (``frag(..., per_task=True)``, ``FGD.deltas``) are made task by task,
    elementwise, so those of ``old`` with their columns taken in this order are, bit for bit,
    those of ``new``; the -1 columns are to be made, e.g. with a model of those tasks alone
    (``TypicalTasks.take``: values made task by task are the same in any company). None for
    another measure, FGD's measure with host memory tested in one only, or a task twice in
    ``old``. The fill measure skips a task's test of 0 MiB (``fill_frag``), so there tasks
    without a memory test are those of 0 MiB (a mix's first re-read learns the pods' memory
    where its prior had none)."""
    if old[0] != new[0]:
        return None  # another measure
    if (old[5] is None) != (new[5] is None) and not old[0]:
        return None  # FGD's measure: a test of 0 MiB fails where memory is overbooked
    tested = old[5] is not None or new[5] is not None

    def tasks(columns: tuple) -> list[tuple]:
        mem = columns[5]
        if tested and mem is None:
            mem = (0.0,) * len(columns[1])
        return list(zip(*columns[1:5], *(() if mem is None else (mem,)), strict=True))

    old_tasks, new_tasks = tasks(old), tasks(new)
    where = {task: j for j, task in enumerate(old_tasks)}
    if len(where) != len(old_tasks):
        return None  # a task twice (ambiguous)
    return np.asarray([where.get(task, -1) for task in new_tasks], dtype=np.int64)


def default_tasks() -> TypicalTasks:
    """A generic mix when no workload is known: CPU-only, quarter/half/three-quarter shares,
    one and two whole GPUs."""
    rows = [(4000, 0, 0, None, 0.1), (4000, 250, 1, None, 0.15), (4000, 500, 1, None, 0.2),
            (8000, 750, 1, None, 0.15), (8000, 1000, 1, None, 0.3), (16000, 1000, 2, None, 0.1)]
    return TypicalTasks.of(rows)


class FragModel:
    """Vectorised F_n(m) with the per-node aggregates it needs, for many nodes at once.

    ``fill=True`` measures what repeated pods of each typical shape could not take instead
    (sparse's measure; ``fill_frag``): per node two aggregates per task, ``a`` and ``b``, summed
    over its GPUs (``gpu_terms``); FGD's are (GPUs with left >= m.milli, left on the others),
    the fill measure's (slots of m.milli, unused)."""

    def __init__(self, tasks: TypicalTasks, fill: bool = False) -> None:
        self.tasks = tasks
        self.fill = fill
        milli = tasks.milli
        self._slot_milli = np.where(milli > 0, milli, np.inf)
        self._cpu = np.where(tasks.cpu > 0, tasks.cpu, np.nan)
        self._mem = None if tasks.mem is None else np.where(tasks.mem > 0, tasks.mem, np.nan)
        a0, b0 = self.gpu_terms(np.zeros(1))
        a1, b1 = self.gpu_terms(np.full(1, 1000.0))
        self.full_delta = (a0[0] - a1[0], b0[0] - b1[0])  # one free GPU booked whole
        self._model_ok: tuple[int, np.ndarray] | None = None
        self._memo: tuple | None = None  # (key, left, count_ge, lt, u) for a whole state
        self._carry: tuple | None = None  # a previous model's memo and column map
        # What each task's column of F_n(m) depends on (all but the popularity p): models
        # with equal columns give equal per-task values (``frag(..., per_task=True)``).
        self.columns: tuple = (fill, tuple(tasks.cpu.tolist()), tuple(milli.tolist()),
                               tuple(tasks.num.tolist()), tasks.models,
                               None if tasks.mem is None else tuple(tasks.mem.tolist()))

    def carry_from(self, previous: FragModel) -> None:
        """Take over what a model with the same columns already knows (its per-node
        aggregates, and its ``columns`` object, which caches compare by identity); only the
        popularities differ, and nothing memoised depends on them. With other columns, the
        aggregates of the tasks both have are taken when first needed (``_carried``)."""
        if previous.columns == self.columns:
            self.columns = previous.columns
            self._memo, self._model_ok = previous._memo, previous._model_ok
        elif previous._memo is not None:
            order = column_map(previous.columns, self.columns)
            if order is not None and (order >= 0).any():
                self._carry = (previous._memo, order)

    def _carried(self, key: tuple, state: ClusterState) -> tuple | None:
        """A memo for ``key`` made of a previous model's aggregates (``carry_from``): the
        columns of the tasks it had, copied, and the others summed over every GPU; a node
        booked since the previous memo was made keeps that memo's stamp, so it is refreshed
        whole, as in any memo. Sums of whole numbers: the same as a full pass."""
        carry, self._carry = self._carry, None
        if carry is None or carry[0][0] != key:
            return None
        (_, stamps, count_ge, lt, u), order = carry
        kept = order >= 0
        n = len(state.node_names)
        ge = np.empty((n, len(order)))
        less = np.empty((n, len(order)))
        ge[:, kept] = count_ge[:, order[kept]]
        less[:, kept] = lt[:, order[kept]]
        missing = np.flatnonzero(~kept)
        if len(missing):  # the new tasks' columns from the GPUs as they are now
            sub = FragModel(self.tasks.take(missing), self.fill)
            ge[:, missing], less[:, missing] = sub.aggregates(
                state.milli_free.astype(np.float64), state.gpu_node, n)
        return (key, stamps.copy(), ge, less, u.copy())

    def state_aggregates(self, state: ClusterState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """count_ge, lt (nodes, M) and U (nodes,) for every node of the state. Memoised: only
        nodes whose stamp changed since the previous call (same inventory) are recomputed
        (``ClusterState.node_stamp``: equal stamps, equal bookings)."""
        key = (id(state.gpu_uuid), id(state.node_start), len(state.gpu_uuid))
        memo = self._memo
        if (memo is None or memo[0] != key) and self._carry is not None:
            memo = self._memo = self._carried(key, state)
        if memo is None or memo[0] != key:
            left = state.milli_free
            n = len(state.node_names)
            count_ge, lt = self.aggregates(left.astype(np.float64), state.gpu_node, n)
            u = segment_sum(left, state.gpu_node, n)
            self._memo = (key, state.node_stamp.copy(), count_ge, lt, u)
            return count_ge, lt, u
        _, stamps, count_ge, lt, u = memo
        nodes = np.flatnonzero(state.node_stamp != stamps)
        if len(nodes):
            gpus, owner, alike = candidate_gpus(state, nodes)
            sub = (state.milli_cap[gpus] - state.milli_used[gpus]).astype(np.float64)
            a, b = self.gpu_terms(sub)
            # Sums of whole numbers (slots, milli): exact in any order, as the full pass's.
            count_ge[nodes] = node_sums(a, owner, len(nodes), alike)
            lt[nodes] = node_sums(b, owner, len(nodes), alike)
            u[nodes] = node_sums(sub, owner, len(nodes), alike)
            stamps[nodes] = state.node_stamp[nodes]
        return count_ge, lt, u

    def model_ok(self, state: ClusterState) -> np.ndarray:
        key = id(state.models)
        if self._model_ok is None or self._model_ok[0] != key:
            self._model_ok = (key, self.tasks.model_ok(state))
        return self._model_ok[1]

    def mem_left(self, host, nodes: np.ndarray) -> np.ndarray | None:
        """Host memory left on the nodes, where the tasks test it (None otherwise)."""
        return None if self.tasks.mem is None else host.mem_left[nodes].astype(np.float64)

    def gpu_terms(self, left: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per GPU and task (len(left), M): FGD's (left >= m.milli, left where not), or the fill
        measure's (slots of m.milli the GPU has left, zeros)."""
        if self.fill:
            slots = np.floor(left[:, None] / self._slot_milli[None, :])
            return slots, np.zeros_like(slots)
        ge = left[:, None] >= self.tasks.milli[None, :]
        return ge.astype(np.float64), np.where(ge, 0.0, left[:, None])

    def aggregates(self, left: np.ndarray, owner: np.ndarray, n: int):
        """count_ge (n, M): GPUs with left >= m.milli; lt (n, M): their complement's sum
        (fill measure: slots of m.milli, zeros)."""
        a, b = self.gpu_terms(left)
        return segment_sum(a, owner, n), segment_sum(b, owner, n)

    def frag(self, count_ge, lt, u_total, cpu_left, node_model_ok, mem_left=None,
             per_task: bool = False) -> np.ndarray:
        """F_n(M) for rows of aggregates (any leading shape); ``per_task``: F_n(m) for each
        task m (a trailing axis), before the popularities weigh them. Tasks that carry host
        memory (``tasks.mem``) also need ``mem_left`` of it where it is given."""
        if self.fill:
            return self.fill_frag(count_ge, u_total, cpu_left, node_model_ok, mem_left,
                                  per_task)
        t = self.tasks
        ok = (
            (t.milli > 0)
            & node_model_ok
            & (count_ge >= t.num)
            & (cpu_left[..., None] >= t.cpu)
        )
        if t.mem is not None and mem_left is not None:
            ok &= mem_left[..., None] >= t.mem
        per = np.where(ok, lt, u_total[..., None])
        return per if per_task else per @ t.p

    def fill_frag(self, slots, u_total, cpu_left, node_model_ok, mem_left=None,
                  per_task: bool = False) -> np.ndarray:
        """sum_m p_m (U_n - m.num x m.milli x copies_n(m)): the free GPU capacity that pods
        of shape m, arriving again and again, could not take; copies_n(m) is how many fit at
        once, bounded by the GPU slots of m.milli (m.num per pod), the node's CPU and its
        host memory. FGD's measure asks only whether one more fits; this one also counts the
        GPUs whose CPU (or memory) the shape would run out of first, and the remainders that
        repeated shares leave, so a pod's growth of it charges exactly the capacity it
        strands against the mix it is measured with. Shapes of a model the node lacks count
        all of U_n."""
        t = self.tasks
        copies = np.floor(slots / np.maximum(t.num, 1))
        # x / NaN is a quiet NaN (no floating-point error: x >= 0 and finite, the divisors
        # positive or NaN), so no errstate is needed, which costs more than the division.
        cpu_copies = np.floor(np.maximum(cpu_left, 0)[..., None] / self._cpu)
        copies = np.fmin(copies, cpu_copies)  # NaN (a shape asking no CPU): GPUs decide
        if self._mem is not None and mem_left is not None:
            copies = np.fmin(copies, np.floor(np.maximum(mem_left, 0)[..., None] / self._mem))
        ok = (t.milli > 0) & node_model_ok
        used = np.where(ok, np.maximum(copies, 0) * t.num * t.milli, 0.0)
        per = u_total[..., None] - used
        return per if per_task else per @ t.p

    def node_frag(self, state: ClusterState, nodes: np.ndarray | None = None) -> np.ndarray:
        """F_n(M) of the given state nodes (all by default), from the state as it is."""
        if nodes is None:
            nodes = np.arange(len(state.node_names))
        gpus = np.concatenate([state.gpus_of(i) for i in nodes]) if len(nodes) else np.zeros(
            0, dtype=np.int64)
        counts = state.node_stop[nodes] - state.node_start[nodes]
        owner = np.repeat(np.arange(len(nodes)), counts)
        left = state.milli_free[gpus].astype(np.float64)
        count_ge, lt = self.aggregates(left, owner, len(nodes))
        u = segment_sum(left, owner, len(nodes))
        mok = self.model_ok(state)[node_model(state, nodes)]
        host = host_of(state)
        return self.frag(count_ge, lt, u, host.cpu_left[nodes].astype(np.float64), mok,
                         self.mem_left(host, nodes))


# At most this many share GPUs are priced row by row in ``FGD.deltas`` (per task), without
# first folding the GPUs of one node with the same milli left into one row.
FEW_GPUS = 64


def node_model(state: ClusterState, nodes: np.ndarray) -> np.ndarray:
    """Model id of each node's first GPU (the trace's nodes are homogeneous)."""
    return state.gpu_model[np.minimum(state.node_start[nodes], len(state.gpu_model) - 1)]


def fgd_score(delta: np.ndarray) -> np.ndarray:
    """int(100 * sigmoid(delta / 1000)), delta = F_n - F_n' (positive = less fragmentation)."""
    return np.trunc(100.0 / (1.0 + np.exp(-delta / 1000.0)))


class FGD:
    name = NAME
    score_step = 1.0

    def __init__(self, tasks: TypicalTasks | None = None, fill: bool = False) -> None:
        self.fill = fill  # measure with ``FragModel.fill_frag`` (sparse's), not FGD's
        self.set_workload(tasks or default_tasks())

    def set_workload(self, tasks: TypicalTasks) -> None:
        self.model = self.model_for(tasks)

    def model_for(self, tasks: TypicalTasks) -> FragModel:
        """A model of these tasks with what the one in use knows already (``carry_from``)."""
        model = FragModel(tasks, self.fill)
        previous = getattr(self, "model", None)
        if previous is not None:
            model.carry_from(previous)
        return model

    def cache_epoch(self, state: ClusterState, demand: PodDemand) -> tuple[object, ...]:
        """What the costs read besides the nodes' own GPUs and the inventory: the typical
        tasks (a new model with every ``set_workload``), compared by identity by a cost cache
        (``extender.verbs.costcache``)."""
        return (self.model,)

    def deltas(
        self, state: ClusterState, demand: PodDemand, masks: GpuMasks, per_task: bool = False,
        share: np.ndarray | None = None, model: FragModel | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(share_delta per candidate GPU, whole_delta per candidate node): F_n - F_n'.
        share_delta is computed where ``share`` (by default ``masks.share``) holds (0
        elsewhere). ``per_task``: for each typical task (a trailing axis), before the
        popularities weigh them. ``model``: another model than the policy's (per-task values
        for some of its tasks: ``TypicalTasks.take``)."""
        fm = self.model if model is None else model
        # Alike candidates (each with its GPUs): positions are the masks' own nodes.
        nodes = (masks.nodes if masks.alike and masks.nodes is not None
                 else candidate_nodes(state, masks))
        all_ge, all_lt, all_u = fm.state_aggregates(state)
        count_ge, lt, u = all_ge[nodes], all_lt[nodes], all_u[nodes]
        host = host_of(state)
        cpu = host.cpu_left[nodes].astype(np.float64)
        mem = fm.mem_left(host, nodes)
        mem_after = None if mem is None else mem - pod_mem(demand)
        c_p = pod_cpu(demand)
        mok = fm.model_ok(state)[node_model(state, nodes)]
        before = fm.frag(count_ge, lt, u, cpu, mok, mem, per_task)
        tail = (len(fm.tasks.p),) if per_task else ()
        w = demand.whole_gpus
        if w or not demand.has_share:
            # Whole GPUs (and the CPU): w fully free GPUs drop to 0 left.
            full_a, full_b = fm.full_delta
            whole_delta = before - fm.frag(count_ge + w * full_a, lt + w * full_b,
                                           u - 1000.0 * w, cpu - c_p, mok, mem_after, per_task)
        else:  # a share alone: whole-GPU costs are never read
            whole_delta = np.zeros((len(nodes), *tail))
        share_delta = np.zeros((len(masks.gpus), *tail))
        sel = np.flatnonzero(masks.share if share is None else share)
        if demand.has_share and len(sel):
            share_gpus = masks.gpus[sel]  # milli_free of these only (not of every GPU)
            left_all = state.milli_cap[share_gpus] - state.milli_used[share_gpus]
            owner = masks.owner[sel]
            if per_task and len(sel) <= FEW_GPUS:
                # Few GPUs (a node's refill after a bind): each its own row. Row by row the
                # same arithmetic (no weighted sum across tasks here), one sort fewer.
                o, left, inverse = owner, left_all.astype(np.float64), None
            else:
                # GPUs of one node with the same milli left give the same node after it.
                keys, first, inverse = np.unique(
                    owner * 2048 + left_all, return_index=True, return_inverse=True)
                o = owner[first]
                left = left_all[first].astype(np.float64)
            m_p = float(demand.share_milli)
            new = left - m_p
            a_old, b_old = fm.gpu_terms(left)
            a_new, b_new = fm.gpu_terms(new)
            full_a, full_b = fm.full_delta
            cge = count_ge[o] + w * full_a - a_old + a_new
            # The fill measure reads no second aggregate (``frag``): not summed for nothing.
            lt2 = None if fm.fill else lt[o] + w * full_b - b_old + b_new
            after = fm.frag(cge, lt2, u[o] - 1000.0 * w - m_p, cpu[o] - c_p, mok[o],
                            None if mem_after is None else mem_after[o], per_task)
            delta = before[o] - after
            share_delta[sel] = delta if inverse is None else delta[inverse.reshape(-1)]
        return share_delta, whole_delta

    def costs(
        self, state: ClusterState, demand: PodDemand, masks: GpuMasks
    ) -> tuple[np.ndarray, np.ndarray]:
        share_delta, whole_delta = self.deltas(state, demand, masks)
        idx = local_index(state, masks.gpus)
        share = 100.0 - fgd_score(share_delta) + TIE * idx  # costs stay >= 0
        whole_score = (100.0 - fgd_score(whole_delta))[masks.owner]
        whole = whole_score / max(demand.whole_gpus, 1) + TIE * idx
        return share, whole

    def host_deltas(self, state: ClusterState, demand: PodDemand, nodes: np.ndarray
                    ) -> np.ndarray:
        """F_n - F_n' per node for a pod without GPUs (only its CPU changes n)."""
        fm = self.model
        all_ge, all_lt, all_u = fm.state_aggregates(state)
        count_ge, lt, u = all_ge[nodes], all_lt[nodes], all_u[nodes]
        host = host_of(state)
        cpu = host.cpu_left[nodes].astype(np.float64)
        mem = fm.mem_left(host, nodes)
        mok = fm.model_ok(state)[node_model(state, nodes)]
        before = fm.frag(count_ge, lt, u, cpu, mok, mem)
        return before - fm.frag(count_ge, lt, u, cpu - pod_cpu(demand), mok,
                                None if mem is None else mem - pod_mem(demand))

    def host_costs(self, state: ClusterState, demand: PodDemand, nodes: np.ndarray) -> np.ndarray:
        return -fgd_score(self.host_deltas(state, demand, nodes))
