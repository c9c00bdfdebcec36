"""The policy's per-GPU costs, kept per pod shape and recomputed only where bookings changed.

Replicas of one job ask for the same thing, and between two of them only the node the last one
was bound to changes; the policy's costs of a node depend only on that node's GPUs (their
bookings and the classes on them) and on constants of the inventory. So the costs computed for
one replica serve the next on every node whose GPUs did not change, and a filter over 500
candidates costs one node's worth of policy work instead of 500. The answers are what the
policy computes, up to the last bit of a dot product (the interference term's matrix product
rounds by the length of the block it gets, as the policy's own answer already varies with the
candidate list); only deterministic, node-local policies are cached (``CACHED_POLICIES``).

Some inputs are global and change without any node's bookings changing: the policy says which
(objects compared by identity, e.g. sparse's fragmentation model, replaced whenever its learned
pod mix is re-read or ``set_workload`` is called, and ``state.matrix``, replaced by live pair
estimates). A policy that splits its costs into terms (``cost_terms``, see
``extender.placement.policies.terms``) gets each term kept apart, keyed by the demand fields
that term reads and checked against the term's own epoch: sparse's interference term is shared
by every pod of one class and share size and survives a re-read mix, its fragmentation term is
shared across classes. A term without a key (sparse's learned pair model, which reads other
pods' solo profiles) is computed every time. Other policies are one term keyed by the whole
shape, with ``cache_epoch(state, demand)`` as its epoch (None: not cached at all). A policy
that learns from the pods it scores (sparse's mix) is told of each pod through ``note`` before
the terms are read, also when nothing is recomputed.

A term given in two steps (``raw``, ``finish``) is kept raw, valid while its epoch stands, and
finished, valid while ``finish_epoch`` stands too: sparse's fragmentation per typical task
survives the mix being re-read every few hundred pods (only the popularities change; its tasks
rarely do), and re-weighting it is a gather and a small matrix product, not the policy's work.
When the tasks do change, the columns of those the mix keeps are carried (``CostTerm.carry``)
and only the new tasks' columns are priced.
A term that is mostly unknown on the candidates (new, or made with other global inputs) is
priced on every node of the inventory at once (``FILL_ALL``): kube-scheduler's candidate window
moves with every pod, so the next pods' windows need those nodes, and one vectorised pass
costs less than ten windows' worth. Memory: each entry holds its arrays (one or two floats per
GPU, per typical task for raw terms) and a stamp per node; at most ``shapes`` entries and
``budget_bytes`` (64 MiB) in all, least recently used dropped first.
"""

from __future__ import annotations

import dataclasses
import operator
from collections import OrderedDict
from collections.abc import Callable, Hashable

import numpy as np

from extender.demand import PodDemand
from extender.placement import ClusterState, Policy
from extender.placement.fit import GpuMasks, gpu_masks
from extender.placement.policies.terms import CostTerm, TermValues, add_terms

# Policies whose costs for a node read only that node's GPUs in the ClusterState (and
# inventory-wide constants), and its CPU and memory left where a host view renews the node's
# stamp with them (``HostView.stamped``): no randomness, no cross-node term.
CACHED_POLICIES = frozenset({"sparse", "fgd"})


_SHAPE_FIELDS: dict[type, tuple[str, ...]] = {}  # per demand class: its fields but identity


def shape_key(demand: PodDemand) -> Hashable | None:
    """Everything the policy may read of a demand, without the pod's identity; None when
    something in it cannot be hashed (then nothing is cached)."""
    names = _SHAPE_FIELDS.get(type(demand))
    if names is None:
        names = _SHAPE_FIELDS[type(demand)] = tuple(sorted(
            f.name for f in dataclasses.fields(demand)
            if f.name not in ("uid", "namespace", "name")))
    key = (tuple([(n, getattr(demand, n)) for n in names]), getattr(demand, "cpu_milli", 0))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def same_objects(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    """Whether two tuples hold the very same objects, in order."""
    return len(a) == len(b) and all(map(operator.is_, a, b))


# A term mostly unknown on the candidates is priced on every node of the inventory at once
# when the inventory has at most this many times the candidates' nodes (kube-scheduler scores
# 10 % of 5,000 nodes, 5 % of larger clusters, in a window that moves with every pod).
FILL_ALL = 20


def fill_all(stale: int, candidates: int, inventory: int) -> bool:
    """Price every node of the inventory now: most candidates are unknown, and the inventory
    is not much larger than the request."""
    return 2 * stale > candidates and inventory <= FILL_ALL * candidates


class _Entry:
    """One term's values (or raw arrays) for every GPU of the inventory, and each node's
    stamp when they were made; arrays are allocated at the shape the term first answers."""

    def __init__(self, n_gpus: int, n_nodes: int) -> None:
        self.n_gpus = n_gpus
        self.share: np.ndarray | None = None
        self.whole: np.ndarray | None = None
        self.stamp = np.zeros(n_nodes, dtype=np.int64)  # node stamps the costs were made at
        self.epoch: tuple[object, ...] = ()  # the global inputs they were made with

    def holds(self, epoch: tuple[object, ...]) -> bool:
        """Whether the costs were made with these very objects (held: no id reuse)."""
        return same_objects(epoch, self.epoch)

    def reset(self, epoch: tuple[object, ...]) -> None:
        self.stamp[:] = 0
        self.epoch = epoch
        self.share = self.whole = None

    def reorder(self, order: np.ndarray, epoch: tuple[object, ...]) -> np.ndarray | None:
        """Take the values' columns (second axis) in ``order``, now valid with ``epoch``:
        the positions of the columns still to be made (``order`` -1), or None (nothing
        changed) when the arrays have no such columns."""
        held = [a for a in (self.share, self.whole) if a is not None]
        kept = order >= 0
        if not held or any(a.ndim != 2 or (kept.any() and order.max() >= a.shape[1])
                           for a in held):
            return None
        for name in ("share", "whole"):
            values = getattr(self, name)
            if values is None:
                continue
            if kept.all():
                values = values[:, order]
            else:  # new columns: zeros until made (``CostCache._make_columns``)
                taken = np.zeros((len(values), len(order)), dtype=values.dtype)
                taken[:, kept] = values[:, order[kept]]
                values = taken
            setattr(self, name, values)
        self.epoch = epoch
        return np.flatnonzero(~kept)

    def store(self, gpus: np.ndarray, share: np.ndarray | None, whole: np.ndarray | None,
              every: bool = False) -> None:
        """``every``: ``gpus`` is every GPU in order (a plain copy, not a scatter)."""
        for name, values in (("share", share), ("whole", whole)):
            if values is None:
                continue
            held = getattr(self, name)
            if held is None or held.shape[1:] != values.shape[1:]:
                held = np.zeros((self.n_gpus, *values.shape[1:]))
                setattr(self, name, held)
            if every:
                held[...] = values
            else:
                held[gpus] = values

    @property
    def nbytes(self) -> int:
        return self.stamp.nbytes + sum(a.nbytes for a in (self.share, self.whole)
                                       if a is not None)


class CostCache:
    def __init__(self, shapes: int = 256, budget_bytes: int = 64 * 1024 * 1024) -> None:
        self.shapes = shapes
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[tuple[int, Hashable], _Entry] = OrderedDict()
        self._inventory: list[str] | None = None  # the state's GPU list (held: no id reuse)
        self.computed_nodes = 0  # nodes the policy was asked about (per cached term)
        self.reused_gpus = 0  # candidate GPUs answered from the cache (per cached term)
        self.bypassed = 0  # calls with a term that reads more than the nodes' own state
        # Moves whenever a kept node's values may be made again (an entry made, reset or
        # dropped): while it stands, a node unchanged since it was priced reads the very
        # values it was priced with (``NodeVerdicts.choice``).
        self.generation = 0
        # Off while a successor is prepared node slice by node slice (``renewal``): a term
        # mostly unknown on the slice is priced on the slice, not on every node at once.
        self.whole_refills = True

    def costs(self, policy: Policy, state: ClusterState, demand: PodDemand, masks: GpuMasks,
              note: bool = True, told: list[CostTerm] | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
        """``policy.costs(state, demand, masks)``, from the cache where it still holds.
        ``note=False``: the caller told the policy of the pod already (``NodeVerdicts``);
        ``told``: and asked it for its terms (``terms_of``) on this state and demand since,
        which this policy, demand and state may be served with (not asked again)."""
        if told is not None and len(masks.gpus):
            terms: list[CostTerm] | None = told
        else:
            key = shape_key(demand)
            host = getattr(state, "host", None)
            if (getattr(policy, "name", None) not in CACHED_POLICIES or key is None
                    or (host is not None and not host.stamped) or not len(masks.gpus)):
                return policy.costs(state, demand, masks)
            tell = getattr(policy, "note", None) if note else None
            if tell is not None:  # first: feeding a learned mix may replace the epoch's inputs
                tell(demand)
            terms = self.terms_of(policy, state, demand, key)
        if terms is None:  # the costs read more than the nodes' own state: not cacheable
            self.bypassed += 1
            return policy.costs(state, demand, masks)
        if state.gpu_uuid is not self._inventory:  # a new inventory: nothing carries over
            self._inventory = state.gpu_uuid
            self._entries.clear()
            self.generation += 1
        if any(t.epoch is None for t in terms):
            self.bypassed += 1
        subs: dict[bytes, GpuMasks] = {}  # this call's masks of stale nodes, shared by terms
        return add_terms(len(masks.gpus), [
            t.compute(state, demand, masks) if t.key is None
            else self._term(policy, t, state, demand, masks, subs) for t in terms])

    @staticmethod
    def terms_of(policy: Policy, state: ClusterState, demand: PodDemand, key: Hashable
                 ) -> list[CostTerm] | None:
        """The terms this cache keeps the policy's costs as: its ``cost_terms``, or its costs
        as one term keyed by the whole shape (``key``, from ``shape_key``) and
        ``cache_epoch``; None when that says the costs cannot be cached. Call after the
        policy was told of the pod (``note``)."""
        cost_terms = getattr(policy, "cost_terms", None)
        if cost_terms is not None:
            return cost_terms(state, demand)
        epoch_of = getattr(policy, "cache_epoch", None)
        epoch = epoch_of(state, demand) if epoch_of is not None else None
        if epoch is None:
            return None
        return [CostTerm(key, tuple(epoch), policy.costs)]

    def _term(self, policy: Policy, term: CostTerm, state: ClusterState, demand: PodDemand,
              masks: GpuMasks, subs: dict[bytes, GpuMasks]) -> TermValues:
        raw = self._filled(*_raw_entry(policy, term), term.raw or term.compute,
                           state, demand, masks, subs, carry=term.carry)
        if term.finish is None:
            return _gather(raw, masks)
        if masks.nodes is None:
            return term.finish(*_gather(raw, masks))

        def finish(state: ClusterState, demand: PodDemand, sub: GpuMasks) -> TermValues:
            return term.finish(*_gather(raw, sub))

        # The finished values too, while the finishing step's inputs stand (sparse: the
        # mix's popularities): a plain gather per call, no weighting.
        done = self._filled(*_finished_entry(policy, term), finish, state, demand, masks,
                            subs, within=raw)
        return _gather(done, masks)

    def _filled(self, entry_key: tuple, epoch: tuple[object, ...],
                compute: Callable[[ClusterState, PodDemand, GpuMasks], TermValues],
                state: ClusterState, demand: PodDemand, masks: GpuMasks,
                subs: dict[bytes, GpuMasks], within: _Entry | None = None,
                carry: Callable[[tuple[object, ...], tuple[object, ...]],
                                np.ndarray | None] | None = None) -> _Entry:
        """The entry, valid on every candidate node: the stale ones computed now. ``within``:
        the entry this one is made from (only nodes valid there may be filled); ``subs``: the
        masks of stale node sets made in this call (the terms' stale nodes mostly agree);
        ``carry``: the term's (``CostTerm.carry``), for values made with another epoch."""
        entry = self._entries.get(entry_key)
        if entry is None:
            entry = _Entry(len(state.gpu_uuid), len(state.node_names))
            self._entries[entry_key] = entry
            self.generation += 1
        self._entries.move_to_end(entry_key)
        if not entry.holds(epoch):  # a global input changed: every node is stale...
            order = carry(entry.epoch, epoch) if carry is not None and entry.epoch else None
            missing = None if order is None else entry.reorder(order, epoch)
            if missing is None:  # ...unless carried over
                entry.reset(epoch)
            elif len(missing):  # carried, but for the columns of new tasks
                self._make_columns(entry, compute, state, demand, masks, subs, missing)
            self.generation += 1
        # A node's stamp changes with every booking on it (ClusterState.node_stamp).
        if masks.every or masks.nodes is not None:
            if masks.every:  # every node in order (a whole-inventory refill): no gathers
                stale = np.flatnonzero(entry.stamp != state.node_stamp)
            else:  # the candidate nodes (distinct): compare per node
                nodes = masks.nodes
                stale = nodes[entry.stamp[nodes] != state.node_stamp[nodes]]
            stale_count = (int((state.node_stop[stale] - state.node_start[stale]).sum())
                           if len(stale) else 0)
        else:
            owners = state.gpu_node[masks.gpus]
            stale_gpus = entry.stamp[owners] != state.node_stamp[owners]
            stale = np.unique(owners[stale_gpus]) if stale_gpus.any() else owners[:0]
            stale_count = int(stale_gpus.sum())
        if within is None:
            self.reused_gpus += len(masks.gpus) - stale_count
        candidates = len(masks.nodes) if masks.nodes is not None else len(stale)
        if self.whole_refills and fill_all(len(stale), candidates, len(entry.stamp)):
            # Mostly unknown (new, or made with other global inputs): price every node now,
            # in one vectorised pass, rather than window by window as candidates come.
            unknown = entry.stamp != state.node_stamp
            if within is not None:
                unknown &= within.stamp == state.node_stamp
            stale = np.flatnonzero(unknown)
        if len(stale):
            sub = _stale_masks(state, demand, stale, masks, subs)
            before = entry.nbytes
            entry.store(sub.gpus, *compute(state, demand, sub), every=sub.every)
            entry.stamp[stale] = state.node_stamp[stale]
            if entry.nbytes != before:
                self._evict(state)
        if within is None:
            self.computed_nodes += len(stale)
        return entry

    def prepare_for(self, state: ClusterState) -> None:
        """Start empty for this state's inventory (a successor's; ``renewal``)."""
        self._inventory = state.gpu_uuid

    def share_from(self, other: CostCache, policy: Policy, terms: list[CostTerm]) -> None:
        """Use ``other``'s entries of these terms where they were made with the very same
        global inputs (their values hold here too; either cache keeps them current)."""
        if other._inventory is not self._inventory:
            return
        for t in terms:
            if t.key is None or t.epoch is None:
                continue
            wanted = [_raw_entry(policy, t)]
            if t.finish is not None:
                wanted.append(_finished_entry(policy, t))
            for key, epoch in wanted:
                entry = other._entries.get(key)
                if key not in self._entries and entry is not None and entry.holds(epoch):
                    self._entries[key] = entry

    def take_over(self, old: CostCache) -> None:
        """Replace ``old`` (made while this cache was prepared): its counters carry on, its
        entries this cache lacks are kept (they hold while their inputs stand), and the
        generation moves past both (no value kept with either is taken as current)."""
        self.computed_nodes += old.computed_nodes
        self.reused_gpus += old.reused_gpus
        self.bypassed += old.bypassed
        if old._inventory is self._inventory:
            for key, entry in old._entries.items():
                self._entries.setdefault(key, entry)
        self.generation = max(self.generation, old.generation) + 1
        self.whole_refills = old.whole_refills

    def _make_columns(self, entry: _Entry, compute: Callable[..., TermValues],
                      state: ClusterState, demand: PodDemand, masks: GpuMasks,
                      subs: dict[bytes, GpuMasks], columns: np.ndarray) -> None:
        """The ``columns`` of a carried entry, made on every node still current there
        (``compute(..., columns=columns)``: the term's values of those columns alone); the
        nodes changed since are made whole by the caller, as stale ones are."""
        current = np.flatnonzero(entry.stamp == state.node_stamp)
        if not len(current):
            return
        sub = (masks if masks.every and len(current) == len(entry.stamp)
               else _stale_masks(state, demand, current, masks, subs))
        share, whole = compute(state, demand, sub, columns=columns)
        for held, values in ((entry.share, share), (entry.whole, whole)):
            if held is None or values is None:
                continue
            if sub.every:
                held[:, columns] = values
            else:
                held[sub.gpus[:, None], columns[None, :]] = values
        self.computed_nodes += len(current)

    def _evict(self, state: ClusterState) -> None:
        """Least recently used terms out while over the count or the memory budget (the
        one just used stays)."""
        room = max(4, self.shapes)
        while len(self._entries) > 1 and (
                len(self._entries) > room
                or sum(e.nbytes for e in self._entries.values()) > self.budget_bytes):
            self._entries.popitem(last=False)
            self.generation += 1


def _raw_entry(policy: Policy, term: CostTerm) -> tuple[tuple, tuple[object, ...]]:
    """The key and epoch of a term's entry (its raw values, for a two-step term)."""
    return (id(policy), term.key), term.epoch  # type: ignore[return-value]


def _finished_entry(policy: Policy, term: CostTerm) -> tuple[tuple, tuple[object, ...]]:
    """The key and epoch of a two-step term's finished values."""
    return (id(policy), term.key, "finished"), (*term.epoch, *term.finish_epoch)  # type: ignore[misc]


def _stale_masks(state: ClusterState, demand: PodDemand, stale: np.ndarray, masks: GpuMasks,
                 subs: dict[bytes, GpuMasks]) -> GpuMasks:
    """The masks of the ``stale`` nodes: the caller's own where they are its very nodes (a
    node's refill after a bind, the whole inventory), else made once per call. Terms read
    only the GPUs and their owners of the masks (``CostTerm``), not the pod-specific parts."""
    nodes = masks.nodes
    if nodes is not None and len(nodes) == len(stale) and np.array_equal(nodes, stale):
        return masks
    key = stale.tobytes()
    sub = subs.get(key)
    if sub is None:
        sub = subs[key] = gpu_masks(state, demand, stale)
    return sub


def _gather(entry: _Entry, masks: GpuMasks) -> TermValues:
    """The entry's values on the masks' GPUs. Every GPU in order: the arrays themselves, not
    a copy (read only: ``add_terms`` copies the first term it adds, ``finish`` makes new)."""
    if masks.every:
        return entry.share, entry.whole
    gpus = masks.gpus
    # take: rows of a 2-D array (raw terms) gather several times faster than [gpus]
    return (None if entry.share is None else entry.share.take(gpus, axis=0),
            None if entry.whole is None else entry.whole.take(gpus, axis=0))


class CachedPolicy:
    """A policy whose ``costs`` go through a CostCache; everything else is the policy's.
    ``note=False``: the caller told the policy of the pod already."""

    def __init__(self, policy: Policy, cache: CostCache, note: bool = True,
                 told: list[CostTerm] | None = None) -> None:
        self._policy = policy
        self._cache = cache
        self._note = note
        self._told = told  # the policy's terms, asked already (``CostCache.costs``)

    def costs(self, state: ClusterState, demand: PodDemand, masks: GpuMasks
              ) -> tuple[np.ndarray, np.ndarray]:
        return self._cache.costs(self._policy, state, demand, masks, note=self._note,
                                 told=self._told)

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self._policy, name)


@dataclasses.dataclass(frozen=True)
class CycleEntry:
    """What filter priced for one pod, kept for the prioritize call of the same cycle: the
    nodes that passed (state indexes and names), their costs, and each node's stamp then, so
    prioritize re-costs only the nodes booked since (``ClusterState.node_stamp``)."""

    passed: list[str]
    costs: np.ndarray
    nodes: np.ndarray
    stamps: np.ndarray
    inventory: list[str]  # the state's GPU list (held: compared by identity)
    # Filter's request and the passed nodes' positions in it: a prioritize of that very list
    # (it also names the nodes filter failed) places the costs without a lookup per name.
    request: list[str] | None = None
    positions: np.ndarray | None = None
    last_stamp: int = -1  # the state's ``last_stamp`` then

    @classmethod
    def of(cls, state: ClusterState, passed: list[str], nodes: np.ndarray,
           costs: np.ndarray, request: list[str] | None = None,
           positions: np.ndarray | None = None, stamps: np.ndarray | None = None
           ) -> CycleEntry:
        """``stamps``: ``state.node_stamp[nodes]``, where the caller holds them."""
        return cls(passed, costs, nodes, state.node_stamp[nodes] if stamps is None else stamps,
                   state.gpu_uuid, request, positions, getattr(state, "last_stamp", -1))

    def costs_for(self, names: list[str], costs: np.ndarray) -> np.ndarray:
        """``costs`` (of ``passed``) laid out over ``names``; inf where filter did not pass
        the node (it failed there: infeasible)."""
        if self.request is not None and names == self.request:
            out = np.full(len(names), np.inf)
            out[self.positions] = costs
            return out
        by_node = dict(zip(self.passed, costs.tolist(), strict=True))
        return np.array([by_node.get(n, np.inf) for n in names])

    def changed(self, state: ClusterState) -> np.ndarray | None:
        """Positions (in ``passed``) of nodes whose bookings changed in ``state`` since; None
        when the inventory changed (nothing carries over)."""
        if state.gpu_uuid is not self.inventory:
            return None
        if self.last_stamp >= 0 and getattr(state, "last_stamp", -2) == self.last_stamp:
            return self.nodes[:0]  # no stamp given since: nothing changed
        return np.flatnonzero(state.node_stamp[self.nodes] != self.stamps)
