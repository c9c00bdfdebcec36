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


@dataclass(frozen=True)
class FitResult:
    nodes: np.ndarray  # candidate node indexes into the state (known nodes only)
    names: list[str]
    fits: np.ndarray  # bool per candidate
    masks: GpuMasks
    failed: dict[str, str]  # waiting may help (GPUs are busy)
    unresolvable: dict[str, str]  # waiting cannot help (no such node, model, or size)


def candidate_gpus(state: ClusterState, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    starts, stops = state.node_start[nodes], state.node_stop[nodes]
    counts = stops - starts
    owner = np.repeat(np.arange(len(nodes)), counts)
    # GPU index = node start + position within node, built without a Python loop.
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    return np.repeat(starts, counts) + offsets, owner


def model_mask(state: ClusterState, demand: PodDemand, gpus: np.ndarray) -> np.ndarray:
    if demand.allowed_models is None:
        return np.ones(len(gpus), dtype=bool)
    allowed = [i for i, m in enumerate(state.models) if m in demand.allowed_models]
    return np.isin(state.gpu_model[gpus], allowed)


def gpu_masks(state: ClusterState, demand: PodDemand, nodes: np.ndarray) -> GpuMasks:
    gpus, owner = candidate_gpus(state, nodes)
    model_ok = model_mask(state, demand, gpus)
    mem_used, milli_used = state.mem_used[gpus], state.milli_used[gpus]
    free = model_ok & (mem_used == 0) & (milli_used == 0)
    share = (
        model_ok
        & (state.mem_cap[gpus] - mem_used >= demand.share_mem_mib)
        & (state.milli_cap[gpus] - milli_used >= demand.share_milli)
    )
    if not demand.has_share:
        share = np.zeros(len(gpus), dtype=bool)
    return GpuMasks(gpus=gpus, owner=owner, model_ok=model_ok, free=free, share=share)


def _per_node(mask: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(owner, weights=mask, minlength=n).astype(np.int64)


def fit(
    state: ClusterState, demand: PodDemand, candidates: list[str], explain: bool = True
) -> FitResult:
    """Which candidates fit; with ``explain=False`` the per-node reasons for GPU misfits are
    skipped (``failed``/``unresolvable`` then only name unknown nodes), for bulk callers."""
    unresolvable: dict[str, str] = {}
    try:  # the common case, every candidate known: one C-level lookup
        found = operator.itemgetter(*candidates)(state.node_index) if candidates else ()
        nodes = np.array(found if len(candidates) != 1 else [found], dtype=np.int64)
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
    n = len(nodes)
    count_free = _per_node(masks.free, masks.owner, n)
    count_share = _per_node(masks.share, masks.owner, n)
    count_either = _per_node(masks.free | masks.share, masks.owner, n)
    w = demand.whole_gpus
    if demand.has_share:
        fits = (count_free >= w) & (count_share >= 1) & (count_either >= w + 1)
    else:
        fits = count_free >= w
    failed: dict[str, str] = {}
    bad = np.flatnonzero(~fits)
    if explain and len(bad):
        _explain(state, demand, nodes, masks, bad, known, failed, unresolvable)
    return FitResult(
        nodes=nodes, names=known, fits=fits, masks=masks, failed=failed, unresolvable=unresolvable
    )


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
    """One human-readable reason per failing node; 'unresolvable' when even an empty node of
    this shape could never take the pod (model or size), so preemption and waiting are futile."""
    n = len(nodes)
    models_ok = _per_node(masks.model_ok, masks.owner, n)
    big_enough = masks.model_ok & (state.mem_cap[masks.gpus] >= demand.share_mem_mib)
    count_big = _per_node(big_enough, masks.owner, n)
    best_mem = np.zeros(n, dtype=np.int64)
    gpus = masks.gpus
    mem_free = state.mem_cap[gpus] - state.mem_used[gpus]
    milli_free = state.milli_cap[gpus] - state.milli_used[gpus]
    np.maximum.at(best_mem, masks.owner, np.where(masks.model_ok, mem_free, 0))
    best_milli = np.zeros(n, dtype=np.int64)
    np.maximum.at(best_milli, masks.owner, np.where(masks.model_ok, milli_free, 0))
    count_free = _per_node(masks.free, masks.owner, n)
    slots = demand.slot_count
    for i in bad:
        name = names[i]
        if models_ok[i] == 0:
            wanted = "|".join(sorted(demand.allowed_models or ()))
            unresolvable[name] = f"no GPU of model {wanted} on this node"
        elif models_ok[i] < slots:
            unresolvable[name] = f"pod needs {slots} GPUs, node has {models_ok[i]} usable"
        elif demand.has_share and count_big[i] == 0:
            unresolvable[name] = (
                f"no GPU on this node has {demand.share_mem_mib} MiB of memory in total"
            )
        elif count_free[i] < demand.whole_gpus:
            failed[name] = (
                f"needs {demand.whole_gpus} free whole GPU(s), {count_free[i]} free"
            )
        else:
            failed[name] = (
                f"no GPU with {demand.share_mem_mib} MiB and {demand.share_milli} milli free"
                f" (most free: {best_mem[i]} MiB, {best_milli[i]} milli)"
            )
