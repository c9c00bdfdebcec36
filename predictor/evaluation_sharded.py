"""Workers of jobs whose tables TorchRec shards, measured on the CPU
(``hack/torchrec-shards.py``), against the shipped job-fields estimate: no sharded row is
fitted on, so every one is unseen."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from predictor import features, gpus
from predictor.estimate import Estimator

DEFAULT_JSONL = Path(__file__).parent / "data" / "sharded-tables-cpu.jsonl"


@dataclass(frozen=True)
class ShardedResult:
    sharding: str
    n: int
    mape: float  # train_mib against each worker's allocator peak
    job_mape: float  # against the fullest worker of each job (what every worker is booked)
    under_share: float
    under_max: float
    res_under_share: float  # gpu_mem_mib against the peak + the default GPU's context
    res_over_median: float


def load(path: Path = DEFAULT_JSONL) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def evaluate_sharded(rows: list[dict], est: Estimator | None = None) -> list[ShardedResult]:
    """One result per sharding type (pooled lookups, and unpooled: a sequence model's
    EmbeddingCollection; trained step by step, or pipelined: TrainPipelineSparseDist) and one
    over all rows (``overall``). A pipelined job's fields are those of the same job trained
    step by step: the job does not say how its loop runs."""
    est = est or Estimator.load()
    ctx = gpus.get(gpus.DEFAULT_GPU).ctx_mib
    kinds = np.array([r["sharding"].replace("_", "-")
                      + (" unpooled" if r["job"].get("unpooledLookups") else "")
                      + (" pipelined" if r.get("pipeline") else "") for r in rows])
    y = np.array([r["peak_mib"] for r in rows])
    preds = [est.predict(features.parse_model(json.dumps(r["job"]))) for r in rows]
    train = np.array([p.train_mib for p in preds])
    booked = np.array([p.gpu_mem_mib for p in preds], dtype=float)
    # a job: the same fields and loop (its workers, and the same job run again)
    jobs = np.array([json.dumps([r["job"], bool(r.get("pipeline"))], sort_keys=True)
                     for r in rows])
    fullest = {j: y[jobs == j].max() for j in set(jobs)}
    out = []
    for kind in [*sorted(set(kinds)), "overall"]:
        m = kinds == kind if kind != "overall" else np.ones(len(rows), dtype=bool)
        rel = train[m] / y[m] - 1
        res = booked[m] / (y[m] + ctx) - 1
        per_job = {j: p for j, p in zip(jobs[m], train[m], strict=True)}
        job_rel = np.array([per_job[j] / fullest[j] - 1 for j in per_job])
        out.append(ShardedResult(kind, int(m.sum()), float(np.mean(np.abs(rel))),
                                 float(np.mean(np.abs(job_rel))),
                                 float(np.mean(rel < 0)), float(max(0.0, -rel.min())),
                                 float(np.mean(res < 0)), float(np.median(res))))
    return out


def format_sharded(results: list[ShardedResult]) -> str:
    head = (f"{'sharding':30s} {'n':>4s} {'MAPE':>6s} {'job MAPE':>8s} {'under':>6s} "
            f"{'largest':>7s} | {'res.under':>9s} {'med.over':>8s}")
    lines = [f"Sharded tables (TorchRec, each worker's CPU allocator peak; job fields, no row "
             f"fitted on): train_mib vs the peak (job MAPE: vs the job's fullest worker); "
             f"reservation vs peak + {gpus.DEFAULT_GPU} context", head, "-" * len(head)]
    lines += [f"{r.sharding:30s} {r.n:4d} {100 * r.mape:5.1f}% {100 * r.job_mape:7.1f}% "
              f"{100 * r.under_share:5.1f}% "
              f"{100 * r.under_max:6.1f}% | {100 * r.res_under_share:8.1f}% "
              f"{100 * r.res_over_median:7.1f}%" for r in results]
    return "\n".join(lines)
