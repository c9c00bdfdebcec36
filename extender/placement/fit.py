"""Fit check: which nodes can hold a pod, and why the others cannot. Pure and vectorised.

A pod needs W whole GPUs (completely free) and, if it asks for a share, one more GPU with
enough free memory and compute. Both sets may overlap (a free GPU can take the share), so by
Hall's theorem a node fits when |F| >= W, |P| >= 1 and |F u P| >= W + 1, where F are its free
GPUs and P those that can take the share (each restricted to the allowed models).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np

from extender.demand import PodDemand
from extender.placement.state import ClusterState


@dataclass(frozen=True)
class GpuMasks:
    """Per-GPU eligibility over the GPUs of the candidate nodes (``gpus`` indexes the state)."""

    gpus: np.ndarray  # GPU indexes, candidate nodes' GPUs concatenated
    owner: np.ndarray  # position of each GPU's node in the candidate list
    model_ok: np.ndarray
    free: np.ndarray  # can take a whole slot
    share: np.ndarray  # can take the share slot
    nodes: np.ndarray | None = None  # the candidate nodes (state indexes)
    alike: int = 0  # GPUs per candidate node when every one has as many (0: they differ)
    every: bool = False  # the candidates are every node in order: ``gpus`` is 0..n-1


@dataclass(frozen=True)
class FitResult:
    nodes: np.ndarray  # candidate node indexes into the state (known nodes only)
    names: list[str]
    fits: np.ndarray  # bool per candidate
    masks: GpuMasks
    failed: dict[str, str]  # waiting may help (GPUs are busy)
    unresolvable: dict[str, str]  # waiting cannot help (no such node, model, or size)


def candidate_gpus(state: ClusterState, nodes: np.ndarray, every: bool | None = None
                   ) -> tuple[np.ndarray, np.ndarray, int]:
    """The candidates' GPUs, each one's position in the candidate list, and the GPUs per
    node when every candidate has as many (0 when they differ). ``every``: whether
    ``nodes`` is every node in order, where the caller knows (see ``_every_node``)."""
    if every is None:
        every = _every_node(state, nodes)
    if every:  # GPUs are stored node by node: all of them, in order
        counts = state.node_stop - state.node_start
        alike = int(counts[0]) if counts.min() == counts.max() else 0
        return np.arange(len(state.gpu_node), dtype=np.int64), state.gpu_node.copy(), alike
    starts, stops = state.node_start[nodes], state.node_stop[nodes]
    counts = stops - starts
    if len(counts) and counts.min() == counts.max():  # the common case: alike nodes
        k = int(counts[0])
        return ((starts[:, None] + np.arange(k)).ravel(),
                np.repeat(np.arange(len(nodes)), k), k)
    owner = np.repeat(np.arange(len(nodes)), counts)
    # GPU index = node start + position within node, built without a Python loop.
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    return np.repeat(starts, counts) + offsets, owner, 0


def _every_node(state: ClusterState, nodes: np.ndarray) -> bool:
    """Whether ``nodes`` is every node of the state in order (0, 1, ..., n - 1): a refill of
    the whole inventory, where gathering by index would copy the arrays for nothing."""
    n = len(state.node_start)
    return (len(nodes) == n > 0 and nodes[0] == 0 and nodes[-1] == n - 1
            and bool((nodes[1:] > nodes[:-1]).all()))


def model_mask(state: ClusterState, demand: PodDemand, gpus: np.ndarray) -> np.ndarray:
    if demand.allowed_models is None:
        return np.ones(len(gpus), dtype=bool)
    allowed = [i for i, m in enumerate(state.models) if m in demand.allowed_models]
    return np.isin(state.gpu_model[gpus], allowed)


def masks_key(demand: PodDemand) -> tuple[object, ...]:
    """The demand's fields ``gpu_masks`` reads (keep the two together): demands equal here
    get equal masks on one state. Pods of different job classes mostly share them."""
    return demand.allowed_models, demand.share_mem_mib, demand.share_milli, demand.has_share


def fits_key(demand: PodDemand) -> tuple[object, ...]:
    """The demand's fields ``node_fits`` reads (its masks', the whole GPUs, the host's CPU
    and memory): demands equal here fit the same nodes of one state, whatever their job
    class."""
    return (masks_key(demand), demand.whole_gpus, getattr(demand, "cpu_milli", 0),
            getattr(demand, "host_mem_mib", 0))


def gpu_masks(state: ClusterState, demand: PodDemand, nodes: np.ndarray) -> GpuMasks:
    every = _every_node(state, nodes)
    gpus, owner, alike = candidate_gpus(state, nodes, every)
    model_ok = model_mask(state, demand, gpus)
    if every:  # every GPU, in order: the arrays themselves
        mem_used, milli_used = state.mem_used, state.milli_used
        mem_cap, milli_cap = state.mem_cap, state.milli_cap
    else:
        mem_used, milli_used = state.mem_used[gpus], state.milli_used[gpus]
        mem_cap, milli_cap = state.mem_cap[gpus], state.milli_cap[gpus]
    free = model_ok & (mem_used == 0) & (milli_used == 0)
    share = (
        model_ok
        & (mem_cap - mem_used >= demand.share_mem_mib)
        & (milli_cap - milli_used >= demand.share_milli)
    )
    if not demand.has_share:
        share = np.zeros(len(gpus), dtype=bool)
    return GpuMasks(gpus=gpus, owner=owner, model_ok=model_ok, free=free, share=share,
                    nodes=nodes, alike=alike, every=every)


def _per_node(mask: np.ndarray, owner: np.ndarray, n: int, alike: int = 0) -> np.ndarray:
    if alike:  # contiguous runs of one length: a row sum
        return mask.reshape(n, alike).sum(axis=1, dtype=np.int64)
    return np.bincount(owner, weights=mask, minlength=n).astype(np.int64)


def fit(
    state: ClusterState, demand: PodDemand, candidates: list[str], explain: bool = True
) -> FitResult:
    """Which candidates fit; with ``explain=False`` the per-node reasons for GPU misfits are
    skipped (``failed``/``unresolvable`` then only name unknown nodes), for bulk callers."""
    unresolvable: dict[str, str] = {}
    try:  # the common case, every candidate known: one C-level lookup
        found = operator.itemgetter(*candidates)(state.node_index) if candidates else ()
        nodes = (np.fromiter(found, dtype=np.int64, count=len(found))
                 if len(candidates) != 1 else np.array([found], dtype=np.int64))
        known = list(candidates)
    except KeyError:
        lookup = state.node_index.get
        index = np.array([lookup(name, -1) for name in candidates], dtype=np.int64)
        present = index >= 0
        known = [name for name, ok in zip(candidates, present, strict=True) if ok]
        nodes = index[present]
        for name, ok in zip(candidates, present, strict=True):
            if not ok:
                unresolvable[name] = "node has no GPU inventory known to sparse"
    masks = gpu_masks(state, demand, nodes)
    fits = gpu_fits(demand, masks, len(nodes))
    failed: dict[str, str] = {}
    bad = np.flatnonzero(~fits)
    if explain and len(bad):
        _explain(state, demand, nodes, masks, bad, known, failed, unresolvable)
    short = _host_short(state, demand, nodes, fits)
    if short is not None:
        fits = fits & ~short
        if explain:
            for i in np.flatnonzero(short).tolist():
                failed[known[i]] = host_reason(state, demand, int(nodes[i]))
    return FitResult(
        nodes=nodes, names=known, fits=fits, masks=masks, failed=failed, unresolvable=unresolvable
    )


def node_fits(state: ClusterState, demand: PodDemand, nodes: np.ndarray,
              masks: GpuMasks | None = None) -> np.ndarray:
    """``fit(state, demand, <the nodes' names>, explain=False).fits`` from state indexes,
    without a lookup per name (a refill of thousands of nodes). ``masks``: the nodes'
    ``gpu_masks``, where the caller holds them."""
    masks = gpu_masks(state, demand, nodes) if masks is None else masks
    fits = gpu_fits(demand, masks, len(nodes))
    short = _host_short(state, demand, nodes, fits)
    return fits if short is None else fits & ~short


def gpu_fits(demand: PodDemand, masks: GpuMasks, n: int) -> np.ndarray:
    """Per node: whether its GPUs can take the pod (Hall's condition, module docstring)."""
    w = demand.whole_gpus
    if demand.has_share and not w:  # a share alone: one GPU that can take it
        return _per_node(masks.share, masks.owner, n, masks.alike) >= 1
    if demand.has_share:
        count_free = _per_node(masks.free, masks.owner, n, masks.alike)
        count_share = _per_node(masks.share, masks.owner, n, masks.alike)
        count_either = _per_node(masks.free | masks.share, masks.owner, n, masks.alike)
        return (count_free >= w) & (count_share >= 1) & (count_either >= w + 1)
    return _per_node(masks.free, masks.owner, n, masks.alike) >= w


def _host_short(state: ClusterState, demand: PodDemand, nodes: np.ndarray, fits: np.ndarray
                ) -> np.ndarray | None:
    """Nodes whose GPUs fit but whose CPU or memory is short; None when none is."""
    host = getattr(state, "host", None)
    cpu, mem = getattr(demand, "cpu_milli", 0), getattr(demand, "host_mem_mib", 0)
    if host is None or not (cpu or mem) or not len(nodes):
        return None
    # The node's CPU and memory as the adapter knows them (the extender: allocatable minus
    # the pods bound there; the simulator pre-filters, so this never bites there).
    short = fits & ((host.cpu_left[nodes] < cpu) | (host.mem_left[nodes] < mem))
    return short if short.any() else None


def host_reason(state: ClusterState, demand: PodDemand, node: int) -> str:
    """Why the CPU or memory left on state node ``node`` (whose GPUs fit) is short."""
    host = state.host
    return _host_reason(getattr(demand, "cpu_milli", 0), getattr(demand, "host_mem_mib", 0),
                        int(host.cpu_left[node]), int(host.mem_left[node]))


def _host_reason(cpu: int, mem: int, cpu_left: int, mem_left: int) -> str:
    if cpu_left < cpu:
        return f"node CPU: needs {cpu}m, {max(cpu_left, 0)}m left beside the pods bound there"
    return (f"node memory: needs {mem} MiB, {max(mem_left, 0)} MiB left beside the pods bound"
            " there")


def _nodes(names: list[str], members: list[int], closest: int | None) -> str:
    count = len(members)
    where = f"{count} node{'s' if count != 1 else ''}"
    if closest is not None:
        where += f"; closest: {names[closest]}"
    return f"({where})"


def _explain(
    state: ClusterState,
    demand: PodDemand,
    nodes: np.ndarray,
    masks: GpuMasks,
    bad: np.ndarray,
    names: list[str],
    failed: dict[str, str],
    unresolvable: dict[str, str],
) -> None:
    """The reasons of the candidates at positions ``bad`` (``misfits``, then
    ``describe_misfits``)."""
    kinds, figures = misfits(state, demand, nodes, masks, bad)
    describe_misfits(demand, names, bad.tolist(), kinds, figures, failed, unresolvable)


def misfits(state: ClusterState, demand: PodDemand, nodes: np.ndarray, masks: GpuMasks,
            bad: np.ndarray) -> tuple[list[str], list[int]]:
    """Why the GPUs of the nodes at positions ``bad`` cannot take the pod: per node, its
    kind of misfit and the figure ``describe_misfits`` ranks that kind's nodes by. Each reads
    only its own node's GPUs (``masks`` holds the GPUs of ``nodes``)."""
    n = len(nodes)
    gpus = masks.gpus
    ok = masks.model_ok
    models_ok = _per_node(ok, masks.owner, n)
    mem_cap = state.mem_cap[gpus]
    mem_free = mem_cap - state.mem_used[gpus]
    milli_free = state.milli_cap[gpus] - state.milli_used[gpus]
    mem_ok = ok & (mem_free >= demand.share_mem_mib)

    def node_max(values: np.ndarray, where: np.ndarray) -> np.ndarray:
        out = np.full(n, -1, dtype=np.int64)
        np.maximum.at(out, masks.owner, np.where(where, values, -1))
        return out

    largest = node_max(mem_cap, ok)
    best_mem = node_max(mem_free, ok)
    best_milli = node_max(milli_free, mem_ok)  # compute free on GPUs with memory enough
    count_free = _per_node(masks.free, masks.owner, n)
    count_share = _per_node(masks.share, masks.owner, n)
    slots = demand.slot_count
    kinds: list[str] = []
    figures: list[int] = []
    for i in bad.tolist():
        if models_ok[i] == 0:
            kind, figure = "model", 0
        elif models_ok[i] < slots:
            kind, figure = "count", models_ok[i]
        elif demand.has_share and largest[i] < demand.share_mem_mib:
            kind, figure = "size", largest[i]
        elif (count_free[i] < demand.whole_gpus or not demand.has_share
              or count_share[i] >= 1):  # the share's GPU is one the whole GPUs need
            kind, figure = "free", count_free[i]
        elif best_milli[i] >= 0:  # a GPU has the memory free, not the compute
            kind, figure = "compute", best_milli[i]
        else:
            kind, figure = "memory", best_mem[i]
        kinds.append(kind)
        figures.append(int(figure))
    return kinds, figures


def describe_misfits(demand: PodDemand, names: list[str], positions: list[int],
                     kinds: list[str], figures: list[int], failed: dict[str, str],
                     unresolvable: dict[str, str]) -> None:
    """One reason per kind of misfit, the same string for every node of that kind, numbers
    summarised over the group and the closest node named: kube-scheduler groups identical
    reasons, so a pending pod's message stays short however many nodes it was tried on.
    'Unresolvable' when even an empty node of this shape could never take the pod (model,
    GPU count or size), so preemption and waiting are futile. ``positions``: the nodes'
    places in ``names`` (ascending), each with its kind and figure from ``misfits``."""
    groups: dict[str, list[int]] = {}
    figure_at: dict[int, int] = {}
    for i, kind, figure in zip(positions, kinds, figures, strict=True):
        groups.setdefault(kind, []).append(i)
        figure_at[i] = figure
    slots = demand.slot_count

    def top(members: list[int]) -> int:
        return max(members, key=lambda i: (figure_at[i], -i))

    for kind, members in groups.items():
        target = failed
        if kind == "model":
            wanted = "|".join(sorted(demand.allowed_models or ()))
            reason = f"GPU model: no GPU of model {wanted} {_nodes(names, members, None)}"
            target = unresolvable
        elif kind == "count":
            c = top(members)
            reason, target = (f"GPU count: needs {slots} GPUs, at most {figure_at[c]} usable on"
                              f" a node {_nodes(names, members, c)}"), unresolvable
        elif kind == "size":
            c = top(members)
            reason, target = (f"GPU size: needs {demand.share_mem_mib} MiB on one GPU, the"
                              f" largest has {figure_at[c]} MiB {_nodes(names, members, c)}"), \
                unresolvable
        elif kind == "free":
            c = top(members)
            extra = " plus one for the share" if demand.has_share else ""
            reason = (f"free GPUs: needs {demand.whole_gpus} free whole GPU(s){extra}, at most"
                      f" {figure_at[c]} free on a node {_nodes(names, members, c)}")
        elif kind == "memory":
            c = top(members)
            reason = (f"GPU memory: needs {demand.share_mem_mib} MiB, at most {figure_at[c]} MiB"
                      f" free on a GPU {_nodes(names, members, c)}")
        else:
            c = top(members)
            reason = (f"GPU compute: needs {demand.share_milli} milli, at most"
                      f" {figure_at[c]} milli free on a GPU with"
                      f" {demand.share_mem_mib} MiB free {_nodes(names, members, c)}")
        for i in members:
            target[names[i]] = reason
