"""Filter's answer per pod shape and node: whether the pod fits there and what the best
placement there costs, kept while the node's stamp stands (``ClusterState.node_stamp``).

Replicas of one job, and pods of the few shapes a cluster runs, ask the same question of the
same nodes again and again, and between two of them only the nodes booked since changed. A
filter over 500 candidates then gathers 500 verdicts and recomputes a handful, where the fit
check and the per-node assignment cost over every candidate GPU were the bulk of its work.

The verdicts are what ``fit`` and ``node_costs`` answer, node by node: the fit of a node reads
only that node's GPUs (and its CPU and memory left, which renew its stamp where a host view is
attached and ``stamped``), and its cost only the policy's per-GPU costs of its GPUs, which come
from the per-term ``CostCache`` either way. The reasons of the nodes that do not fit are
summarised over the request's failing nodes, in the request's order (the same words as one
``fit`` over all of them), from each failing node's own misfit, kept while its stamp stands.

Kube-scheduler's window of candidates moves with every pod, so a node booked for one pod comes
back in a later pod's window (at 5,000 nodes about ten pods on), one a pod. A refill of stale
candidates takes every other node of the shape booked since with it while they are few: a
refill costs mostly its fixed NumPy work, not its nodes.

Costs are kept with the policy's terms (their keys, compared by value) and the global inputs
they read (their epochs, compared by identity): a new fragmentation model or interference
matrix makes every cost stale, not the fit. Where a term reads more than the nodes' own state
(sparse's learned pair model, or its drain term while multi-GPU pods wait) the costs are
computed as without this cache. A policy outside ``CACHED_POLICIES``, a demand that cannot be
hashed, a host view without stamps or a candidate unknown to the inventory is not served here
at all (``None``: the caller runs ``fit`` and ``node_costs`` as before). The policy learns of
the pod (``note``) exactly once per filter that prices nodes, as it does without this cache.

A refill of every node (a shape's first filter, or its first after a re-read of the learned
mix: every shape then prices the whole inventory) reads the GPU masks of every node kept per
state and the demand fields they read (``fit.masks_key``), shared by the shapes that differ
only in their job class, and a shape's fits come from state indexes, not one lookup per name.
A new shape's fits start from those of the last shape that fits the same nodes
(``fit.fits_key``: the same sizes, models, CPU and memory, another job class), so its first
filter prices only its costs.
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from extender.demand import PodDemand
from extender.placement import Assignment, ClusterState, Policy, fit, node_costs
from extender.placement.assign import node_costs_and_choices
from extender.placement.fit import (
    FitResult,
    GpuMasks,
    describe_misfits,
    fits_key,
    gpu_fits,
    gpu_masks,
    host_reason,
    masks_key,
    misfits,
    node_fits,
)
from extender.placement.policies.terms import CostTerm
from extender.verbs.costcache import (
    CACHED_POLICIES,
    CachedPolicy,
    CostCache,
    fill_all,
    same_objects,
    shape_key,
)

# (failing nodes and their stamps, failed, unresolvable)
KeptReasons = tuple[tuple[bytes, bytes], dict[str, str], dict[str, str]]
HOST = "host"  # a node whose GPUs fit and whose CPU or memory does not (``_Entry.misfit_of``)

# A refill of a few stale candidates takes every other stale node of the shape with it while
# they are at most this many.
STALE_BATCH = 64


def with_stale_others(asked: np.ndarray, stale: np.ndarray) -> np.ndarray:
    """The nodes to refill for the stale candidates ``asked``: with every node of ``stale``
    (a mask over the inventory, holding ``asked``) while those are few. Kube-scheduler's
    candidate window moves with every pod, so a node booked since its verdict comes back in
    a later pod's window (at 5,000 nodes, about ten pods on), one a pod; a refill's cost is
    mostly its fixed NumPy overhead, so refilling them together, once, is what pays. The
    values are the same whenever made: each holds while its node's stamp stands."""
    count = int(np.count_nonzero(stale))
    if count <= len(asked) or count > STALE_BATCH:
        return asked
    return np.flatnonzero(stale)


@dataclass
class Verdicts:
    """The filter's view of one request: candidates known to the inventory, in order."""

    nodes: np.ndarray  # state indexes
    names: list[str]
    fits: np.ndarray  # bool per candidate
    failed: dict[str, str]
    unresolvable: dict[str, str]
    _key: Hashable = None
    _entry: _Entry | None = None
    # The candidates' node stamps, of this state object while its ``last_stamp`` is ``_at``
    # (no stamp given since: none changed), for ``costs`` and the cycle entry to read again.
    stamps: np.ndarray | None = None
    _state: object = None
    _at: int = -1

    def current(self, state: ClusterState) -> np.ndarray | None:
        """``state.node_stamp[self.nodes]`` where no stamp moved since ``fits``; else None."""
        if (state is self._state and self.stamps is not None
                and getattr(state, "last_stamp", -2) == self._at):
            return self.stamps
        return None


class _Entry:
    def __init__(self, n_nodes: int) -> None:
        self.fit_stamp = np.zeros(n_nodes, dtype=np.int64)  # node stamps the fits were made at
        self.fits = np.zeros(n_nodes, dtype=bool)
        self.cost_stamp = np.zeros(n_nodes, dtype=np.int64)
        self.cost = np.full(n_nodes, np.inf)
        # The GPU assign picks with those costs (one-slot pods on alike nodes; -1: none
        # kept) and the cost cache's generation then (see ``NodeVerdicts.choice``).
        self.choice = np.full(n_nodes, -1, dtype=np.int64)
        self.generation = np.full(n_nodes, -1, dtype=np.int64)
        # (failing nodes and their stamps, failed, unresolvable): the last reasons given
        self.last_reasons: KeptReasons | None = None
        # Why each node that failed cannot take the pod (``misfit_of``; only nodes that
        # failed are held), and its stamp then (-1: not known)
        self.misfit: dict[int, tuple[str, int | str]] = {}
        self.misfit_stamp = np.full(n_nodes, -1, dtype=np.int64)
        self.terms: tuple[Hashable, ...] = ()  # the policy's term keys the costs were made of
        self.epoch: tuple[object, ...] = ()  # the global inputs they read (held: no id reuse)
        self.demand: PodDemand | None = None  # the last pod of this shape (``renewal``)

    def misfit_of(self, state: ClusterState, demand: PodDemand, nodes: np.ndarray
                  ) -> list[tuple[str, int | str]]:
        """Why each of ``nodes`` (state indexes, whose current fit is false) cannot take the
        pod: ``fit.misfits``'s kind and figure for its GPUs, or (``HOST``, the reason) where
        its GPUs fit and its CPU or memory does not. Made for the nodes whose stamp moved."""
        stamps = state.node_stamp[nodes]
        stale = np.unique(nodes[self.misfit_stamp[nodes] != stamps])
        made = self.misfit
        if len(stale):
            masks = gpu_masks(state, demand, stale)
            gpu_ok = gpu_fits(demand, masks, len(stale))
            bad = np.flatnonzero(~gpu_ok)
            for j, kind, figure in zip(bad.tolist(), *misfits(state, demand, stale, masks, bad),
                                       strict=True):
                made[int(stale[j])] = (kind, figure)
            for j in np.flatnonzero(gpu_ok).tolist():
                made[int(stale[j])] = (HOST, host_reason(state, demand, int(stale[j])))
            self.misfit_stamp[stale] = state.node_stamp[stale]
        return [made[i] for i in nodes.tolist()]

    def reasons(self, state: ClusterState, demand: PodDemand, candidates: list[str],
                 nodes: np.ndarray, stamps: np.ndarray, bad: np.ndarray
                 ) -> tuple[dict[str, str], dict[str, str]]:
        """``fit``'s reasons for the failing candidates (positions ``bad``), kept while the
        same nodes fail at the same stamps: the words read only those nodes (a node's name
        is fixed by its index within one inventory) and the shape. Else summarised from each
        failing node's own misfit, kept while its stamp stands (``misfit_of``): the
        scheduler's window moves with every pod, so the failing candidates change from pod
        to pod while each failing node stays as it was. Copies: callers add to them."""
        sign = (nodes[bad].tobytes(), stamps[bad].tobytes())
        kept = self.last_reasons
        if kept is None or kept[0] != sign:
            failed: dict[str, str] = {}
            unresolvable: dict[str, str] = {}
            positions: list[int] = []
            kinds: list[str] = []
            figures: list[int] = []
            host: list[tuple[int, str]] = []
            for i, (kind, figure) in zip(bad.tolist(),
                                         self.misfit_of(state, demand, nodes[bad]),
                                         strict=True):
                if kind == HOST:
                    host.append((i, str(figure)))
                else:
                    positions.append(i)
                    kinds.append(kind)
                    figures.append(int(figure))
            describe_misfits(demand, candidates, positions, kinds, figures, failed,
                             unresolvable)
            for i, reason in host:  # as fit: after the GPUs' reasons
                failed[candidates[i]] = reason
            kept = self.last_reasons = (sign, failed, unresolvable)
        return dict(kept[1]), dict(kept[2])

    def stale_fits(self, state: ClusterState) -> np.ndarray:
        """Per node of the inventory: its fit was made at another stamp (or never)."""
        return self.fit_stamp != state.node_stamp

    def stale_costs(self, state: ClusterState) -> np.ndarray:
        """Per node: its fit is current and true, and its cost was made at another stamp."""
        return (self.cost_stamp != state.node_stamp) & self.fits & ~self.stale_fits(state)

    def take_fits(self, other: _Entry) -> None:
        """``other``'s fits and their stamps (each holds while its node's stamp stands,
        whichever entry it was made in)."""
        self.fit_stamp[:] = other.fit_stamp
        self.fits[:] = other.fits

    def costs_hold(self, terms: tuple[Hashable, ...], epoch: tuple[object, ...]) -> bool:
        return terms == self.terms and same_objects(epoch, self.epoch)

    def keep_costs_of(self, terms: tuple[Hashable, ...], epoch: tuple[object, ...]) -> None:
        """Costs of these terms and inputs from now on: every kept cost is stale if they
        are not the ones the costs were made of."""
        if not self.costs_hold(terms, epoch):
            self.cost_stamp[:] = 0
            self.terms, self.epoch = terms, epoch


# Masks of every node kept at once (``NodeVerdicts._every_masks``): about 0.8 MB each at
# 5,000 nodes of 8 GPUs; a cluster's shapes mostly share a handful.
KEPT_MASKS = 16


class NodeVerdicts:
    def __init__(self, cost_cache: CostCache, shapes: int = 256) -> None:
        self.cost_cache = cost_cache
        self.shapes = shapes
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._inventory: list[str] | None = None  # the state's GPU list (held: compared by id)
        self.reused = 0  # candidate verdicts (fit or cost) answered from the cache
        self.bind_reused = 0  # binds that took the GPU kept here instead of assign's
        self.computed = 0  # node verdicts (fit or cost) computed
        # (state, its last stamp, masks over every node per masks_key): see _every_masks
        self._masks: tuple[object, object, dict[tuple[object, ...], GpuMasks]] = (
            None, None, {})
        self._by_fits: dict[Hashable, Hashable] = {}  # fits_key -> the last shape of it

    @staticmethod
    def _terms(policy: Policy, state: ClusterState, demand: PodDemand, key: Hashable
               ) -> tuple[tuple[Hashable, ...], tuple[object, ...], list[CostTerm]] | None:
        """The policy's term keys, their global inputs and the terms; None when a term reads
        more than the nodes' own state (or the policy has no terms to tell)."""
        return NodeVerdicts.terms_told(CostCache.terms_of(policy, state, demand, key))

    @staticmethod
    def terms_told(terms: list[CostTerm] | None
                   ) -> tuple[tuple[Hashable, ...], tuple[object, ...], list[CostTerm]] | None:
        """``_terms`` of terms asked already."""
        if terms is None or any(t.epoch is None for t in terms):
            return None
        keys = tuple([t.key for t in terms])
        epoch: list[object] = []
        for t in terms:
            epoch += t.epoch
            if t.finish:
                epoch += t.finish_epoch
        return keys, tuple(epoch), terms

    def fits(self, policy: Policy, state: ClusterState, demand: PodDemand,
             candidates: list[str]) -> Verdicts | None:
        """Which candidates fit (and why the others do not), from the cache where the node
        did not change; None when this policy, demand or request is not served here."""
        key = shape_key(demand)
        host = getattr(state, "host", None)
        if (getattr(policy, "name", None) not in CACHED_POLICIES or key is None
                or (host is not None and not host.stamped) or not candidates):
            return None
        try:  # every candidate known (the common case): one C-level lookup
            found = operator.itemgetter(*candidates)(state.node_index)
        except KeyError:
            return None  # unknown names: fit explains them
        # (A name given twice gets the same verdict twice, as from fit.)
        # fromiter: twice as fast as np.array on a tuple of ints
        nodes = (np.fromiter(found, dtype=np.int64, count=len(found))
                 if len(candidates) != 1 else np.array([found], dtype=np.int64))
        entry = self._entry(state, key, demand)[0]
        stamps = state.node_stamp[nodes]
        stale = np.flatnonzero(entry.fit_stamp[nodes] != stamps)
        self.reused += len(nodes) - len(stale)
        if fill_all(len(stale), len(nodes), len(entry.fits)):
            # Mostly unknown: every node of the inventory now, in one vectorised pass (the
            # scheduler's candidate window moves with each pod; see costcache.fill_all).
            self._fill_fits(entry, state, demand, np.flatnonzero(entry.stale_fits(state)),
                            ordered=True)
        elif len(stale):
            self._fill_fits(entry, state, demand, with_stale_others(
                nodes[stale], entry.stale_fits(state)))
        fits = entry.fits[nodes]
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        if not fits.all():  # the reasons, summarised over exactly the failing nodes
            failed, unresolvable = entry.reasons(state, demand, candidates, nodes, stamps,
                                                 np.flatnonzero(~fits))
        return Verdicts(nodes, list(candidates), fits, failed, unresolvable, key, entry,
                        stamps, state, getattr(state, "last_stamp", -1))

    def costs(self, policy: Policy, state: ClusterState, demand: PodDemand, v: Verdicts,
              fitting: np.ndarray) -> np.ndarray:
        """The best placement's cost on each fitting candidate (positions ``fitting``);
        tells the policy of the pod first, as pricing the nodes does. Should a term that
        cannot be kept appear with that (a pod now waits), they are priced without the
        cache."""
        note = getattr(policy, "note", None)
        if note is not None:
            note(demand)
        entry = v._entry
        told = self._terms(policy, state, demand, v._key)
        if entry is None or told is None:  # priced as without the cache, not noted again
            names = [v.names[i] for i in fitting.tolist()]
            return node_costs(state, demand, fit(state, demand, names, explain=False),
                              CachedPolicy(policy, self.cost_cache, note=False))
        keys, epoch, terms = told
        entry.keep_costs_of(keys, epoch)  # a global input changed: every cost is stale
        every = len(fitting) == len(v.nodes)  # all fit: the candidates themselves
        nodes = v.nodes if every else v.nodes[fitting]
        stamps = v.current(state) if every else None
        if stamps is None:
            stamps = state.node_stamp[nodes]
        stale = np.flatnonzero(entry.cost_stamp[nodes] != stamps)
        self.reused += len(nodes) - len(stale)
        if fill_all(len(stale), len(nodes), len(entry.cost)):
            self._fill_costs(entry, policy, state, demand,
                             np.flatnonzero(entry.stale_costs(state)), terms, ordered=True)
        elif len(stale):
            self._fill_costs(entry, policy, state, demand, with_stale_others(
                nodes[stale], entry.stale_costs(state)), terms)
        return entry.cost[nodes]

    def _entry(self, state: ClusterState, key: Hashable, demand: PodDemand
               ) -> tuple[_Entry, bool]:
        """The shape's entry, now the most recent, with ``demand`` as its pod; and whether
        it is new (none kept, or a new inventory: nothing carries over)."""
        if state.gpu_uuid is not self._inventory:
            self._inventory = state.gpu_uuid
            self._entries.clear()
            self._by_fits.clear()
        entry = self._entries.get(key)
        new = entry is None
        if entry is None:
            entry = self._entries[key] = _Entry(len(state.node_names))
            while len(self._entries) > self.shapes:
                self._entries.popitem(last=False)
            self._fits_from_sibling(entry, key, demand)
        self._entries.move_to_end(key)
        entry.demand = demand
        return entry, new

    def _fits_from_sibling(self, entry: _Entry, key: Hashable, demand: PodDemand) -> None:
        """A new shape's fits start from those of the last shape that fits the same nodes
        (``fits_key``: pods of another job class mostly): each holds while its node's stamp
        stands, whichever shape it was made for."""
        fits = fits_key(demand)
        sibling = self._entries.get(self._by_fits.get(fits))
        if sibling is not None and sibling is not entry:
            entry.take_fits(sibling)
        if len(self._by_fits) > 4 * self.shapes:  # keys of shapes dropped since
            self._by_fits.clear()
        self._by_fits[fits] = key

    def recent_shapes(self, most: int) -> list[tuple[Hashable, PodDemand]]:
        """The ``most`` shapes asked last, most recent first, with a pod of each."""
        out = []
        for key in reversed(self._entries):
            demand = self._entries[key].demand
            if demand is not None:
                out.append((key, demand))
                if len(out) == most:
                    break
        return out

    def prefill(self, policy: Policy, state: ClusterState, key: Hashable, demand: PodDemand,
                told: tuple[tuple[Hashable, ...], tuple[object, ...], list[CostTerm]],
                nodes: np.ndarray, seed: NodeVerdicts | None = None) -> None:
        """Fits and costs of ``nodes`` (ascending state indexes) for the shape, with the
        terms ``told`` (``terms_told``: e.g. the terms the policy will have once it adopts
        new inputs); the fits start from ``seed``'s where this cache has no entry yet. The
        policy is not told of the pod: no pod is being placed."""
        keys, epoch, terms = told
        entry, new = self._entry(state, key, demand)
        src = None if seed is None or not new else seed._entries.get(key)
        if src is not None and seed._inventory is state.gpu_uuid:  # type: ignore[union-attr]
            entry.take_fits(src)
        entry.keep_costs_of(keys, epoch)
        stamps = state.node_stamp[nodes]
        self._fill_fits(entry, state, demand, nodes[entry.fit_stamp[nodes] != stamps])
        todo = nodes[entry.fits[nodes] & (entry.cost_stamp[nodes] != stamps)]
        self._fill_costs(entry, policy, state, demand, todo, terms)

    def take_over(self, old: NodeVerdicts) -> None:
        """Replace ``old`` (made while this one was prepared, over the same cost cache's
        successor): its counters carry on and the shapes this one lacks are kept, their fits
        as they are (their costs hold only where the inputs did not change; no kept GPU
        choice is reused)."""
        self.reused += old.reused
        self.bind_reused += old.bind_reused
        self.computed += old.computed
        if self._inventory is None:  # nothing prepared
            self._inventory = old._inventory
        if old._inventory is not self._inventory:
            return
        for key, entry in old._entries.items():
            if key not in self._entries:
                entry.generation[:] = -1
                self._entries[key] = entry
                self._entries.move_to_end(key, last=False)  # older than the prepared ones
        while len(self._entries) > self.shapes:
            self._entries.popitem(last=False)

    def _fill_fits(self, entry: _Entry, state: ClusterState, demand: PodDemand,
                   nodes: np.ndarray, ordered: bool = False) -> None:
        """Fits of ``nodes`` (state indexes: no name lookups); ``ordered``: distinct and
        ascending (then all of them is every node in order, whose masks are kept)."""
        if not len(nodes):
            return
        every = ordered and len(nodes) == len(entry.fits)
        entry.fits[nodes] = node_fits(state, demand, nodes, self._every_masks(
            state, demand, nodes) if every else None)
        entry.fit_stamp[nodes] = state.node_stamp[nodes]
        self.computed += len(nodes)

    def _fill_costs(self, entry: _Entry, policy: Policy, state: ClusterState,
                    demand: PodDemand, nodes: np.ndarray, terms: list[CostTerm],
                    ordered: bool = False) -> None:
        """Costs of nodes the pod fits (their fits current in ``entry``); ``terms``: the
        policy's, asked after its note for this state and demand. ``ordered``: ``nodes``
        are distinct and ascending (then all of them is every node in order)."""
        if not len(nodes):
            return
        every = ordered and len(nodes) == len(entry.cost)
        # Their fits are current and true: the masks alone, not fit's name lookup again.
        sub = FitResult(nodes=nodes, names=[], fits=np.ones(len(nodes), dtype=bool),
                        masks=(self._every_masks(state, demand, nodes) if every
                               else gpu_masks(state, demand, nodes)),
                        failed={}, unresolvable={})
        # the filter noted the pod and asked for the terms: not again
        unnoted = CachedPolicy(policy, self.cost_cache, note=False, told=terms)
        at = slice(None) if every else nodes  # every node: plain stores, not scatters
        entry.cost[at], choices = node_costs_and_choices(state, demand, sub, unnoted)
        entry.cost_stamp[at] = state.node_stamp[at]
        entry.choice[at] = -1 if choices is None else choices
        entry.generation[at] = self.cost_cache.generation
        self.computed += len(nodes)

    def _every_masks(self, state: ClusterState, demand: PodDemand, nodes: np.ndarray
                     ) -> GpuMasks:
        """``gpu_masks`` over every node, kept per ``masks_key`` while no stamp is given
        on this state (its GPUs' bookings, which the masks read, unchanged): after a re-read
        of the learned mix every shape refills the whole inventory, and shapes that differ
        only in what the masks do not read (the job class) share them. Read only."""
        stamp = getattr(state, "last_stamp", None)
        if stamp is None:  # no way to tell that nothing changed: not kept
            return gpu_masks(state, demand, nodes)
        held = self._masks
        if held[0] is not state or held[1] != stamp:
            held = self._masks = (state, stamp, {})
        key = masks_key(demand)
        kept = held[2]
        masks = kept.get(key)
        if masks is None:
            if len(kept) >= KEPT_MASKS:  # bounded: each is a few arrays over every GPU
                del kept[next(iter(kept))]
            masks = kept[key] = gpu_masks(state, demand, nodes)
        return masks


    def choice(self, policy: Policy, state: ClusterState, demand: PodDemand, node: str
               ) -> tuple[bool, Assignment | None]:
        """What ``assign(state, demand, node, costing policy)`` answers, from the GPU kept when
        the node was last priced for this shape, where that is exactly what assign would pick
        now: the node not booked or released since (its stamp), its fit and cost current, the
        policy's terms and global inputs the same objects, none reading more than the nodes' own
        state, and no value of the cost cache made again since (``CostCache.generation``):
        assign would read the very per-GPU costs the choice was made from. None otherwise
        (assign decides). First: whether the policy was told of the pod here, as assign's
        costs tell it (then call assign without a note); it is told only where assign would
        go through the cost cache, which tells it once."""
        key = shape_key(demand)
        host = getattr(state, "host", None)
        i = state.node_index.get(node)
        if (getattr(policy, "name", None) not in CACHED_POLICIES or key is None
                or (host is not None and not host.stamped) or i is None
                or state.node_stop[i] <= state.node_start[i]):
            return False, None  # assign's costs bypass the cost cache, or fail at once
        note = getattr(policy, "note", None)
        if note is not None:
            note(demand)
        entry = self._entries.get(key)
        if entry is None or state.gpu_uuid is not self._inventory:
            return True, None
        stamp = state.node_stamp[i]
        gpu = int(entry.choice[i])
        if (gpu < 0 or entry.cost_stamp[i] != stamp or entry.fit_stamp[i] != stamp
                or not entry.fits[i] or entry.generation[i] != self.cost_cache.generation):
            return True, None
        # Terms kept in the cost cache are read from it; the others (no key) are node-local
        # and computed per GPU, as the node verdicts' costs already take them to be.
        told = self._terms(policy, state, demand, key)
        if told is None or not entry.costs_hold(told[0], told[1]):
            return True, None
        uuid = state.gpu_uuid[gpu]
        share = uuid if demand.has_share else None
        whole = () if demand.has_share else (uuid,)
        return True, Assignment(node=node, whole=whole, share=share, cost=float(entry.cost[i]))
