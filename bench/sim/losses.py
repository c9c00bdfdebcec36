"""Where the unallocated GPUs sit: a breakdown of a cluster's free capacity by the reason the
pods that failed could not use it.

Taken at the moment the arrived workload reaches 100 % of capacity (the FGD protocol's
headline point). With no departures, a GPU free at that moment was free when every earlier pod
failed, so each failed pod could not use it; the reason it could not is, first that applies:

    model   the node's GPU model is not in the pod's allowed list
    sliver  the GPU is partly used and its remainder is smaller than what the pod asks
            (a whole-GPU pod needs an untouched GPU; a share needs that much milli left)
    multi   the GPU is untouched but its node has fewer untouched GPUs than the pod needs
            (whole GPUs stranded on nodes a multi-GPU pod needs whole)
    cpu     the GPUs would do, but the node has too little CPU or host memory left
    other   none of the above (e.g. the node's pod-count cap)

A GPU's free milli is split over the reasons in proportion to the failed pods' GPU request.
With no failed GPU pod the free capacity is ``unused`` (nothing asked for it). The failed
request by pod shape (shares, one whole GPU, several GPUs) is the other view of the same loss:
at exactly 100 % arrived the two totals are equal. ``shared_gpus`` counts the partly used GPUs
and ``half_empty`` is the free capacity on those with at least half a GPU left (shares that
found no partner).

The window view (``FailWindow``) says when the losses happen. With no departures every pod
before the first failed GPU pod was placed, so the unallocated capacity at 100 % is the GPU
request that arrived from that point on (``window_arrived``) less the part of it still placed
(``window_placed``, shares that found a sliver wide enough, whole pods on the odd empty GPU).
``first_fail_pct`` is the arrived workload, % of capacity, at that first failure: a policy
loses less by moving it later (packing more densely before) or by placing more inside the
window (leaving slivers the late pods fit); ``window_placed_<shape>`` says which pods did.

The snapshot view (``snapshot``) takes the free capacity when the first whole-GPU pod fails
(``fail_``) and at 100 % (``end_``), against the GPU pods arriving between the two: slivers
below the smallest and the median coming share, capacity a fitting coming pod cannot reach for
the node's CPU or memory, or its GPU model, whole GPUs on nodes that cannot host the failing
pod, and what the coming pods could still use.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from bench.sim.trace import TraceDemand
from extender.placement.policies.fgd import node_model

REASONS = ("sliver", "multi", "cpu", "model", "other")
WINDOW = ("first_fail_pct", "window_arrived", "window_placed")
SHAPES = ("share", "one", "multi")
# the partly used GPUs: how many, and the free milli on those at least half empty
SHARED = ("shared_gpus", "half_empty")
MILLI = 1000


def pod_shape(d: TraceDemand) -> str:
    return "share" if d.gpu_milli < MILLI else "one" if d.num_gpu == 1 else "multi"


class FailWindow:
    """GPU request arriving after the first failed GPU pod (up to arrived = 100 %), and the
    part of it placed, by pod shape (module doc)."""

    def __init__(self) -> None:
        self.first_fail_pct: float | None = None
        self.arrived = 0
        self.placed = Counter()

    def record(self, arrived_before: int, d: TraceDemand, placed: bool, capacity: int) -> None:
        if not d.gpu_request:
            return
        if self.first_fail_pct is None:
            if placed:
                return
            self.first_fail_pct = 100.0 * arrived_before / capacity
        self.arrived += d.gpu_request
        if placed:
            self.placed[pod_shape(d)] += d.gpu_request

    def summary(self) -> dict[str, float]:
        out = {"first_fail_pct": 100.0 if self.first_fail_pct is None else self.first_fail_pct,
               "window_arrived": self.arrived / MILLI,
               "window_placed": sum(self.placed.values()) / MILLI}
        out.update({f"window_placed_{s}": self.placed[s] / MILLI for s in SHAPES})
        return out


def breakdown(sim, failed: list[TraceDemand]) -> dict[str, float]:
    """GPUs of free capacity per reason (``REASONS`` or ``unused``) and failed GPU request per
    pod shape (``failed_<shape>``), for a ``SimCluster`` and the GPU pods that failed so far."""
    st, host = sim.state, sim.host
    free = st.milli_free.astype(np.float64)
    out = {r: 0.0 for r in (*REASONS, "unused")}
    shapes = Counter()
    for d in failed:
        shapes[pod_shape(d)] += d.gpu_request
    out.update({f"failed_{s}": shapes[s] / MILLI for s in SHAPES})
    partly = (free > 0) & (st.milli_used > 0)
    out["shared_gpus"] = float(partly.sum())
    out["half_empty"] = float(free[partly & (free >= MILLI // 2)].sum()) / MILLI
    groups = Counter((d.cpu_milli, d.host_mem_mib, d.num_gpu, d.gpu_milli, d.allowed_models)
                     for d in failed if d.gpu_request)
    if not groups:
        out["unused"] = float(free.sum()) / MILLI
        return out
    keys = list(groups)
    weight = np.array([groups[k] * k[2] * k[3] for k in keys], dtype=np.float64)
    weight /= weight.sum()
    cpu = np.array([k[0] for k in keys])
    mem = np.array([k[1] for k in keys])
    num = np.array([k[2] for k in keys])
    milli = np.array([k[3] for k in keys])
    nodes = np.arange(len(st.node_names))
    model = node_model(st, nodes)
    model_ok = np.ones((len(nodes), len(keys)), dtype=bool)
    for j, k in enumerate(keys):
        if k[4] is not None:
            allowed = [i for i, m in enumerate(st.models) if m in k[4]]
            model_ok[:, j] = np.isin(model, allowed)
    host_ok = (host.cpu_left[:, None] >= cpu) & (host.mem_left[:, None] >= mem)
    untouched = st.milli_used == 0
    free_count = np.bincount(st.gpu_node, weights=untouched, minlength=len(nodes))
    gpus = np.flatnonzero(free > 0)
    g_node = st.gpu_node[gpus]
    needs_whole = milli >= MILLI
    size_ok = np.where(needs_whole, untouched[gpus, None], free[gpus, None] >= milli)
    count_ok = (num <= 1) | (free_count[g_node, None] >= num)
    reason = np.full((len(gpus), len(keys)), len(REASONS) - 1)  # other
    # Later checks overwrite earlier ones: the first reason of the module doc wins.
    checks = {"cpu": host_ok[g_node], "multi": count_ok, "sliver": size_ok,
              "model": model_ok[g_node]}
    for name, ok in checks.items():
        reason = np.where(~ok, REASONS.index(name), reason)
    share = free[gpus, None] * weight[None, :]
    for code, name in enumerate(REASONS):
        out[name] = float(share[reason == code].sum()) / MILLI
    return out


def table(runs: list) -> pd.DataFrame:
    """Mean breakdown per workload and policy over the runs that carry one (``FgdRun``s)."""
    rows = []
    keys = sorted({(r.workload, r.policy) for r in runs if "losses" in r.extra})
    for workload, policy in keys:
        mine = [r for r in runs if (r.workload, r.policy) == (workload, policy)
                and "losses" in r.extra]
        row = {"workload": workload, "policy": policy, "seeds": len(mine),
               "unalloc_gpus": float(np.mean([r.unallocated_gpus_100 for r in mine]))}
        for k in (*REASONS, "unused", *(f"failed_{s}" for s in SHAPES), *SHARED, *WINDOW,
                  *SNAP_COLUMNS):
            # runs recorded before a view carry none: NaN, not a first failure at 0 %
            missing = np.nan if k in WINDOW or k in SNAP_COLUMNS else 0.0
            row[k] = float(np.mean([r.extra["losses"].get(k, missing) for r in mine]))
        bounds = [r.extra.get("unallocated_lower_bound_gpus") for r in mine]
        row["lower_bound"] = float(np.mean(bounds)) if None not in bounds else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def against(tab: pd.DataFrame, policy: str = "sparse", base: str = "fgd") -> pd.DataFrame:
    """``policy`` minus ``base`` per workload (GPUs; negative = policy leaves fewer there)."""
    rows = []
    for workload in sorted(set(tab["workload"])):
        a = tab[(tab.workload == workload) & (tab.policy == policy)]
        b = tab[(tab.workload == workload) & (tab.policy == base)]
        if not len(a) or not len(b):
            continue
        cols = [c for c in tab.columns if c not in ("workload", "policy", "seeds",
                                                    "lower_bound")]
        row = {"workload": workload}
        row.update({c: float(a[c].iloc[0] - b[c].iloc[0]) for c in cols})
        rows.append(row)
    return pd.DataFrame(rows)


# The snapshot view (``snapshot``): the free capacity at one moment, against the GPU pods still
# to arrive (up to arrived = 100 %), first reason that applies per GPU.
SNAP = ("free", "sliver_min", "sliver_median", "host", "model", "multi", "usable_partly",
        "usable_empty", "empty", "empty_host", "host_any")
# at the first failed whole-GPU pod (fail_) and at arrived = 100 % (end_), both against the
# GPU pods arriving between the two
SNAP_COLUMNS = ("whole_fail_pct", *(f"fail_{k}" for k in SNAP), *(f"end_{k}" for k in SNAP))


def snapshot(sim, upcoming: list[TraceDemand], failing: TraceDemand | None = None
             ) -> dict[str, float]:
    """Free GPU capacity (GPUs) split by what the pods still to come (``upcoming``, GPU pods)
    can make of it, first reason that applies per GPU:

        sliver_min     partly used GPU whose remainder is below the smallest coming share
        sliver_median  partly used, remainder at least that but below the median coming share
                       (by pod count): only the few small shares can take it
        host           some coming pod fits the GPU's free milli (and the node's untouched
                       GPU count), but none of those fits the node's CPU or host memory left
        model          ... fits the host too, but no such pod may use the node's GPU model
        multi          untouched GPU no coming pod fits: too few untouched GPUs on its node
        usable_partly  a coming pod could still take it, partly used GPU
        usable_empty   a coming pod could still take it, untouched GPU

    and, across those: ``empty`` the untouched GPUs' capacity, ``empty_host`` the part of it
    on nodes whose CPU or memory cannot host ``failing`` (the pod that just failed),
    ``host_any`` the free capacity on nodes that cannot host the median coming GPU pod's CPU
    or memory (GPUs stranded by the other resources, whatever their remainder)."""
    st, host = sim.state, sim.host
    free = st.milli_free.astype(np.float64)
    out = {k: 0.0 for k in SNAP}
    out["free"] = float(free.sum()) / MILLI
    untouched = st.milli_used == 0
    out["empty"] = float(free[untouched].sum()) / MILLI
    nodes = np.arange(len(st.node_names))
    if failing is not None:
        bad = (host.cpu_left < failing.cpu_milli) | (host.mem_left < failing.host_mem_mib)
        out["empty_host"] = float(free[untouched & bad[st.gpu_node]].sum()) / MILLI
    pods = [d for d in upcoming if d.gpu_request]
    if not pods:
        out["usable_empty"] = out["empty"]
        out["usable_partly"] = out["free"] - out["empty"]
        return out
    share_sizes = np.array([d.gpu_milli for d in pods if d.gpu_milli < MILLI], dtype=np.float64)
    smallest = share_sizes.min() if len(share_sizes) else MILLI
    median = np.median(share_sizes) if len(share_sizes) else MILLI
    cpu_med = np.median([d.cpu_milli for d in pods])
    mem_med = np.median([d.host_mem_mib for d in pods])
    short = (host.cpu_left < cpu_med) | (host.mem_left < mem_med)
    out["host_any"] = float(free[short[st.gpu_node]].sum()) / MILLI
    groups = Counter((d.cpu_milli, d.host_mem_mib, d.num_gpu, d.gpu_milli, d.allowed_models)
                     for d in pods)
    keys = list(groups)
    cpu = np.array([k[0] for k in keys])
    mem = np.array([k[1] for k in keys])
    num = np.array([k[2] for k in keys])
    milli = np.array([k[3] for k in keys])
    model = node_model(st, nodes)
    model_ok = np.ones((len(nodes), len(keys)), dtype=bool)
    for j, k in enumerate(keys):
        if k[4] is not None:
            model_ok[:, j] = np.isin(model, [i for i, m in enumerate(st.models) if m in k[4]])
    host_ok = (host.cpu_left[:, None] >= cpu) & (host.mem_left[:, None] >= mem)
    free_count = np.bincount(st.gpu_node, weights=untouched, minlength=len(nodes))
    gpus = np.flatnonzero(free > 0)
    g_node = st.gpu_node[gpus]
    size_ok = np.where(milli >= MILLI, untouched[gpus, None] & (free_count[g_node, None] >= num),
                       free[gpus, None] >= milli)
    size_host = size_ok & host_ok[g_node]
    fits = size_host & model_ok[g_node]
    partly = ~untouched[gpus]
    r = free[gpus]
    label = np.where(fits.any(axis=1), np.where(partly, 5, 6), 4)  # usable / other
    label = np.where(~size_host.any(axis=1), 3, label)  # host
    label = np.where(~size_ok.any(axis=1), 7, label)  # untouched, too few on the node
    label = np.where(partly & (r < median), 2, label)
    label = np.where(partly & (r < smallest), 1, label)
    for code, name in ((1, "sliver_min"), (2, "sliver_median"), (3, "host"), (4, "model"),
                       (5, "usable_partly"), (6, "usable_empty"), (7, "multi")):
        out[name] = float(r[label == code].sum()) / MILLI
    return out
