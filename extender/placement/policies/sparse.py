"""sparse: least interference first, then least fragmentation.

For a share of class a using a fraction f_a of a GPU (its milli / 1000) on GPU g with resident
pods of classes b1..bk using f_b1..f_bk:

    share cost(g) = interference_weight * loss(a, f_a; residents of g)  (extender/interference)
                  + open_gpu_cost * f_a      if g is empty (sharing nothing costs that GPU share)
                  + fit_weight * free fraction left on g after the share   (best fit)
                  + frag_weight * dF(g) / 1000
                  + order term (below)
    whole cost(g) = fit_weight * fraction of g's node still free     (keep empty nodes whole)
                  + frag_weight * dF(node) / 1000 / W + order term / W

``loss = f_a (1 - prod norm(a|b)^f_b) + sum f_b (1 - norm(b|a)^f_a)`` is the throughput the
jobs lose, in GPUs' worth of work (a job using f of a GPU weighs as if present f of the time).
For whole jobs a share joins a GPU when the pair together does more than one GPU alone
(loss < 1) and opens an empty GPU otherwise; small shares interfere little and pack. A
resident of unknown class counts as the mean of the matrix.

``dF`` is the growth of the node's expected fragmentation in milli-GPU, so ``dF / 1000`` is in
GPUs, the unit of the interference term: GPUs that typical pods can no longer use. With
``fill`` (the default) the measure is ``FragModel.fill_frag``: for each typical shape, the
node's free GPU capacity that pods of that shape, arriving again and again, could not take,
because the GPU remainders are smaller than the shape, because the node has too few GPUs left
for it, or because the node's CPU or host memory would run out first. FGD's own measure
(Weng et al. ATC '23, see ``fgd.py``; ``fill=False``) asks only whether one more pod of the
shape fits, so it charges a pod nothing for the CPU it takes until the node's CPU falls below a
whole task's, and nothing for the remainder a share leaves that only part of a GPU's worth of
the shape can use. The fill measure's weights are the learned mix's popularities, nothing else:
the CPU a pod takes costs the GPU capacity it strands for the shapes that need that CPU.
It is exact (no score quantisation); a constant (the
largest node's GPU count) is added per slot so costs stay non-negative, as the core's
infeasibility test needs, without changing any comparison. The typical pods are the mix the
policy keeps itself (``adaptive``, ``sparse_mix.DemandMix``): a decayed histogram of the pods
it is asked to score, fed by this very call in the extender and the simulator, which starts
from a generic mix or from the cluster's own where ``set_workload`` gives it (the trace
simulator does). With ``adaptive=False`` the starting mix stays fixed, as in FGD. The mix's
shapes carry the pods' host memory where they state it (``mem_step``, 0 = leave it out), so a
node whose memory is gone counts as fragmented for the shapes that need it (sparse_mix.py).
``cpu_weight`` (off by default, kept for the experiment in bench/README.md; the fill measure
does the same from the mix, without a weight) charges a pod's CPU for the GPUs it strands in
expectation: the node's GPU capacity left free after the pod times
the fraction of the node's remaining CPU it takes. FGD's CPU test only counts a node once its
CPU falls below a whole task's; on the trace the fillable gaps that remain at the end sit on
nodes whose CPU is gone. Like the memory test it needs a host view: the simulator's, or the
extender's (``extender.hostbook``: allocatable minus the requests of the pods bound there).
``frag_weight = 0`` gives the policy without the fragmentation term. ``order_weight`` adds
``order_weight * node position / max(node count, ORDER_SPAN)`` (nodes sorted by name): a fixed
node order that fills nodes one after another unless another node is better by more than that,
which keeps the last nodes whole for large pods and multi-GPU jobs. On the FGD protocol
(bench/README.md) it is worth more than any other term: greedy fragmentation alone strands
more capacity than FGD's quantised score with its name tie-break, which is a node order too.
``ORDER_SPAN`` keeps adjacent nodes of a small cluster within ``order_weight / ORDER_SPAN``
(0.005 GPUs) of each other, so there the order only breaks near-ties and never outweighs an
interference difference.

``drain_weight`` (``waiting.py``): while pods of several whole GPUs wait (the core was asked
to place them more than once and they hold no reservation), a placement that takes free GPUs
from a node that could host such a pod costs what it takes the node away from hosting it,
convex in the GPUs the node already has free; so, where a pod has a choice, it goes to the
nodes farthest from hosting the waiting pod, and the nearest ones drain. With nothing waiting
(every pod of the FGD protocol is asked about once) it is zero.

``remainder_weight`` (``remainder.py``) prices a share by what its remainder is worth to the
share sizes that come: the GPU's milli that a stream of pods drawn from the learned mix would
leave idle after the share, minus what it would leave without it. The fill measure looks at
one shape at a time (copies of 470 in a 530 remainder); this term lets the mix fill the
remainder together (a 320 then a 160), which is how a GPU's last slivers are actually used, so
a share goes where the coming sizes close the gap rather than where the gap is merely
smallest. It acts on shares only; whole GPUs are priced by the fragmentation term.

``price_weight`` (``share_price.py``) prices the same move by the mix's best packing: the dual
prices of the linear program that packs the learned mix's share sizes into the fewest GPUs say
what a share of each size is worth, and a share placed on a GPU with ``L`` milli free costs
the worth of the sizes that ``L`` could still take less what ``L - s`` can (in GPUs). Filling
by popularity assumes every gap will be offered its share of the small sizes; when the mix has
more gaps than small shares to close them (a share-heavy mix: every 160 goes beside an 810),
the prices make such gaps worth nothing, so a 320 opens a GPU (or joins a 650) rather than
leaving 210 beside a 470 that was waiting for its partner. Where both places are part of a
best packing the prices tie and the other terms decide. A node's gaps are worth only the part
of the mix's shares (by popularity) that may use its GPU model and, with a host view, that its
CPU and host memory can still take,
before the pod and after it: a share that would leave its node without CPU for the shares that
fill its GPU pays for the gap it strands, and a gap no share of the mix can reach costs nothing
to use. The value table (a small column-generation LP, 10-70 ms) is solved when the prior mix
is given (construction, ``set_workload``) and then once per re-read of the learned mix,
warm-started from the last mix's packings. With ``price_solve="inline"`` (the default; the
simulator) the first share pod after the re-read solves it. With ``"deferred"`` (the extender)
the policy never solves in ``costs``: it keeps pricing with the last table, ``price_job`` says
which solve the current mix needs, and ``install_prices`` takes the table once an adapter
solved it elsewhere (``extender.pricesolver``); a table for a mix re-read since is dropped. The
term reads the table and the mix it was solved from (which shares reach a node's gaps): its
cache epoch is the table, so installing one reprices exactly the price term. A cost cache keeps
it per share size, CPU and memory, recomputed on the nodes whose bookings changed and on all
when the table changes.

With ``renew="prepared"`` (the extender) a re-read mix's model and its price table do not
take effect at once: they wait in ``pending`` until the caller ``adopt``s them together, which
the extender does once its caches hold every kept shape's costs with them
(``extender.verbs.renewal``), so no request pays for pricing the whole inventory again;
``cost_terms(..., inputs)`` gives the terms as they will be. Should the caller never adopt,
the next re-read adopts what waits, so the mix in use is at most one re-read behind. The
simulator renews inline.

Where the adapter knows the pods' solo profiles (``state.profiles``) the interference term is
the learned pair model's (``pairwise.py``; residents without a profile are paired through the
matrix), which also steers pods of unknown class.

A pod whose job class is unknown (no annotation, no prediction) is placed on packing merit
alone: the matrix would give it the mean slowdown next to every co-runner, which says nothing
about *which* GPU is better and only biases against sharing, the thing the pod asked for.
Known-class pods still count unknown residents at the mean.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import numpy as np

from extender.demand import PodDemand
from extender.placement.fit import GpuMasks
from extender.placement.policies.base import gpu_free_after, node_free_fraction
from extender.placement.policies.common import pod_cpu, pod_mem
from extender.placement.policies.fgd import (
    FGD,
    FragModel,
    TypicalTasks,
    column_map,
    default_tasks,
    node_model,
)
from extender.placement.policies.pairwise import pair_loss
from extender.placement.policies.remainder import remainder_cost, waste_table
from extender.placement.policies.share_price import PriceTable, host_share
from extender.placement.policies.sparse_inputs import (
    DEFERRED,
    INLINE,
    PREPARED,
    PRICE_SOLVES,
    RENEWALS,
    ChangingInputs,
    PolicyInputs,
)
from extender.placement.policies.sparse_mix import MEM_STEP, WEIGHTS, DemandMix
from extender.placement.policies.terms import CostTerm, TermValues, add_terms
from extender.placement.policies.waiting import WaitingPods, drain_costs
from extender.placement.state import ClusterState, gpu_fraction

__all__ = ["DEFERRED", "INLINE", "PREPARED", "PolicyInputs", "Sparse"]

NAME = "sparse"
ORDER_SPAN = 1000  # node positions the order weight is spread over, at least


def _carry_columns(old: tuple[object, ...], new: tuple[object, ...]) -> np.ndarray | None:
    """The fragmentation term's raw columns carried over a re-read mix whose tasks changed
    order, came or went (its epoch is the model's columns): -1 where a task is new."""
    return column_map(old[0], new[0])  # type: ignore[arg-type]


def _has_whole(demand: PodDemand) -> bool:
    """Whether the pod takes whole GPUs: a share alone has no whole slot, and the core never
    reads its whole-GPU costs (the terms leave them out, ``add_terms`` gives zeros)."""
    return bool(demand.whole_gpus) or not demand.has_share


def _free_milli(state: ClusterState, masks: GpuMasks, top: int) -> np.ndarray:
    """Free milli of each GPU of ``masks.gpus``, within 0..``top`` (an index into a per-milli
    table)."""
    gpus = masks.gpus
    left = (state.milli_cap - state.milli_used if masks.every  # every GPU, in order
            else state.milli_cap[gpus] - state.milli_used[gpus])
    # np.clip's Python wrapper costs more than the two ufuncs on a few GPUs
    return np.minimum(np.maximum(left, 0, out=left), top, out=left)


@dataclass(frozen=True)
class Sparse(ChangingInputs):
    interference_weight: float = 1.0
    open_gpu_cost: float = 1.0
    fit_weight: float = 0.0
    frag_weight: float = 1.0
    order_weight: float = 5.0
    adaptive: bool = True
    mix_weigh: str = "pods"
    mem_step: int = MEM_STEP
    cpu_weight: float = 0.0
    fill: bool = True
    drain_weight: float = 1.0
    remainder_weight: float = 1.0
    price_weight: float = 1.0
    price_solve: str = INLINE  # DEFERRED: re-solves are left to the caller (price_job)
    renew: str = INLINE  # PREPARED: new inputs wait in ``pending`` until the caller adopts them
    name: str = NAME
    _frag: FGD = field(default_factory=FGD, repr=False, compare=False)
    _mix: DemandMix = field(default_factory=DemandMix, repr=False, compare=False)
    _order: dict = field(default_factory=dict, repr=False, compare=False)  # per GPU, memo
    _waiting: WaitingPods = field(default_factory=WaitingPods, repr=False, compare=False)
    _waste: dict = field(default_factory=dict, repr=False, compare=False)  # per mix, memo
    _kept: dict = field(default_factory=dict, repr=False, compare=False)  # ``_survival``'s
    # the price term's value table in use ("table") and, deferred, the job of the current
    # mix ("job")
    _value: dict = field(default_factory=dict, repr=False, compare=False)
    # PREPARED: the inputs waiting to be adopted ("model", "table" and both as "inputs")
    _next: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.mix_weigh not in WEIGHTS:
            raise ValueError(f"mix_weigh must be one of {', '.join(WEIGHTS)}")
        if self.price_solve not in PRICE_SOLVES:
            raise ValueError(f"price_solve must be one of {', '.join(PRICE_SOLVES)}")
        if self.renew not in RENEWALS:
            raise ValueError(f"renew must be one of {', '.join(RENEWALS)}")
        self._mix.weigh = self.mix_weigh
        self._mix.mem_step = self.mem_step
        self._frag.fill = self.fill
        self.set_workload(default_tasks())

    def set_workload(self, tasks: TypicalTasks) -> None:
        """The prior pod mix (popularity by pod count); with ``adaptive`` it is the start of
        the mix the policy keeps from the pods it places (sparse_mix.py)."""
        if self.adaptive:
            self._mix.seed(tasks)
            tasks = self._mix.tasks()
        self._next.clear()
        self._frag.set_workload(tasks)
        if self.price_weight:  # the prior's table now (either mode): not in a request
            self._solve_prices()

    def note(self, demand: PodDemand) -> None:
        """Count the pod in the learned mix (once per pod in a row) and re-read the mix when
        it is due. ``costs`` does this first; a cost cache that answers without asking the
        policy calls it itself, so the mix sees every pod either way."""
        if self.adaptive and self._mix.observe(demand):
            if self.renew == INLINE:
                self._frag.set_workload(self._mix.tasks())
            else:
                # Still waiting from the last re-read (nobody prepares them): adopted now,
                # so the model in use is at most one re-read behind.
                waiting = self._next.get("inputs")
                if waiting is not None:
                    self.adopt(waiting)
                self._stage("model", self._frag.model_for(self._mix.tasks()))
        if self.drain_weight:
            self._waiting.observe(demand)

    def unplaced(self, demand: PodDemand) -> None:
        """The core found no room for the pod: it waits (``waiting.py``)."""
        if self.drain_weight:
            self._waiting.observe(demand)

    def costs(
        self, state: ClusterState, demand: PodDemand, masks: GpuMasks
    ) -> tuple[np.ndarray, np.ndarray]:
        self.note(demand)
        terms = self.cost_terms(state, demand)
        return add_terms(len(masks.gpus), [t.compute(state, demand, masks) for t in terms])

    def cost_terms(self, state: ClusterState, demand: PodDemand,
                   inputs: PolicyInputs | None = None) -> list[CostTerm]:
        """The costs as terms (``terms.py``), in the order they are added: best fit,
        interference (with the open-GPU cost), fragmentation, CPU, node order. Each says which
        of the demand's fields it reads, so a cache shares the interference term across pods
        of one class and share size, and the fragmentation term (the expensive one, stale
        whenever the learned mix is re-read) across classes. Call after ``note``.
        ``inputs``: the terms as they will be once these (``pending``) are adopted."""
        terms = []
        if self.fit_weight:
            terms.append(CostTerm(None, (), self._fit_term))
        if self.interference_weight:
            if self._learned(state, demand):  # reads the residents' profiles: never cached
                terms.append(CostTerm(None, None, self._learned_term))
            elif state.matrix.knows(demand.job_class):
                terms.append(CostTerm(("pair", demand.job_class, demand.share_milli),
                                      (state.matrix,), self._pair_term))
        if self.frag_weight:
            key = ("frag", demand.whole_gpus, demand.has_share, demand.share_milli,
                   pod_cpu(demand), pod_mem(demand))
            model = self._frag.model if inputs is None else inputs.model
            terms.append(CostTerm(key, (model.columns,), partial(self._frag_term, model),
                                  partial(self._frag_raw, model),
                                  self._frag_finish(state, demand, model.tasks.p), (model,),
                                  _carry_columns))
        if self.cpu_weight and getattr(state, "host", None) is not None:
            terms.append(CostTerm(None, (), self._cpu_term))
        if self.remainder_weight and demand.has_share and not demand.whole_gpus:
            model = self._frag.model if inputs is None else inputs.model
            terms.append(CostTerm(None, (), partial(self._remainder_term, model)))
        if self.price_weight and demand.has_share and not demand.whole_gpus:
            # reads the nodes' own GPUs, GPU model, CPU and memory, and the value table in use
            # with the mix it was solved from (the table: its epoch); inline, a re-read mix's
            # table is solved here
            host = getattr(state, "host", None) is not None
            key = ("price", demand.share_milli, pod_cpu(demand) if host else 0,
                   pod_mem(demand) if host else 0)
            table = (self._price_table() if inputs is None or inputs.table is None
                     else inputs.table)
            terms.append(CostTerm(key, (table,), partial(self._price_term, table)))
        if self.drain_weight and self._waiting.waiting(state, exclude=demand.uid):
            terms.append(CostTerm(None, None, self._drain_term))  # reads the waiting pods
        if self.order_weight:  # two multiplications: cheaper than a cache lookup
            terms.append(CostTerm(None, (), self._order_term))
        return terms

    def _drain_term(self, state: ClusterState, demand: PodDemand, masks: GpuMasks
                    ) -> TermValues:
        """What a placement takes from the nodes nearest to hosting a waiting multi-GPU pod."""
        waiting = self._waiting.waiting(state, exclude=demand.uid)
        share, whole = drain_costs(state, demand, masks, waiting)
        return self.drain_weight * share, self.drain_weight * whole

    def _learned(self, state: ClusterState, demand: PodDemand) -> bool:
        profiles = state.profiles
        return bool(self.interference_weight and profiles is not None
                    and profiles.id_of(demand.uid) >= 0)

    def _fit_term(self, state: ClusterState, demand: PodDemand, masks: GpuMasks) -> TermValues:
        return (self.fit_weight * gpu_free_after(state, demand, masks.gpus),
                self.fit_weight * node_free_fraction(state, masks) if _has_whole(demand)
                else None)

    def _learned_term(self, state: ClusterState, demand: PodDemand, masks: GpuMasks
                      ) -> TermValues:
        """The learned pair model's loss (the pod's solo profile is known)."""
        gpus = masks.gpus
        fraction = gpu_fraction(demand.share_milli)
        learned = pair_loss(state, demand.uid, demand.job_class, fraction, gpus)
        empty = state.residents[gpus] == 0
        return (self.interference_weight * learned
                + self.open_gpu_cost * fraction * empty), None

    def _pair_term(self, state: ClusterState, demand: PodDemand, masks: GpuMasks
                   ) -> TermValues:
        """The class matrix's loss, plus the open-GPU cost on an empty GPU."""
        gpus = masks.gpus
        fraction = gpu_fraction(demand.share_milli)
        # every GPU in order (a whole-inventory refill): the rows themselves, not a copy of
        # them (the gather of GPUs x classes floats was half of this term's time)
        resident_frac = state.class_frac if masks.every else state.class_frac[gpus]
        kept = self._survival(state, demand.job_class) if masks.every else None
        cost = state.matrix.placement_loss(demand.job_class, fraction, resident_frac, kept)
        cost *= self.interference_weight
        empty = (state.residents if masks.every else state.residents[gpus]) == 0
        # the open-GPU cost where the GPU is empty (adding 0.0 elsewhere changes nothing)
        np.add(cost, self.open_gpu_cost * fraction, out=cost, where=empty)
        return cost, None

    def _survival(self, state: ClusterState, job_class: str) -> np.ndarray | None:
        """The class's ``survival`` over every GPU, kept while the state's bookings and
        matrix stand (its arrays and last stamp): a class's new share sizes then price only
        the co-runners' part of the interference term. None where the state gives no
        stamp (computed by the caller then)."""
        stamp = getattr(state, "last_stamp", None)
        if stamp is None:
            return None
        held = self._kept
        sign = held.get("sign")
        if (sign is None or sign[0] is not state.class_frac or sign[1] != stamp
                or sign[2] is not state.matrix):  # one state's at a time: an array per class
            held["sign"] = (state.class_frac, stamp, state.matrix)
            held["classes"] = {}
        classes = held["classes"]
        kept = classes.get(job_class)
        if kept is None:
            kept = classes[job_class] = state.matrix.survival(job_class, state.class_frac)
        return kept

    def _frag_term(self, model: FragModel, state: ClusterState, demand: PodDemand,
                   masks: GpuMasks) -> TermValues:
        """Growth of the node's fragmentation. Share values are priced on every GPU with the
        share's compute left (not only where ``masks.share`` holds: the term must not read
        the pod's GPU memory or models, which its key leaves out); where the share cannot go
        they are never read."""
        gpus = masks.gpus
        if not len(gpus):
            return np.zeros(0), np.zeros(0)
        room = state.milli_cap[gpus] - state.milli_used[gpus] >= demand.share_milli
        share_delta, whole_delta = self._frag.deltas(state, demand, masks, share=room,
                                                     model=model)
        # dF >= -F_n >= -(GPUs per node): the offset keeps costs >= 0 (the core's
        # infeasibility test needs that) and is the same for every node.
        offset = float((state.node_stop - state.node_start).max(initial=1))
        share = self.frag_weight * (offset - share_delta / 1000.0)
        if not _has_whole(demand):
            return share, None
        whole = self.frag_weight * (
            offset - whole_delta[masks.owner] / 1000.0) / max(demand.whole_gpus, 1)
        return share, whole

    def _frag_raw(self, model: FragModel, state: ClusterState, demand: PodDemand,
                  masks: GpuMasks, columns: np.ndarray | None = None) -> TermValues:
        """The fragmentation growth per typical task (GPUs x tasks), before the popularities
        weigh it: valid for as long as the mix keeps the same tasks (``FragModel.columns``);
        None for the slots the demand has none of. ``columns``: those tasks' only (the
        ones a re-read mix added, ``_carry_columns``)."""
        gpus = masks.gpus
        room = state.milli_cap[gpus] - state.milli_used[gpus] >= demand.share_milli
        if columns is not None:
            model = FragModel(model.tasks.take(columns), self._frag.fill)
        share, whole = self._frag.deltas(state, demand, masks, per_task=True, share=room,
                                         model=model)
        return (share if demand.has_share else None,
                whole[masks.owner] if _has_whole(demand) else None)

    def _frag_finish(self, state: ClusterState, demand: PodDemand, p: np.ndarray):
        """Raw rows (``_frag_raw``) to the fragmentation term's values, as ``_frag_term``.
        The offset is read when the rows are finished (a cache mostly answers without)."""
        slots = max(demand.whole_gpus, 1)
        weight = self.frag_weight
        has_whole = _has_whole(demand)

        def finish(share: np.ndarray | None, whole: np.ndarray | None) -> TermValues:
            offset = float((state.node_stop - state.node_start).max(initial=1))
            size = len(share if share is not None else whole)
            share_cost = (weight * (offset - (share @ p) / 1000.0) if share is not None
                          else np.full(size, weight * offset))
            if not has_whole:
                return share_cost, None
            whole_cost = (weight * (offset - (whole @ p) / 1000.0) / slots if whole is not None
                          else np.full(size, weight * offset / slots))
            return share_cost, whole_cost

        return finish

    def _remainder_term(self, model: FragModel, state: ClusterState, demand: PodDemand,
                        masks: GpuMasks) -> TermValues:
        """Capacity the share's remainder leaves idle against the mix (``remainder.py``),
        plus one GPU so costs stay >= 0; whole-GPU slots get nothing. Read from a row per
        share size (the cost for every milli a GPU may have left), built once per re-read of
        the mix: one lookup per candidate GPU (kept for the model in use and the one waiting
        to be adopted)."""
        memo = self._waste.get(model)
        if memo is None:
            while len(self._waste) >= 2:
                del self._waste[next(iter(self._waste))]
            memo = self._waste[model] = {"table": waste_table(model.tasks)}
        size = int(demand.share_milli)
        row = memo.get(size)
        if row is None:
            left = np.arange(len(memo["table"]))
            row = self.remainder_weight * (1.0 + remainder_cost(memo["table"], left, size))
            memo[size] = row
        return row[_free_milli(state, masks, len(row) - 1)], None

    def _price_term(self, table: PriceTable, state: ClusterState, demand: PodDemand,
                    masks: GpuMasks) -> TermValues:
        """The mix's worth the share takes from each GPU, priced by the mix's best packing
        (``share_price.py``; the mix ``table`` was solved from), counting on each node only
        the mix's shares that may use its GPU model and that its CPU and host memory can
        still take (before the pod, and after it for what the pod leaves);
        whole-GPU slots get nothing."""
        model = table.job.model
        value = table.value
        gpus = masks.gpus
        left = _free_milli(state, masks, len(value) - 1)
        after = np.clip(left - int(demand.share_milli), 0, len(value) - 1)
        tasks = model.tasks
        host = getattr(state, "host", None)
        named = any(m is not None for m in tasks.models)
        if host is None and not named:  # every share of the mix reaches every gap
            return self.price_weight * (value[left] - value[after]), None
        nodes, inverse = np.unique(state.gpu_node[gpus], return_inverse=True)
        # shares that may use each node's GPU model
        model_ok = model.model_ok(state)[node_model(state, nodes)] if named else None
        if host is None:
            reach = host_share(tasks, None, None, model_ok)[inverse]
            return self.price_weight * reach * (value[left] - value[after]), None
        # the nodes as they are, then after the pod: one pass over both
        cpu, mem = host.cpu_left[nodes], host.mem_left[nodes]
        reach = host_share(tasks, np.concatenate([cpu, cpu - pod_cpu(demand)]),
                           np.concatenate([mem, mem - pod_mem(demand)]),
                           None if model_ok is None else np.concatenate([model_ok, model_ok]))
        before, then = reach[: len(nodes)][inverse], reach[len(nodes):][inverse]
        return self.price_weight * (before * value[left] - then * value[after]), None

    def _cpu_term(self, state: ClusterState, demand: PodDemand, masks: GpuMasks
                  ) -> TermValues:
        if not len(masks.gpus):
            return np.zeros(0), np.zeros(0)
        cpu = self._cpu_cost(state, demand, state.gpu_node[masks.gpus])
        return cpu, cpu / max(demand.whole_gpus, 1) if _has_whole(demand) else None

    def _order_term(self, state: ClusterState, demand: PodDemand, masks: GpuMasks
                    ) -> TermValues:
        held = self._order.get("per_gpu")
        if held is None or held[0] is not state.gpu_node:  # once per inventory
            held = (state.gpu_node, self.order_weight * state.gpu_node / self._span(state))
            self._order["per_gpu"] = held
        # Every GPU in order: the memo itself (term values are read, never written: the
        # costs add them into a copy of the first term's)
        order = held[1] if masks.every else held[1][masks.gpus]
        if not _has_whole(demand):
            return order, None
        slots = max(demand.whole_gpus, 1)
        return order, order / slots if slots > 1 else order

    def host_costs(self, state: ClusterState, demand: PodDemand, nodes: np.ndarray) -> np.ndarray:
        """Pods without GPUs (simulator only; kube-scheduler places them in a real cluster):
        the node where their CPU adds the least fragmentation."""
        cost = -self.frag_weight * self._frag.host_deltas(state, demand, nodes) / 1000.0
        if self.cpu_weight and getattr(state, "host", None) is not None:
            cost = cost + self._cpu_cost(state, demand, nodes)
        return cost + self.order_weight * nodes / self._span(state)

    def _cpu_cost(self, state: ClusterState, demand: PodDemand, nodes: np.ndarray
                  ) -> np.ndarray:
        """``cpu_weight`` x the GPUs left free on the node after the pod x the fraction of
        the node's remaining CPU the pod takes: the GPU capacity whose CPU it uses up, in
        expectation. Zero on a node whose GPUs are all booked (its CPU serves no GPU pod), so
        CPU-heavy pods go there rather than beside the gaps that shares could still fill."""
        host = state.host
        _, _, u = self._frag.model.state_aggregates(state)
        request = 1000.0 * demand.whole_gpus + (demand.share_milli if demand.has_share else 0)
        left = np.maximum(u[nodes] - request, 0.0) / 1000.0
        return self.cpu_weight * left * pod_cpu(demand) / np.maximum(host.cpu_left[nodes], 1)

    @staticmethod
    def _span(state: ClusterState) -> int:
        return max(len(state.node_names), ORDER_SPAN)
