"""Report of a ``replay -w rec-mix`` batch: one table with the original system's figures beside
ours, and plots (JCT CDF and the headline ratios per mode)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from bench.sim.recmix_explain import baseline_mode, explain_markdown
from bench.sim.replay import ANCHORS
from bench.sim.report import (
    _plt,
    md_table,
    plot_jct_cdf,
    plot_jct_cdfs,
    report_header,
    write_runs_and_summary,
)

METRICS = ["makespan", "jct_mean", "jct_p95", "queue_mean", "alloc_mean", "sm_util_mean",
           "sm_util_backlog", "share_stretch", "oom_events", "work_bound"]
EXCLUSIVE = "kube-exclusive"
SHARED = "kube-shared"
# The original system's claims against the default scheduler (seed README): utilisation
# +50 % to +133 %, JCT -14 %; makespan ratios in ANCHORS.
ORIGINAL_UTIL_GAIN = "1.50-2.33"
ORIGINAL_JCT_RATIO = 0.86


def recmix_table(runs: list) -> pd.DataFrame:
    """Means over seeds per mode and policy, with ratios to kube-exclusive / kube-shared."""
    df = pd.DataFrame([r.row() for r in runs])
    mean = df.groupby(["mode", "policy"])[METRICS].mean().reset_index()
    rows = []
    for _, row in mean.iterrows():
        out = {"mode": row["mode"], "policy": row["policy"], **{m: row[m] for m in METRICS}}
        # forced orders (high-load-bands, ...) are compared with the plain mode's baselines:
        # the stock schedulers as they queue (FIFO)
        base = mean[mean["mode"] == baseline_mode(row["mode"])]
        ex = base[base["policy"] == EXCLUSIVE]
        sh = base[base["policy"] == SHARED]
        if len(ex):
            b = ex.iloc[0]
            out["makespan_vs_exclusive"] = row["makespan"] / b["makespan"]
            out["sm_util_vs_exclusive"] = row["sm_util_mean"] / b["sm_util_mean"]
            out["sm_backlog_vs_exclusive"] = row["sm_util_backlog"] / b["sm_util_backlog"]
            out["jct_vs_exclusive"] = row["jct_mean"] / b["jct_mean"]
        if len(sh):
            out["jct_vs_shared"] = row["jct_mean"] / sh.iloc[0]["jct_mean"]
        anchor = ANCHORS.get((row["mode"], row["policy"].partition("@")[0]))
        out["original_makespan_vs_exclusive"] = anchor if anchor is not None else np.nan
        ours = row["policy"].partition("@")[0] == "sparse"
        out["original_util_vs_exclusive"] = ORIGINAL_UTIL_GAIN if ours else ""
        out["original_jct_vs_exclusive"] = ORIGINAL_JCT_RATIO if ours else np.nan
        rows.append(out)
    return pd.DataFrame(rows)


def _order(mode: str) -> tuple[str, str]:
    """(arrival mode, queue order) of a run's mode label."""
    base = baseline_mode(mode.removesuffix("-longest-first"))
    return base, mode[len(base) + 1:] or "as shipped"


def queue_order_table(table: pd.DataFrame) -> pd.DataFrame:
    """The headline ratios per arrival mode, policy and queue order ("as shipped": sparse by
    predicted-duration band, the stock schedulers FIFO)."""
    cols = ["makespan_vs_exclusive", "sm_util_vs_exclusive", "jct_vs_shared", "jct_mean",
            "jct_p95", "oom_events"]
    out = table[["mode", "policy", *[c for c in cols if c in table]]].copy()
    split = [_order(m) for m in out["mode"]]
    out.insert(0, "queue", [o for _, o in split])
    out.insert(0, "arrivals", [b for b, _ in split])
    out = out.drop(columns="mode")
    return out.sort_values(["arrivals", "policy", "queue"]).reset_index(drop=True)


def plot_queue_orders(runs: list, out: Path) -> list[str]:
    """Per arrival mode, the JCT CDF of every policy under every queue order but the oracle."""
    lines: list[str] = []
    groups: dict[str, dict[str, list]] = {}
    for r in runs:
        if r.mode.endswith("-longest-first"):
            continue
        base, order = _order(r.mode)
        groups.setdefault(base, {}).setdefault(f"{r.policy} ({order})", []).append(r)
    for base, by in sorted(groups.items()):
        if len(by) <= len({k.split(" ")[0] for k in by}):
            continue  # one order per policy: the plain CDF shows it
        curves = [(label, rs, "-" if "as shipped" in label else "--")
                  for label, rs in sorted(by.items())]
        plot_jct_cdf(curves, out / f"jct-cdf-{base}-queue-orders.png",
                     f"rec-mix JCT by queue order, {base}", figsize=(7.5, 4.5), legend_size=7)
        lines += [f"![JCT CDF by queue order, {base}](jct-cdf-{base}-queue-orders.png)", ""]
    return lines


def write_recmix(runs: list, out: Path, command: str = "", note: str = "") -> Path:
    table = recmix_table(runs)
    write_runs_and_summary(runs, table, out)
    seeds = sorted({r.seed for r in runs})
    n_jobs = sorted({r.jobs for r in runs})
    gpus = sorted({r.gpus for r in runs})
    lines = report_header("sparse-bench: replay, workload rec-mix", command)
    lines += [
        f"Seeds {seeds}, {n_jobs} jobs per run, clusters of {gpus} H200 GPUs. Rules: "
        "bench/sim/recmix.py (jobs), bench/sim/recmix_replay.py (booking, OOM, replay), "
        "bench/sim/physics.py (how co-located jobs slow each other; the same for every "
        "policy).", "",
        "Times in seconds, means over seeds. `sm_util_mean`: SM-time the running jobs deliver, "
        "% of the cluster's, time-averaged over the makespan (what the GPUs really did; "
        "`alloc_mean` is what was booked); `sm_util_backlog`: the same, averaged only over the "
        "time jobs were waiting in the queue (when utilisation is up to the scheduler rather "
        "than to the amount of work left). `oom_events`: jobs that ran out of memory because "
        "their real peak exceeded what was booked (each fails, loses its progress and is "
        "retried with a larger booking), per run. `work_bound`: the jobs' booked GPU-seconds "
        "over their GPU-seconds on whole GPUs. `original_makespan_vs_exclusive`: the original "
        f"system's published figure; it also claims SM utilisation x{ORIGINAL_UTIL_GAIN} and "
        f"mean JCT x{ORIGINAL_JCT_RATIO} against the default scheduler.", "",
    ]
    if note:
        lines += [note.strip(), ""]
    orders = queue_order_table(table)
    if orders["queue"].nunique() > 1:
        lines += [
            "## Queue order", "",
            "`queue`: `as shipped` is what each scheduler does: sparse queues by predicted-"
            "duration band (extender/queueorder.py, the rule the job controller uses: declared "
            "steps x the predictor's step time, bands log-spaced over the trace's durations; "
            "critical-first: the critical bands (the two longest of the default 4), longest "
            "first, then the others shortest first; FIFO within a band), the stock schedulers "
            "(kube-exclusive, kube-shared, FGD) FIFO. `fifo`, `bands` (longest band first), "
            "`bands-shortest-first`, `bands-critical-first` force that order on a policy; "
            "their ratios are against the as-shipped (FIFO) kube-exclusive and kube-shared. "
            "`longest-first` is the oracle (true solo times), its ratios against the "
            "oracle-ordered baselines.", "",
            md_table(orders, "{:.3f}"), "", *plot_queue_orders(runs, out),
        ]
    lines += ["## All runs", "", md_table(table, "{:.3f}"), "", *explain_markdown(runs)]
    lines += plot_jct_cdfs(runs, out, "rec-mix JCT")
    plt = _plt()
    if "makespan_vs_exclusive" in table:
        fig, axes = plt.subplots(1, 3, figsize=(14, 5))
        for ax, col, label in ((axes[0], "makespan_vs_exclusive", "makespan / kube-exclusive"),
                               (axes[1], "sm_util_vs_exclusive",
                                "SM-weighted util. / kube-exclusive"),
                               (axes[2], "sm_backlog_vs_exclusive",
                                "same, while jobs wait / kube-exclusive")):
            pivot = table.pivot(index="policy", columns="mode", values=col)
            pivot.plot.bar(ax=ax, rot=20, legend=False)
            ax.set_ylabel(label)
            ax.axhline(1.0, color="gray", lw=0.8)
            ax.grid(alpha=0.3, axis="y")
        pivot = table.pivot(index="policy", columns="mode", values="makespan_vs_exclusive")
        width = 0.5 / max(len(pivot.columns), 1)  # pandas' bar width over the modes
        for _, r in table.dropna(subset=["original_makespan_vs_exclusive"]).iterrows():
            x = (list(pivot.index).index(r["policy"]) - 0.25 + width / 2
                 + width * list(pivot.columns).index(r["mode"]))
            axes[0].plot(x, r["original_makespan_vs_exclusive"], "k_", ms=14, mew=2)
        axes[0].set_title("makespan (black ticks: original system)")
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, title="mode", loc="lower center",
                   ncol=min(len(labels), 5), fontsize=8)
        fig.tight_layout(rect=(0, 0.06 * (1 + (len(labels) - 1) // 5), 1, 1))
        fig.savefig(out / "ratios.png", dpi=120)
        plt.close(fig)
        lines += ["![ratios](ratios.png)", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
