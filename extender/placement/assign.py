"""Choosing GPUs: a slots x GPUs cost matrix solved with the Hungarian method (SciPy), and the
same optimum computed for many nodes at once for prioritize. Pure.

Slots are the pod's W whole GPUs plus one row for its share, if any. Infeasible cells cost
``INFEASIBLE``; an assignment that needs one is no assignment.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment

from extender.demand import PodDemand
from extender.ledger.rules import Allocation, Reservation
from extender.placement.fit import FitResult, fit, gpu_masks
from extender.placement.policies.base import Policy
from extender.placement.state import ClusterState

INFEASIBLE = 1e12


@dataclass(frozen=True)
class Assignment:
    node: str
    whole: tuple[str, ...]  # UUIDs for the whole-GPU slots, in container order
    share: str | None  # UUID for the share slot
    cost: float


def cost_matrix(
    demand: PodDemand, share_cost: np.ndarray, whole_cost: np.ndarray, free: np.ndarray,
    share_ok: np.ndarray,
) -> np.ndarray:
    rows = [np.where(free, whole_cost, INFEASIBLE)] * demand.whole_gpus
    if demand.has_share:
        rows.append(np.where(share_ok, share_cost, INFEASIBLE))
    return np.vstack(rows) if rows else np.zeros((0, len(free)))


def solve(matrix: np.ndarray) -> tuple[np.ndarray, float] | None:
    """Column chosen for each row and the total cost; None when infeasible."""
    if matrix.shape[0] == 0:
        return np.zeros(0, dtype=np.int64), 0.0
    if matrix.shape[0] > matrix.shape[1]:
        return None
    rows, cols = linear_sum_assignment(matrix)
    chosen = matrix[rows, cols]
    # Cell by cell: policy costs may be negative, so a sum could hide an infeasible cell.
    if (chosen >= INFEASIBLE / 2).any():
        return None
    return cols[np.argsort(rows)], float(chosen.sum())


def assign(
    state: ClusterState, demand: PodDemand, node: str, policy: Policy
) -> Assignment | None:
    """The GPUs of ``node`` this pod should get, or None if it does not fit there."""
    if node not in state.node_index:
        return None
    masks = gpu_masks(state, demand, np.array([state.node_index[node]]))
    share_cost, whole_cost = policy.costs(state, demand, masks)
    solved = solve(cost_matrix(demand, share_cost, whole_cost, masks.free, masks.share))
    if solved is None:
        return None
    cols, total = solved
    uuids = [state.gpu_uuid[g] for g in masks.gpus[cols]]
    whole = tuple(uuids[: demand.whole_gpus])
    share = uuids[demand.whole_gpus] if demand.has_share else None
    return Assignment(node=node, whole=whole, share=share, cost=total)


def note_unplaced(policy: Policy, demand: PodDemand) -> None:
    """Tell a policy that wants to know (``unplaced``) that the pod found no room: a policy that
    keeps track of waiting pods learns of them even though it scored no node for them."""
    hook = getattr(policy, "unplaced", None)
    if hook is not None:
        hook(demand)


# Unsigned integers as wide as a node's row of GPUs (one byte per GPU's bool), for
# ``first_minimum``: nodes of 1, 2, 4 and 8 GPUs.
_ROW_AS_INT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def first_minimum(runs: np.ndarray, least: np.ndarray) -> np.ndarray:
    """``runs.argmin(axis=1)``, given each row's minimum ``least``. argmin over short rows
    pays a call per row; here a row's "equals its minimum" bytes are read as one
    little-endian integer, whose lowest set bit is in the first equal column's byte. A row
    holding NaN (whose minimum nothing equals), or rows of another width: argmin."""
    as_int = _ROW_AS_INT.get(runs.shape[1])
    if as_int is None or sys.byteorder != "little" or np.isnan(least).any():
        return runs.argmin(axis=1)
    equal = np.ascontiguousarray(runs == least[:, None])
    bits = equal.view(as_int).ravel()
    lowest = bits & (~bits + as_int(1))  # 2 ** (8 * column): exact as a float
    return (np.frexp(lowest.astype(np.float64))[1] - 1) // 8


def node_costs(state: ClusterState, demand: PodDemand, result: FitResult, policy: Policy
               ) -> np.ndarray:
    """Optimal assignment cost per candidate node (inf where the pod does not fit); equals
    ``assign(...).cost`` node by node, without a solver call for the common shapes."""
    return node_costs_and_choices(state, demand, result, policy, choose=False)[0]


def node_costs_and_choices(state: ClusterState, demand: PodDemand, result: FitResult,
                           policy: Policy, choose: bool = True
                           ) -> tuple[np.ndarray, np.ndarray | None]:
    """``node_costs`` and, for a pod of one slot on alike nodes, the GPU (state index) that
    ``assign`` picks on each node from the same costs (-1 where it picks none): the first
    GPU of least cost, as the solver picks for one row. None for other shapes (and
    without ``choose``)."""
    masks = result.masks
    n = len(result.nodes)
    out = np.full(n, np.inf)
    if n == 0 or not result.fits.any():
        note_unplaced(policy, demand)
        return out, None
    share_cost, whole_cost = policy.costs(state, demand, masks)
    w = demand.whole_gpus
    if w and demand.has_share:  # mixed pods: rare, solve each fitting node exactly
        for i in np.flatnonzero(result.fits):
            sel = masks.owner == i
            solved = solve(
                cost_matrix(demand, share_cost[sel], whole_cost[sel], masks.free[sel],
                            masks.share[sel])
            )
            out[i] = solved[1] if solved else np.inf
        return out, None
    if masks.alike and (demand.has_share or w == 1):
        # One GPU to pick per node, and alike nodes are runs of one length: a running minimum
        # over the runs' columns, a few times faster than ufunc.at or a sort (and the same
        # numbers: a minimum rounds nothing).
        usable, cost = ((masks.share, share_cost) if demand.has_share
                        else (masks.free, whole_cost))
        runs = np.where(usable, cost, np.inf).reshape(n, masks.alike)
        out = runs[:, 0].copy()
        for j in range(1, masks.alike):
            np.minimum(out, runs[:, j], out=out)
        if not choose:
            out[~result.fits] = np.inf
            return out, None
        # assign's solver sees INFEASIBLE (not inf) where a GPU is unusable, and refuses
        # a pick that costs INFEASIBLE / 2 or more: no choice there.
        pick = first_minimum(runs, out)
        # every GPU in order: node i's GPUs are i * alike onwards (no gather)
        choices = (pick + np.arange(0, n * masks.alike, masks.alike) if masks.every
                   else masks.gpus.reshape(n, masks.alike)[np.arange(n), pick])
        ok = result.fits & (out < INFEASIBLE / 2)
        out[~result.fits] = np.inf
        return out, np.where(ok, choices, -1)
    elif demand.has_share:
        sel = masks.share
        np.minimum.at(out, masks.owner[sel], share_cost[sel])
    elif w:
        sel = np.flatnonzero(masks.free)
        owner, cost = masks.owner[sel], whole_cost[sel]
        order = np.lexsort((cost, owner))
        owner, cost = owner[order], cost[order]
        first = np.searchsorted(owner, owner)  # first position of each owner's run
        rank = np.arange(len(owner)) - first
        keep = rank < w
        total = np.bincount(owner[keep], weights=cost[keep], minlength=n)
        out[result.fits] = total[result.fits]
    else:
        out[result.fits] = 0.0
    out[~result.fits] = np.inf
    return out, None


def reservation_for(
    demand: PodDemand,
    assignment: Assignment,
    state: ClusterState,
    now: float,
    ttl_s: float | None,
) -> Reservation:
    allocations: list[Allocation] = []
    whole = iter(assignment.whole)
    for container in demand.containers:
        for _ in range(container.whole_gpus):
            uuid = next(whole)
            i = state.gpu_index[uuid]
            allocations.append(
                Allocation(uuid, container.name, int(state.mem_cap[i]), int(state.milli_cap[i]))
            )
    if assignment.share is not None:
        for container in demand.share_containers:
            allocations.append(
                Allocation(assignment.share, container.name, container.mem_mib, container.milli)
            )
    return Reservation(
        pod_uid=demand.uid,
        namespace=demand.namespace,
        name=demand.name,
        node=assignment.node,
        allocations=tuple(allocations),
        job_class=demand.job_class,
        created_at=now,
        expires_at=None if ttl_s is None else now + ttl_s,
        whole_gpus=assignment.whole,
    )


__all__ = ["Assignment", "assign", "fit", "node_costs", "reservation_for", "solve"]
