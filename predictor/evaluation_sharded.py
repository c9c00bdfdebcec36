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


@dataclass(frozen=True)
class ShardedPoints:
    """Every measured worker: its sharding type, its peak, the estimate and the booking of
    its job's fields, and which job it belongs to (the same fields and loop: its workers,
    and the same job run again)."""

    kinds: np.ndarray
    peak_mib: np.ndarray
    train_mib: np.ndarray
    booked_mib: np.ndarray
    jobs: np.ndarray


def points(rows: list[dict], est: Estimator | None = None) -> ShardedPoints:
    """The rows predicted once, for the table and the plot."""
    est = est or Estimator.load()
    preds = [est.predict(features.parse_model(json.dumps(r["job"]))) for r in rows]
    return ShardedPoints(
        kinds=np.array([r["sharding"].replace("_", "-")
                        + (" unpooled" if r["job"].get("unpooledLookups") else "")
                        + (" pipelined" if r.get("pipeline") else "") for r in rows]),
        peak_mib=np.array([r["peak_mib"] for r in rows]),
        train_mib=np.array([p.train_mib for p in preds]),
        booked_mib=np.array([p.gpu_mem_mib for p in preds], dtype=float),
        jobs=np.array([json.dumps([r["job"], bool(r.get("pipeline"))], sort_keys=True)
                       for r in rows]))


def evaluate_sharded(pts: ShardedPoints) -> list[ShardedResult]:
    """One result per sharding type (pooled lookups, and unpooled: a sequence model's
    EmbeddingCollection; trained step by step, or pipelined: TrainPipelineSparseDist) and one
    over all rows (``overall``). A pipelined job's fields are those of the same job trained
    step by step: the job does not say how its loop runs."""
    ctx = gpus.get(gpus.DEFAULT_GPU).ctx_mib
    kinds, y, train, booked, jobs = (pts.kinds, pts.peak_mib, pts.train_mib, pts.booked_mib,
                                     pts.jobs)
    fullest = {j: y[jobs == j].max() for j in set(jobs)}
    out = []
    for kind in [*sorted(set(kinds)), "overall"]:
        m = kinds == kind if kind != "overall" else np.ones(len(kinds), dtype=bool)
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


def plot_sharded(pts: ShardedPoints, out_dir: Path) -> Path:
    """Each worker's measured peak against the estimate and the booking less the context
    (log-log, one colour per sharding type); ``sharded-tables.png`` in ``out_dir``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ctx = gpus.get(gpus.DEFAULT_GPU).ctx_mib
    kinds, y, train, booked = pts.kinds, pts.peak_mib, pts.train_mib, pts.booked_mib
    fig, axes = plt.subplots(1, 2, figsize=(13, 6), sharey=True)
    cmap = plt.get_cmap("tab10")
    lo = float(min(y.min(), train.min())) * 0.8
    hi = float(max(y.max(), train.max(), (booked - ctx).max())) * 1.25
    for ax, pred, what in ((axes[0], train, "estimate (train_mib)"),
                           (axes[1], booked - ctx, f"booking less the {gpus.DEFAULT_GPU} context")):
        for k, kind in enumerate(sorted(set(kinds))):
            m = kinds == kind
            ax.scatter(y[m], pred[m], s=12, alpha=0.75, color=cmap(k % 10), label=kind)
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi),
               xlabel="measured peak of one worker (MiB, CPU allocator)", ylabel=f"{what} (MiB)",
               title=f"sharded tables: {what}")
    axes[0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "sharded-tables.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
