"""The evaluation as people read it: the tables ``sparse-predictor evaluate`` prints (and
writes to ``evaluation.txt``) and the predicted-vs-measured plots."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from predictor import gpus
from predictor.evaluation import GOALS, VIEWS, Evaluation


def format_table(ev: Evaluation) -> str:
    lines: list[str] = []
    for level, results in ev.memory.items():
        head = (f"{'held-out family':16s} {'n':>4s} {'R2':>7s} {'MAPE':>6s} {'under':>6s} | "
                f"{'res.under':>9s} {'largest':>7s} {'med.over':>8s} {'state/act':>9s}")
        lines += [f"Memory, {level} level: train_mib vs the CPU allocator peak; reservation "
                  f"(state and activations scaled, + replayed allocator slack where the spec "
                  f"has it, + {gpus.DEFAULT_GPU} context) vs peak + context (leave one family "
                  "out)", head, "-" * len(head)]
        lines += [f"{r.family:16s} {r.n:4d} {r.mem_r2:7.3f} {100 * r.mem_mape:5.1f}% "
                  f"{100 * r.mem_under_raw:5.1f}% | {100 * r.res_under_share:8.1f}% "
                  f"{100 * r.res_under_max:6.1f}% {100 * r.res_over_median:7.1f}% "
                  f"{r.margin:>9s}" for r in results]
        g = GOALS[VIEWS[level][0]]
        goal = f"goals: R2 >= {g['r2']}, MAPE <= {100 * g['mape']:.0f}%"
        if "under" in g:
            goal += f", largest under-estimate of train_mib <= {100 * g['under']:.0f}%"
        lines += [goal + " (every family)", ""]
    for level, per_gpu in ev.device.items():
        for gpu_model, results in per_gpu.items():
            head = (f"{'held-out family':16s} {'n':>4s} {'under-reserved':>14s} "
                    f"{'largest under':>13s} {'median over':>11s} {'mean over':>9s}")
            lines += [f"Memory as reserved (gpu_mem_mib), {level} level, vs NVML-measured "
                      f"process memory on {gpu_model}", head, "-" * len(head)]
            lines += [f"{r.family:16s} {r.n:4d} {100 * r.under_share:13.1f}% "
                      f"{100 * r.under_max:12.1f}% {100 * r.over_median:10.1f}% "
                      f"{100 * r.over_mean:8.1f}%" for r in results]
            rg = GOALS["reservation"]
            lines += [f"goals: <= {100 * rg['under_share']:.0f}% of jobs under-reserved, median "
                      f"over-reservation <= {100 * rg['over_median']:.0f}%", ""]
    for gpu_model, results in ev.margin_tradeoff.items():
        head = (f"{'margin':20s} {'per family':>11s} {'under':>6s} {'worst family':>12s} "
                f"{'median over':>11s}")
        lines += [f"Replayed reservation on {gpu_model}: the margin against rows under and "
                  "median over (held-out families)", head, "-" * len(head)]
        lines += [f"{r.setting:20s} {r.margins:>11s} {100 * r.under_share:5.1f}% "
                  f"{100 * r.under_worst:11.1f}% {100 * r.over_median:10.1f}%" for r in results]
        lines.append("")
    for gpu_model, results in ev.allocator.items():
        head = (f"{'held-out family':16s} {'n':>4s} {'res. MAPE':>9s} {'under':>6s} "
                f"{'largest under':>13s} {'alloc. MAPE':>11s}")
        lines += [f"Caching-allocator replay of the traced step (+ the {gpu_model} workspace "
                  "constant of the other families) vs torch.cuda.max_memory_reserved / "
                  f"max_memory_allocated on {gpu_model}", head, "-" * len(head)]
        lines += [f"{r.family:16s} {r.n:4d} {100 * r.mape:8.1f}% {100 * r.under_share:5.1f}% "
                  f"{100 * r.under_max:12.1f}% {100 * r.mape_alloc:10.1f}%" for r in results]
        lines.append("")
    if ev.compute:
        label = ("SM activity measured with NVML on the GPU (milli-GPU = 10 x %)"
                 if ev.compute_label.startswith("gpu") else
                 "CPU FLOP-roofline PROXY (no GPU-measured rows; not GPU utilisation)")
        head = f"{'held-out family':16s} {'n':>4s} {'cmp R2':>7s} {'cmp MAE':>8s}"
        lines += [f"Compute: {label}", head, "-" * len(head)]
        lines += [f"{r.family:16s} {r.n:4d} {r.r2:7.3f} {r.mae:8.1f}" for r in ev.compute]
        lines.append(f"goal: compute R2 >= {GOALS['cmp_r2']} on GPU-measured labels")
    return "\n".join(lines)


def _by_family(plt, ax, y: np.ndarray, p: np.ndarray, fam: np.ndarray) -> tuple[float, float]:
    """Measured vs predicted, one colour per family, and the y = x line; the axes' range."""
    cmap = plt.get_cmap("tab20")
    for k, f in enumerate(sorted(set(fam))):
        m = fam == f
        ax.scatter(y[m], p[m], s=10, alpha=0.75, color=cmap(k % 20), label=f)
    lo, hi = float(min(y.min(), p.min())) * 0.8, float(max(y.max(), p.max())) * 1.25
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
    return lo, hi


def plot(ev: Evaluation, out_dir: Path) -> list[Path]:
    """One predicted-vs-measured log-log plot per input level (PNG), coloured by family."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for level, (y, p, fam) in ev.points.items():
        fig, ax = plt.subplots(figsize=(7, 6))
        lo, hi = _by_family(plt, ax, y, p, fam)
        ax.plot([lo, hi], [lo * 0.95, hi * 0.95], "k:", lw=0.6)
        ax.plot([lo, hi], [lo * 1.05, hi * 1.05], "k:", lw=0.6)
        overall = ev.memory[level][-1]
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi),
               xlabel="measured training-state peak (MiB, CPU allocator)",
               ylabel="predicted train_mib (MiB, family held out)",
               title=f"{level} level: R² {overall.mem_r2:.3f}, MAPE "
                     f"{100 * overall.mem_mape:.1f}% (leave one family out)")
        ax.legend(fontsize=7, ncol=2, loc="upper left")
        fig.tight_layout()
        path = out_dir / f"memory-{level.replace('+', '-')}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    for gpu_model, (y, p, fam) in ev.allocator_points.items():
        fig, ax = plt.subplots(figsize=(7, 6))
        lo, hi = _by_family(plt, ax, y, p, fam)
        overall = ev.allocator[gpu_model][-1]
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi),
               xlabel=f"measured max_memory_reserved on {gpu_model} (MiB)",
               ylabel="caching-allocator replay + constant (MiB, family held out)",
               title=f"reserved peak on {gpu_model}: MAPE {100 * overall.mape:.1f}%")
        ax.legend(fontsize=7, loc="upper left")
        fig.tight_layout()
        path = out_dir / f"reserved-{gpu_model}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths
