"""What one locality replay (``bench/sim/locality.py``) reports: ``LocalityRun``, built from the
replay's per-job arrays (``RunRecord``) by ``run_result``; the report (``locality_report``) and
the sweeps (``locality_sweep``) read it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from bench.sim.queueing import JctRun


@dataclass
class LocalityRun(JctRun):
    workload: str
    scenario: str
    mode: str
    locality: bool
    seed: int
    jobs: int
    gpus: int
    makespan: float
    jct_mean: float
    jct_p95: float
    queue_mean: float
    fetch_share: float  # of the recommendation jobs' run time spent fetching embeddings
    rec_jct_mean: float
    placed_cache_hit: float  # recommendation jobs starting where their tables were cached
    placed_store_rack: float
    store_rack_rec_work: float  # share of the store racks' GPU work that reads embeddings
    link_stretch: float  # time-weighted stretch of the most loaded link (1 = no contention)
    hit_ratio: float  # share of all fetched rows the node caches served, over the run
    warmup_miss: float  # share of the fetched rows missed because a cache was still filling
    seconds: float
    # recommendation jobs placed with more than one node to choose from (the term can act)
    placed_with_choice: float = float("nan")
    # recommendation jobs that waited for a warm node at least once (delay scheduling)
    delayed: float = float("nan")
    # the hit ratio if every reader had a warm node cache for its tables alone (alone_hit)
    hit_ceiling: float = float("nan")
    # tables in use on a reader's node when it starts, itself included (mean over readers)
    tables_on_node: float = float("nan")
    # choices of node where the term's node was a shadow oracle's (``run_locality(shadow=)``)
    oracle_agreement: float = float("nan")
    # per kind of link, the largest share of the run one such link spent at capacity
    saturated: dict = field(default_factory=dict)
    jct: list = field(default_factory=list)

    def row(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "jct"}


@dataclass
class RunRecord:
    """Per job (arrays over the trace's jobs) what the replay recorded."""

    workload: str
    scenario: str
    mode: str
    locality: bool
    seed: int
    gpus: int
    arrive: np.ndarray
    started: np.ndarray
    done: np.ndarray
    request: np.ndarray  # GPUs (fractions for shares)
    reads: np.ndarray  # reads embeddings
    steps: np.ndarray
    step_bytes: np.ndarray  # distinct rows' bytes one step fetches, all its tables
    fetched: np.ndarray  # seconds spent fetching
    missed: np.ndarray  # bytes the node caches missed
    cold: np.ndarray  # at its start: hit ratio lost to its caches' filling
    cache_hit: np.ndarray  # started where its tables were cached
    in_rack: np.ndarray  # started in a rack of the store's shards
    choice: np.ndarray  # placed with more than one fitting node to choose from
    link_stretch: float
    t0: float  # perf_counter at the run's start


def run_result(r: RunRecord) -> LocalityRun:
    jct = r.done - r.arrive
    rec = r.reads & ~np.isnan(r.done)
    run_time = r.done - r.started
    gpu_s = np.nan_to_num(r.request * run_time)
    total_bytes = (r.step_bytes * r.steps)[rec].sum()
    has = bool(rec.any())
    return LocalityRun(
        workload=r.workload, scenario=r.scenario, mode=r.mode, locality=r.locality,
        seed=r.seed, jobs=len(r.arrive), gpus=r.gpus,
        makespan=float(np.nanmax(r.done) - r.arrive.min()),
        jct_mean=float(np.nanmean(jct)), jct_p95=float(np.nanpercentile(jct, 95)),
        queue_mean=float(np.nanmean(r.started - r.arrive)),
        fetch_share=float(r.fetched[rec].sum() / run_time[rec].sum()) if has else 0.0,
        rec_jct_mean=float(np.nanmean(jct[rec])) if has else float("nan"),
        placed_cache_hit=float(r.cache_hit[rec].mean()) if has else float("nan"),
        placed_store_rack=float(r.in_rack[rec].mean()) if has else float("nan"),
        store_rack_rec_work=float((gpu_s * r.in_rack * rec).sum()
                                  / max((gpu_s * r.in_rack).sum(), 1e-9)),
        link_stretch=r.link_stretch,
        hit_ratio=(1.0 - float(r.missed[rec].sum() / max(total_bytes, 1e-9))
                   if has else float("nan")),
        warmup_miss=(float((r.cold * r.step_bytes * r.steps)[rec].sum() / max(total_bytes, 1e-9))
                     if has else float("nan")),
        seconds=time.perf_counter() - r.t0, jct=[round(float(x), 1) for x in np.sort(jct)],
        placed_with_choice=float(r.choice[rec].mean()) if has else float("nan"))
