"""The FGD protocol (Weng et al., ATC '23; ``hkust-adsl/kubernetes-scheduler-simulator``).

Pods sorted by name and shuffled by the seed; resampled to ``tune`` x cluster GPU capacity
(clones drawn with replacement and appended, or random pods removed); one scheduling attempt
per pod, no departures, no retries. Node names get a seeded ``%04d-`` prefix, so the
smallest-name tie-break is a seed-dependent node priority. Random streams are NumPy's, not Go's:
the per-seed runs differ from the authors', their distribution over seeds should not.

Metrics after every pod: GPU allocation ratio, fragmentation amount and rate (FGD measure with
the workload's typical tasks), all against the arrived workload (cumulative GPU request of all
pods submitted so far, failed ones included, % of capacity), bucketed to integers 0..130 as in
the authors' ``analysis_*_discrete.csv``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from bench.sim import losses
from bench.sim.bounds import sliver_bound
from bench.sim.cluster import SimCluster
from bench.sim.queueing import placement_policy
from bench.sim.trace import (
    NODE_LIST,
    load_nodes,
    load_pods,
    node_names,
    parse_spec,
    workload_name,
    workload_path,
)
from extender.placement.policies.fgd import FragModel, TypicalTasks

BUCKETS = 131  # arrived workload 0..130 %
POPULARITY = 0.95


def typical_tasks(pods: pd.DataFrame, threshold: float = POPULARITY) -> TypicalTasks:
    """The FGD target workload: pod specs (cpu, per-GPU milli, num GPUs, model list) by
    popularity, most popular first (equal counts: larger spec first), kept until they cover
    ``threshold`` of the pods; CPU-only pods included, every pod weighs 1."""
    milli = np.where(pods["num_gpu"] > 0, pods["gpu_milli"], 0)
    num = np.where(pods["gpu_milli"] > 0, pods["num_gpu"], 0)
    keys = Counter(zip(pods["cpu_milli"].tolist(), milli.tolist(), num.tolist(),
                       pods["gpu_spec"].tolist(), strict=True))
    ranked = sorted(keys.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    rows, covered, total = [], 0, len(pods)
    for (cpu, m, k, spec), count in ranked:
        rows.append((cpu, m, k, parse_spec(spec), float(count)))
        covered += count
        if covered >= threshold * total:
            break
    return TypicalTasks.of(rows)


def prepare(pods: pd.DataFrame, seed: int, tune: float, capacity_milli: int) -> pd.DataFrame:
    """Shuffled and resampled submission order."""
    rng = np.random.default_rng(seed)
    base = pods.sort_values("name", kind="stable").reset_index(drop=True)
    base = base.iloc[rng.permutation(len(base))].reset_index(drop=True)
    request = (base["num_gpu"] * base["gpu_milli"]).to_numpy()
    total = int(request.sum())
    target = tune * capacity_milli
    if tune <= 0:
        return base
    if total < target:
        clones = []
        milli = base["gpu_milli"].to_numpy()
        while True:
            i = int(rng.integers(len(base)))
            if total + milli[i] > target:  # upstream quirk: per-GPU milli, not num x milli
                break
            clones.append(i)
            total += int(milli[i])
        extra = base.iloc[clones].copy()
        extra["name"] = [f"{n}-clone-{j}" for j, n in enumerate(extra["name"])]
        return pd.concat([base, extra], ignore_index=True)
    keep = np.ones(len(base), dtype=bool)
    while total > target:
        i = int(rng.integers(len(base)))
        if keep[i]:
            keep[i] = False
            total -= int(request[i])
    return base[keep].reset_index(drop=True)


@dataclass
class FgdRun:
    workload: str
    policy: str
    seed: int
    tune: float
    pods: int
    failed: int
    total_gpus: int
    seconds: float
    alloc: np.ndarray  # % allocated, per arrived bucket
    frag: np.ndarray  # fragmentation amount, % of cluster GPU
    frag_rate: np.ndarray  # fragmentation / idle GPU, %
    extra: dict = field(default_factory=dict)

    @property
    def unallocated_gpus_100(self) -> float:
        return self.total_gpus * (100.0 - self.alloc[100]) / 100.0

    def to_json(self) -> dict:
        out = {k: getattr(self, k) for k in ("workload", "policy", "seed", "tune", "pods",
                                              "failed", "total_gpus", "seconds", "extra")}
        for k in ("alloc", "frag", "frag_rate"):
            out[k] = [None if np.isnan(v) else float(v) for v in getattr(self, k)]
        return out

    @classmethod
    def from_json(cls, data: dict) -> FgdRun:
        data = dict(data)
        for k in ("alloc", "frag", "frag_rate"):
            data[k] = np.array([np.nan if v is None else v for v in data[k]], dtype=np.float64)
        return cls(**data)

    def row(self) -> dict:
        return {
            "workload": self.workload, "policy": self.policy, "seed": self.seed,
            "tune": self.tune, "pods": self.pods, "failed": self.failed,
            "total_gpus": self.total_gpus, "seconds": round(self.seconds, 2),
            "alloc_100": self.alloc[100], "unalloc_gpus_100": self.unallocated_gpus_100,
            "frag_100": self.frag[100], "frag_rate_100": self.frag_rate[100],
        }


def bucketize(arrived_pct: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Mean of ``values`` per integer arrived bucket; empty buckets take their +-1 neighbours."""
    b = np.rint(arrived_pct).astype(np.int64)
    keep = (b >= 0) & (b < BUCKETS)
    sums = np.bincount(b[keep], weights=values[keep], minlength=BUCKETS)
    counts = np.bincount(b[keep], minlength=BUCKETS)
    out = np.full(BUCKETS, np.nan)
    have = counts > 0
    out[have] = sums[have] / counts[have]
    for i in np.flatnonzero(~have):
        lo, hi = max(i - 1, 0), min(i + 2, BUCKETS)
        c = counts[lo:hi].sum()
        if c:
            out[i] = sums[lo:hi].sum() / c
    return out


def run_fgd(
    workload: str,
    policy: str,
    seed: int,
    *,
    tune: float = 1.3,
    nodes_path: str | None = None,
    policy_kwargs: dict | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> FgdRun:
    t0 = time.perf_counter()
    nodes = load_nodes(nodes_path or NODE_LIST)
    pods = load_pods(workload_path(workload))
    tasks = typical_tasks(pods)
    pol = placement_policy(policy, seed, tasks, **(policy_kwargs or {}))
    sim = SimCluster(nodes, node_names(nodes, seed), pol)
    capacity = sim.total_milli
    order = prepare(pods, seed, tune, capacity)
    bound = sliver_bound(order, capacity)
    frag_model = FragModel(tasks)
    node_frag = frag_model.node_frag(sim.state)
    frag_total = float(node_frag.sum())
    n = len(order)
    arrived = np.zeros(n)
    alloc = np.zeros(n)
    frag = np.zeros(n)
    cols = [order[c].to_numpy() for c in ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli")]
    specs = order["gpu_spec"].to_numpy()
    names = order["name"].to_numpy()
    arrived_milli = failed = 0
    # GPU request of failed pods up to arrived = 100 %, by pod shape
    lost = {"share": 0, "one": 0, "multi": 0, "cpu_only_pods": 0}
    failed_pods: list = []  # GPU pods that failed before arrived = 100 %
    breakdown = None  # where the free capacity sits when arrived reaches 100 %
    window = losses.FailWindow()  # from the first failed GPU pod up to arrived = 100 %
    # the free capacity when the first whole-GPU pod fails and at 100 %, against the GPU pods
    # arriving from that failure up to 100 % (losses.snapshot)
    request = (order["num_gpu"] * order["gpu_milli"]).to_numpy(dtype=np.int64)
    last = int(np.searchsorted(np.cumsum(request), capacity, side="right"))
    coming: list | None = None
    snaps: dict[str, float] = {}
    for i in range(n):
        d = sim.demand(names[i], int(cols[0][i]), int(cols[1][i]), int(cols[2][i]),
                       int(cols[3][i]), specs[i])
        if breakdown is None and arrived_milli + d.gpu_request > capacity:
            breakdown = losses.breakdown(sim, failed_pods)
            snaps.update(_snapshot("end_", sim, coming))
        before = arrived_milli
        arrived_milli += d.gpu_request
        placed = sim.schedule(d)
        if arrived_milli <= capacity:
            window.record(before, d, placed is not None, capacity)
        if placed is None:
            failed += 1
            if arrived_milli <= capacity:
                shape = ("cpu_only_pods" if not d.gpu_request else "share"
                         if d.gpu_milli < 1000 else "one" if d.num_gpu == 1 else "multi")
                lost[shape] += 1 if shape == "cpu_only_pods" else d.gpu_request
                if d.gpu_request:
                    failed_pods.append(d)
                if coming is None and d.gpu_milli >= 1000:
                    coming = [sim.demand(names[j], int(cols[0][j]), int(cols[1][j]),
                                         int(cols[2][j]), int(cols[3][j]), specs[j])
                              for j in range(i, last)]
                    snaps.update(_snapshot("fail_", sim, coming, d))
                    snaps["whole_fail_pct"] = 100.0 * before / capacity
        else:
            new = float(frag_model.node_frag(sim.state, np.array([placed.node]))[0])
            frag_total += new - node_frag[placed.node]
            node_frag[placed.node] = new
        arrived[i], alloc[i], frag[i] = arrived_milli, sim.allocated_milli, frag_total
        if progress is not None and (i % 500 == 0 or i == n - 1):
            progress(i + 1, n)
    pct = arrived / capacity * 100.0
    idle = capacity - alloc
    return FgdRun(
        workload=workload_name(workload), policy=policy, seed=seed, tune=tune, pods=n,
        failed=failed, total_gpus=capacity // 1000, seconds=time.perf_counter() - t0,
        alloc=bucketize(pct, alloc / capacity * 100.0),
        frag=bucketize(pct, frag / capacity * 100.0),
        frag_rate=bucketize(pct, np.where(idle > 0, frag / np.maximum(idle, 1) * 100.0, 0.0)),
        extra={"failed_gpu_milli_to_100": lost, "unallocated_lower_bound_gpus": bound,
               "losses": {**(breakdown or losses.breakdown(sim, failed_pods)),
                          **window.summary(),
                          **(snaps or _snapshot("end_", sim, coming))}},
    )


def _snapshot(prefix: str, sim: SimCluster, coming: list | None, failing=None
              ) -> dict[str, float]:
    """``losses.snapshot`` with its keys prefixed; no whole-GPU pod failed: nothing to say."""
    if coming is None:
        return {}
    return {prefix + k: v for k, v in losses.snapshot(sim, coming, failing).items()}
