"""Workload ``rec-mix``: recommendation jobs next to compute-heavy ones, as the original system
evaluated them, built from measured data.

Each job is one row of the predictor's GPU-measured dataset (``predictor.dataset``; families
and their model structures come from the data, none is listed here) paired with one GPU pod of
the Alibaba trace:

* from the dataset row (measured alone on one GPU): SM activity, GPU utilisation (time with a
  kernel resident), DRAM-bandwidth utilisation, the process's peak GPU memory (NVML, CUDA
  context included) and the step time; the model structure (``spec_json``) the predictor reads;
* from the trace pod: duration (deletion - scheduled time, clipped to [60 s, p95]; the job
  declares it as its training length, ``duration / step_s`` steps), CPU and
  host-memory requests, creation time (arrival order in continuous mode) and the GPU fraction
  its user declared (``gpu_milli``). Recommendation jobs draw from the trace's GPU-sharing
  pods, the others from its whole-GPU pods (what such jobs asked for in production);
* demands: what sparse books is the predictor's estimate from the structure (milli-GPU from
  predicted SM activity, memory from the memory model); what users write today is a whole GPU
  (kube-exclusive) or, for plain GPU sharing, the trace pod's declared GPU fraction (1000 =
  a whole GPU) and a padded memory figure: the peak they saw, times a padding factor drawn
  per job (log-normal, median ``pad``), rounded up to whole GiB. A padding below 1 is an
  under-declaration: the job runs out of memory.

The family mix is ``rec=<share>`` (spread evenly over the families whose job class is
``recommendation``, the rest evenly over the others) or explicit weights per family
(``dlrm=3,deepfm=1,bert=1``), parsed by :func:`parse_mix`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from bench.sim.trace import load_pods, with_times, workload_path

REC_CLASS = "recommendation"
DEFAULT_MIX = "rec=0.7"
GPU_MODEL = "H200"  # the GPU the dataset was measured on
GPU_MEM_MIB = 143_771  # H200, as NVML reports it
MIB = 2**20


@dataclass(frozen=True)
class JobTable:
    """One row per job, columns as documented in the module docstring."""

    jobs: pd.DataFrame
    mix: dict[str, float]

    def __len__(self) -> int:
        return len(self.jobs)


@lru_cache(maxsize=2)
def measured_profiles(holdout_only: bool = False) -> pd.DataFrame:
    """GPU-measured rows with a complete solo profile and the predictor's estimate for each."""
    from predictor import dataset, features
    from predictor.estimate import Estimator

    _, gdf = dataset.load_datasets(dataset.DEFAULT_CSV, dataset.DEFAULT_GPU_CSV)
    if gdf is None:
        raise RuntimeError("the predictor has no GPU-measured dataset; rec-mix needs one")
    need = ["gpu_sm_active_pct", "gpu_util_pct", "gpu_steps_per_s", "gpu_nvml_used_bytes"]
    df = gdf[(gdf["label_source"] == "gpu")].dropna(subset=need).copy()
    df = df[df["gpu_steps_per_s"] > 0]
    if holdout_only:  # rows the shipped predictor did not train on (its manifest's holdout)
        df = df[df["row_id"] % 10 == 0]
    est = Estimator.load()
    pred = [est.predict(features.parse_model(s)) for s in df["spec_json"]]
    out = pd.DataFrame({
        "row_id": df["row_id"].to_numpy(),
        "family": df["family"].to_numpy(),
        "job_class": df["job_class"].to_numpy(),
        "sm": np.clip(df["gpu_sm_active_pct"].to_numpy(float) / 100.0, 0.005, 1.0),
        "util": np.clip(df["gpu_util_pct"].to_numpy(float) / 100.0, 0.005, 1.0),
        "dram": np.clip(df["gpu_dram_bw_pct"].fillna(0).to_numpy(float) / 100.0, 0.0, 1.0),
        "mem_real_mib": np.ceil(df["gpu_nvml_used_bytes"].to_numpy(float) / MIB).astype(int),
        "step_s": 1.0 / df["gpu_steps_per_s"].to_numpy(float),
        "pred_milli": [p.gpu_milli for p in pred],
        "pred_mem_mib": [p.gpu_mem_mib for p in pred],
        "pred_step_s": [p.step_s for p in pred],  # the predictor's step time (structure only)
    })
    out["util"] = np.maximum(out["util"], out["sm"])  # a busy SM implies a resident kernel
    return out.reset_index(drop=True)


def parse_mix(text: str, families: dict[str, str]) -> dict[str, float]:
    """Family -> probability. ``families`` maps each family in the data to its job class."""
    text = (text or DEFAULT_MIX).strip()
    weights: dict[str, float] = {}
    rec = [f for f, c in sorted(families.items()) if c == REC_CLASS]
    other = [f for f, c in sorted(families.items()) if c != REC_CLASS]
    for part in text.split(","):
        if not part.strip():
            continue
        key, _, value = part.partition("=")
        key = key.strip().lower()
        try:
            w = float(value)
        except ValueError:
            raise ValueError(f"mix entry {part!r}: expected NAME=NUMBER") from None
        if w < 0:
            raise ValueError(f"mix entry {part!r}: weight must be >= 0")
        if key == "rec":
            if not 0 <= w <= 1:
                raise ValueError("rec=<share> needs a share in [0, 1]")
            for f in rec:
                weights[f] = w / max(len(rec), 1)
            for f in other:
                weights.setdefault(f, (1 - w) / max(len(other), 1))
        elif key in families:
            weights[key] = w
        else:
            known = ", ".join(sorted(families))
            raise ValueError(f"mix entry {part!r}: unknown family (known: {known}, or rec=)")
    total = sum(weights.values())
    if total <= 0:
        raise ValueError(f"mix {text!r} gives every family weight 0")
    return {f: w / total for f, w in sorted(weights.items()) if w > 0}


def trace_pods(workload: str = "default") -> pd.DataFrame:
    """Single-GPU pods of the trace with a duration (clipped to [60 s, p95])."""
    pods = with_times(load_pods(workload_path(workload)))  # a list without times borrows them
    gpu = pods[(pods["num_gpu"] == 1) & (pods["gpu_milli"] > 0)].copy()
    start = gpu["scheduled_time"].where(gpu["scheduled_time"].notna(), gpu["creation_time"])
    dur = (gpu["deletion_time"] - start).to_numpy(dtype=np.float64)
    ok = np.isfinite(dur) & np.isfinite(gpu["creation_time"].to_numpy(dtype=np.float64))
    gpu = gpu[ok]
    dur = dur[ok]
    gpu["duration"] = np.clip(dur, 60.0, max(60.0, float(np.percentile(dur, 95))))
    return gpu.reset_index(drop=True)


@lru_cache(maxsize=4)
def duration_range(workload: str = "default") -> tuple[float, float]:
    """Shortest and longest job duration the trace gives (seconds, after clipping)."""
    dur = trace_pods(workload)["duration"]
    return float(dur.min()), float(dur.max())


def build_jobs(
    n_jobs: int, rng: np.random.Generator, *, mix: str = DEFAULT_MIX, pad: float = 1.5,
    pad_spread: float = 0.3, workload: str = "default", holdout_only: bool = False,
) -> JobTable:
    """Draw ``n_jobs`` jobs: a family by the mix, a measured row of it, a trace pod."""
    prof = measured_profiles(holdout_only)
    families = dict(zip(prof["family"], prof["job_class"], strict=True))
    weights = parse_mix(mix, families)
    names = list(weights)
    fam = rng.choice(names, size=n_jobs, p=[weights[f] for f in names])
    by_family = {f: np.flatnonzero(prof["family"].to_numpy() == f) for f in names}
    rows = np.array([by_family[f][rng.integers(len(by_family[f]))] for f in fam])
    jobs = prof.iloc[rows].reset_index(drop=True)
    pods = trace_pods(workload)
    is_share = (pods["gpu_milli"] < 1000).to_numpy()
    pools = {True: np.flatnonzero(is_share), False: np.flatnonzero(~is_share)}
    rec = (jobs["job_class"] == REC_CLASS).to_numpy()
    pick = np.empty(n_jobs, dtype=np.int64)
    for want in (True, False):
        pool = pools[want] if len(pools[want]) else np.arange(len(pods))
        sel = np.flatnonzero(rec == want)
        pick[sel] = pool[rng.integers(len(pool), size=len(sel))]
    pod = pods.iloc[pick].reset_index(drop=True)
    jobs["declared_milli"] = pod["gpu_milli"].to_numpy()
    jobs["duration"] = pod["duration"].to_numpy()
    jobs["cpu_milli"] = pod["cpu_milli"].to_numpy()
    jobs["host_mem_mib"] = pod["memory_mib"].to_numpy()
    jobs["created"] = pod["creation_time"].to_numpy(dtype=np.float64)
    padding = np.exp(rng.normal(math.log(pad), pad_spread, n_jobs)) if pad_spread else np.full(
        n_jobs, pad)
    declared = np.ceil(jobs["mem_real_mib"].to_numpy() * padding / 1024.0) * 1024
    jobs["declared_mem_mib"] = np.minimum(declared, GPU_MEM_MIB).astype(int)
    order = np.argsort(jobs["created"].to_numpy(), kind="stable")
    return JobTable(jobs.iloc[order].reset_index(drop=True), weights)
