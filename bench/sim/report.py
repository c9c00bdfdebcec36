"""Markdown report, PNG plots, CSV/JSON beside them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from bench.sim import bounds, expected, losses, replay_explain
from bench.sim.queueing import base_mode


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def md_table(df: pd.DataFrame, floatfmt: str = "{:.2f}") -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for _, row in df.iterrows():
        cells = []
        for c in cols:
            v = row[c]
            if isinstance(v, float | np.floating):
                cells.append("" if np.isnan(v) else floatfmt.format(v))
            else:
                cells.append(str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report_header(title: str, command: str = "") -> list[str]:
    """A report's first lines: its title and, when given, the command that made it."""
    lines = [f"# {title}", ""]
    if command:
        lines += [f"Command: `{command}`", ""]
    return lines


def write_table(table: pd.DataFrame, out: Path, stem: str) -> None:
    """A report's table as ``<stem>.csv`` and ``<stem>.json`` (one record per line of the
    CSV): the one writer of both."""
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / f"{stem}.csv", index=False)
    (out / f"{stem}.json").write_text(table.to_json(orient="records", indent=1))


def write_runs_and_summary(runs: list, table: pd.DataFrame, out: Path) -> None:
    """``runs.csv`` (one row per run) and the table as ``summary.csv`` / ``summary.json``."""
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([r.row() for r in runs]).to_csv(out / "runs.csv", index=False)
    write_table(table, out, "summary")


def plot_jct_cdfs(runs: list, out: Path, title: str = "JCT") -> list[str]:
    """One JCT CDF per mode (every policy a line, all seeds pooled) as ``jct-cdf-<mode>.png``;
    the report lines that show them."""
    lines: list[str] = []
    for mode in sorted({r.mode for r in runs}):
        curves = [(policy, [r for r in runs if r.mode == mode and r.policy == policy], "-")
                  for policy in sorted({r.policy for r in runs if r.mode == mode})]
        plot_jct_cdf(curves, out / f"jct-cdf-{mode}.png", f"{title}, {mode}")
        lines += [f"![JCT CDF {mode}](jct-cdf-{mode}.png)", ""]
    return lines


def plot_jct_cdf(curves: list[tuple[str, list, str]], path: Path, title: str,
                 figsize: tuple[float, float] = (7, 4.2), legend_size: int = 8) -> None:
    """One figure of JCT CDFs: a (label, runs pooled, line style) per curve, hours on a log axis."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=figsize)
    for label, rs, style in curves:
        jct = np.sort(np.concatenate([r.jct for r in rs]))
        jct = jct[np.isfinite(jct)]
        ax.plot(jct / 3600.0, np.arange(1, len(jct) + 1) / max(len(jct), 1), style, label=label)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (h)")
    ax.set_ylabel("CDF")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_size)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def validation(runs: list) -> pd.DataFrame:
    """Ours vs the authors at arrived = 100 %: our mean over the seeds we ran, theirs over
    their ten seeds 42..51 (random streams differ, so seed-by-seed pairs mean nothing)."""
    rows = []
    keys = sorted({(r.workload, r.policy) for r in runs})
    for workload, policy in keys:
        mine = [r for r in runs if r.workload == workload and r.policy == policy]
        seeds = sorted(r.seed for r in mine)
        ours = float(np.mean([r.alloc[100] for r in mine]))
        total = mine[0].total_gpus
        theirs_c = expected.curves(workload, policy)
        theirs = float(theirs_c[:, 100].mean()) if theirs_c is not None else np.nan
        rows.append({
            "workload": workload, "policy": policy, "seeds": len(seeds),
            "ours_alloc_%": ours, "theirs_alloc_%": theirs, "diff_pp": ours - theirs,
            "ours_unalloc_gpus": total * (100 - ours) / 100,
            "theirs_unalloc_gpus": total * (100 - theirs) / 100 if not np.isnan(theirs) else np.nan,
            "within_1pp": "" if np.isnan(theirs)
            else ("yes" if abs(ours - theirs) <= 1.0 else "NO"),
        })
    return pd.DataFrame(rows)


def _lower_bound(run, cache: dict) -> float:
    """The run's sliver bound; runs recorded without one get it rebuilt from the trace
    (openb node list)."""
    value = run.extra.get("unallocated_lower_bound_gpus") if run.extra else None
    if value is None:
        key = (run.workload, run.seed, run.tune)
        if key not in cache:
            cache[key] = bounds.fgd_sliver_bound(run.workload, run.seed, run.tune)
        value = cache[key]
    return float(value)


def against_fgd(runs: list, policy: str = "sparse") -> pd.DataFrame:
    """Unallocated GPUs at 100 % of ``policy`` beside FGD (both ours, same seeds) and the
    lower bound no policy can beat (``bounds.sliver_bound``)."""
    rows, cache = [], {}
    for workload in sorted({r.workload for r in runs}):
        mine = {r.seed: r for r in runs if r.workload == workload and r.policy == policy}
        fgd = {r.seed: r for r in runs if r.workload == workload and r.policy == "fgd"}
        seeds = sorted(set(mine) & set(fgd))
        if not seeds:
            continue
        ours = float(np.mean([mine[s].unallocated_gpus_100 for s in seeds]))
        base = float(np.mean([fgd[s].unallocated_gpus_100 for s in seeds]))
        bound = float(np.mean([_lower_bound(mine[s], cache) for s in seeds]))
        rows.append({
            "workload": workload, "seeds": len(seeds), f"{policy}_unalloc_gpus": ours,
            "fgd_unalloc_gpus": base, "ratio_to_fgd": ours / base if base else np.nan,
            "lower_bound_gpus": bound,
            "fgd_above_bound": base - bound, f"{policy}_above_bound": ours - bound,
        })
    return pd.DataFrame(rows)


def _column_percentile(ys: np.ndarray, q: float) -> np.ndarray:
    """Per-column NaN-ignoring percentile; NaN (no warning) where every run is NaN, e.g. past
    the arrival level at which a run's cluster was full."""
    out = np.full(ys.shape[1], np.nan)
    seen = ~np.isnan(ys).all(axis=0)
    if seen.any():
        out[seen] = np.nanpercentile(ys[:, seen], q, axis=0)
    return out


def plot_curves(runs: list, metric: str, ylabel: str, path: Path, workload: str,
                lo: int = 0, hi: int = 130) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    x = np.arange(131)
    for policy in sorted({r.policy for r in runs if r.workload == workload}):
        ys = np.array([getattr(r, metric) for r in runs
                       if r.workload == workload and r.policy == policy])
        med = _column_percentile(ys, 50)
        (line,) = ax.plot(x[lo:hi + 1], med[lo:hi + 1], label=policy)
        if len(ys) > 1:
            ax.fill_between(x[lo:hi + 1], _column_percentile(ys, 25)[lo:hi + 1],
                            _column_percentile(ys, 75)[lo:hi + 1], alpha=0.2,
                            color=line.get_color())
        theirs = expected.curves(workload, policy, metric=metric)
        if theirs is not None:
            ax.plot(x[lo:hi + 1], np.median(theirs, axis=0)[lo:hi + 1], ls=":",
                    color=line.get_color(), lw=1)
    ax.set_xlabel("arrived workload (% of cluster GPU)")
    ax.set_ylabel(ylabel)
    ax.set_title(f"{workload} (dotted: FGD authors' results)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_fgd(runs: list, out: Path, command: str = "") -> Path:
    out.mkdir(parents=True, exist_ok=True)
    per_run = pd.DataFrame([r.row() for r in runs]).sort_values(["workload", "policy", "seed"])
    per_run.to_csv(out / "runs.csv", index=False)
    curves = [{**{k: v for k, v in r.row().items() if k in ("workload", "policy", "seed")},
               "alloc": _list(r.alloc), "frag": _list(r.frag), "frag_rate": _list(r.frag_rate)}
              for r in runs]
    (out / "curves.json").write_text(json.dumps(curves))
    val = validation(runs)
    val.to_csv(out / "validation.csv", index=False)
    lines = report_header("sparse-bench: FGD protocol", command)
    lines += [
        "Protocol: pods shuffled per seed, resampled to 1.3x GPU capacity, one attempt per pod,",
        "no departures, ties to the smallest seed-permuted node name (bench/README.md).",
        "",
        "## GPU allocation at arrived workload = 100 % (mean over seeds)", "",
        md_table(val), "",
    ]
    have = val.dropna(subset=["theirs_alloc_%"])
    if len(have):
        worst = have.loc[have["diff_pp"].abs().idxmax()]
        lines += [f"Largest deviation from the authors: {worst['diff_pp']:+.2f} pp "
                  f"({worst['policy']} on {worst['workload']}); "
                  f"{(have['within_1pp'] == 'yes').sum()} of {len(have)} within 1.0 pp.", ""]
    vs = against_fgd(runs)
    if len(vs):
        vs.to_csv(out / "against_fgd.csv", index=False)
        lines += [
            "## sparse against FGD and the lower bound", "",
            "Unallocated GPUs at arrived = 100 % (mean over the seeds both ran). Lower bound: "
            "shares above half a GPU each hold a GPU alone, and the sliver beside them only "
            "takes shares that small; no policy can leave less unallocated "
            "(bench/sim/bounds.py).", "",
            md_table(vs), "",
        ]
    loss = losses.table(runs)
    if len(loss):
        loss.to_csv(out / "losses.csv", index=False)
        lines += [
            "## Where the unallocated GPUs sit", "",
            "GPUs at arrived = 100 %, mean over seeds: free capacity by the reason the failed "
            "pods could not use it (bench/sim/losses.py), then their request by shape; "
            "`first_fail_pct`: arrived % at the first failed GPU pod, `window_arrived` / "
            "`window_placed`: GPU request arriving after it up to 100 % and the part placed "
            "(their difference is the unallocated capacity).", "",
            md_table(loss, "{:.1f}"), "",
        ]
    for workload in sorted({r.workload for r in runs}):
        for metric, label, lo in (("alloc", "GPU allocation (%)", 50),
                                  ("frag", "fragmented GPU (% of cluster)", 0),
                                  ("frag_rate", "fragmentation rate (% of idle GPU)", 0)):
            name = f"{workload}-{metric}.png"
            plot_curves(runs, metric, label, out / name, workload, lo=lo)
            lines += [f"![{workload} {metric}]({name})", ""]
    lines += ["## Runtime", "",
              md_table(per_run.groupby("policy")["seconds"].mean().reset_index()), ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path


def runs_from_report(folder: Path) -> list:
    """The runs of a written ``fgd`` report without its runs.jsonl (reports kept in the
    repository leave it out): per-run rows of runs.csv with the curves of curves.json. Loss
    breakdowns are not in a report, so these runs carry none."""
    from bench.sim.fgd import FgdRun

    rows = pd.read_csv(folder / "runs.csv")
    curves = {(c["workload"], c["policy"], int(c["seed"])): c
              for c in json.loads((folder / "curves.json").read_text())}
    runs = []
    for row in rows.itertuples(index=False):
        c = curves[(row.workload, row.policy, int(row.seed))]
        runs.append(FgdRun.from_json({
            "workload": row.workload, "policy": row.policy, "seed": int(row.seed),
            "tune": float(row.tune), "pods": int(row.pods), "failed": int(row.failed),
            "total_gpus": int(row.total_gpus), "seconds": float(row.seconds), "extra": {},
            "alloc": c["alloc"], "frag": c["frag"], "frag_rate": c["frag_rate"]}))
    return runs


def _list(a: np.ndarray) -> list:
    return [None if np.isnan(v) else round(float(v), 4) for v in a]


def replay_table(runs: list) -> pd.DataFrame:
    """Means over seeds per mode and policy, and each as a ratio to kube-exclusive."""
    from bench.sim.replay import ANCHORS

    df = pd.DataFrame([r.row() for r in runs])
    for col in ("share_stretch", "work_bound"):  # absent from runs recorded before them
        if col not in df:
            df[col] = np.nan
    metrics = ["makespan", "jct_mean", "jct_p95", "queue_mean", "alloc_mean",
               "work_per_gpu_hour", "share_stretch"]
    mean = df.groupby(["mode", "policy"])[[*metrics, "work_bound"]].mean().reset_index()
    rows = []
    for _, row in mean.iterrows():
        base = mean[(mean["mode"] == row["mode"]) & (mean["policy"] == "kube-exclusive")]
        if not len(base):  # a forced queue order (<mode>-<order>): against the shipped one
            base = mean[(mean["mode"] == base_mode(row["mode"]))
                        & (mean["policy"] == "kube-exclusive")]
        out = {"mode": row["mode"], "policy": row["policy"]}
        for m in metrics:
            out[m] = row[m]
        if len(base):
            b = base.iloc[0]
            out["makespan_ratio"] = row["makespan"] / b["makespan"]
            out["jct_ratio"] = row["jct_mean"] / b["jct_mean"]
        out["work_bound"] = row["work_bound"]
        anchor = ANCHORS.get((row["mode"], row["policy"]))
        out["original_system_makespan_ratio"] = anchor if anchor is not None else np.nan
        rows.append(out)
    return pd.DataFrame(rows)


def write_replay(runs: list, out: Path, command: str = "") -> Path:
    table = replay_table(runs)
    write_runs_and_summary(runs, table, out)
    lines = report_header("sparse-bench: replay", command)
    lines += ["Rules: bench/sim/replay.py (job classes, durations, cluster sizing, time "
              "compression, interference model).", "",
              "Times in seconds; ratios are to kube-exclusive (mean over seeds); the last column"
              " is the original system's published makespan ratio. `work_bound`: the jobs' "
              "GPU-seconds as asked over their GPU-seconds on whole GPUs, the makespan ratio "
              "that sharing without any slowdown and without idle GPUs would reach against a "
              "perfectly packed exclusive scheduler (bench/sim/bounds.py).", "",
              md_table(table, "{:.3f}"), ""]
    lines += plot_jct_cdfs(runs, out)
    lines += replay_explain.explain_markdown(runs)
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
