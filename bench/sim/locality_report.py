"""Report of the ``locality`` experiment: JCT and makespan with and without the locality term,
per scenario, with plots (JCT CDF, ratios per seed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from bench.sim.report import _plt, md_table, write_runs_and_summary

GOAL_JCT = 0.80  # mean JCT with locality / without, recommendation-heavy workload


def summary(runs: list) -> pd.DataFrame:
    rows = []
    for mode, scenario in sorted({(r.mode, r.scenario) for r in runs}):
        off = {r.seed: r for r in runs if (r.mode, r.scenario) == (mode, scenario)
               and not r.locality}
        on = {r.seed: r for r in runs if (r.mode, r.scenario) == (mode, scenario)
              and r.locality}
        seeds = sorted(set(off) & set(on))
        if not seeds:
            continue

        def mean(group, key, seeds=seeds):
            return float(np.mean([getattr(group[s], key, np.nan) for s in seeds]))

        rows.append({
            "mode": mode, "scenario": scenario, "seeds": len(seeds),
            "jct_mean_off": mean(off, "jct_mean"), "jct_mean_on": mean(on, "jct_mean"),
            "jct_ratio": float(np.mean([on[s].jct_mean / off[s].jct_mean for s in seeds])),
            "makespan_ratio": float(np.mean([on[s].makespan / off[s].makespan for s in seeds])),
            "p95_ratio": float(np.mean([on[s].jct_p95 / off[s].jct_p95 for s in seeds])),
            "rec_jct_ratio": float(np.mean([on[s].rec_jct_mean / off[s].rec_jct_mean
                                            for s in seeds])) if scenario != "no-embeddings"
            else float("nan"),
            "fetch_share_off": mean(off, "fetch_share"),
            "fetch_share_on": mean(on, "fetch_share"),
            "hit_ratio_off": mean(off, "hit_ratio"),
            "hit_ratio_on": mean(on, "hit_ratio"),
            "warmup_miss_off": mean(off, "warmup_miss"),
            "warmup_miss_on": mean(on, "warmup_miss"),
            "with_choice_off": mean(off, "placed_with_choice"),
            "with_choice_on": mean(on, "placed_with_choice"),
            "on_cache_off": mean(off, "placed_cache_hit"),
            "on_cache_on": mean(on, "placed_cache_hit"),
            "store_rack_off": mean(off, "placed_store_rack"),
            "store_rack_on": mean(on, "placed_store_rack"),
            "rack_rec_work_off": mean(off, "store_rack_rec_work"),
            "rack_rec_work_on": mean(on, "store_rack_rec_work"),
            "link_stretch_off": mean(off, "link_stretch"),
            "link_stretch_on": mean(on, "link_stretch"),
            "delayed_on": mean(on, "delayed"),
            "oracle_agreement_on": mean(on, "oracle_agreement"),
            "hit_ceiling": mean(off, "hit_ceiling"),
            "tables_on_node_off": mean(off, "tables_on_node"),
            "tables_on_node_on": mean(on, "tables_on_node"),
            "shard_saturated_off": float(np.mean([off[s].saturated.get("shard", np.nan)
                                                  for s in seeds])),
        })
    return pd.DataFrame(rows)


def _cdf(runs: list, mode: str, scenario: str, path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for locality, style in ((False, "C1"), (True, "C0")):
        jct = np.concatenate([r.jct for r in runs if (r.mode, r.scenario) == (mode, scenario)
                              and r.locality == locality])
        if len(jct):
            jct = np.sort(jct)
            ax.plot(jct, np.arange(1, len(jct) + 1) / len(jct), style,
                    label="with locality term" if locality else "without")
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s)")
    ax.set_ylabel("share of jobs")
    ax.set_title(f"JCT, {scenario} workload, {mode} (all seeds)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _ratios(table: pd.DataFrame, path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    x = np.arange(len(table))
    for i, (key, label) in enumerate((("jct_ratio", "mean JCT"), ("p95_ratio", "p95 JCT"),
                                      ("makespan_ratio", "makespan"))):
        ax.bar(x + (i - 1) * 0.27, table[key], 0.27, label=label)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axhline(GOAL_JCT, color="C3", ls="--", lw=0.8, label=f"goal {GOAL_JCT}")
    ax.set_xticks(x, [f"{m}\n{s}" for m, s in zip(table["mode"], table["scenario"],
                                                   strict=True)], fontsize=8)
    ax.set_ylabel("with locality / without")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def per_seed(runs: list) -> pd.DataFrame:
    """Mean JCT with / without the term per mode, scenario and seed."""
    by = {(r.mode, r.scenario, r.seed, r.locality): r for r in runs}
    rows = []
    for (mode, scenario, seed, loc), on in sorted(by.items()):
        off = by.get((mode, scenario, seed, False))
        if loc and off is not None:
            rows.append({"mode": mode, "scenario": scenario, "seed": seed,
                         "jct_mean_off": off.jct_mean, "jct_mean_on": on.jct_mean,
                         "jct_ratio": on.jct_mean / off.jct_mean,
                         "makespan_ratio": on.makespan / off.makespan})
    return pd.DataFrame(rows)


def _seed_plot(seeds: pd.DataFrame, path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    groups = list(seeds.groupby(["mode", "scenario"], sort=True))
    for i, ((mode, scenario), g) in enumerate(groups):
        ax.scatter(np.full(len(g), i) + np.linspace(-0.2, 0.2, len(g)), g["jct_ratio"], s=14,
                   label=f"{mode} {scenario}")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axhline(GOAL_JCT, color="C3", ls="--", lw=0.8)
    ax.set_xticks(range(len(groups)), [f"{m}\n{s}" for (m, s), _ in groups], fontsize=8)
    ax.set_ylabel("mean JCT with / without, per seed")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_locality(runs: list, folder: Path, command: str) -> Path:
    table = summary(runs)
    write_runs_and_summary(runs, table, folder)
    lines = ["# Locality replay", "", f"`{command}`", "",
             "Ratios are with the locality term over without it, same trace, same seed "
             "(mean over seeds). `fetch_share`: share of the recommendation jobs' run time spent "
             "fetching embeddings; `hit_ratio`: share of all the rows they fetched that node "
             "caches served (what relieves the store); `warmup_miss`: share of those rows "
             "missed only because a cache was still filling when the job started (the most "
             "that placing jobs on warm caches can win back); `with_choice`: recommendation jobs "
             "placed with more than one fitting node to choose from (where the term can act at "
             "all); `on_cache`: recommendation jobs that "
             "started on a node whose cache held all their tables; `store_rack`: those placed "
             "in a rack of the store's shards; `rack_rec_work`: share of the GPU work run in "
             "those racks that reads embeddings; `link_stretch`: time-weighted stretch of the "
             "most loaded shared link "
             "(a store shard, rack uplink, zone link, node NIC; 1 = no contention); "
             "`delayed_on`: recommendation jobs that waited for a warm node at least once "
             "(delay scheduling: the extender's wait, `--max-wait`, or the replay's own "
             "`--delay`; 0 without either); `hit_ceiling`: the hit ratio "
             "if every reader had a warm node cache for its own tables alone (the most any "
             "placement gives); `tables_on_node`: tables in use on a reader's node when it "
             "starts, its own included (they split the node's cache); `shard_saturated_off`: "
             "share of the run the busiest store shard served at capacity, without the term. "
             "With `--oracle`, \"on\" is the oracle; with `--shadow-oracle`, "
             "`oracle_agreement_on` is the share of the term's choices of node (two or more "
             "fitting) that were the oracle's.", "",
             md_table(table, "{:.3f}"), ""]
    seeds = per_seed(runs)
    seeds.to_csv(folder / "per_seed.csv", index=False)
    if len(table):
        _ratios(table, folder / "ratios.png")
        lines += ["![ratios](ratios.png)", ""]
    if len(seeds):
        _seed_plot(seeds, folder / "ratios-per-seed.png")
        lines += ["## Per seed", "", md_table(seeds, "{:.3f}"), "",
                  "![per seed](ratios-per-seed.png)", ""]
    for mode, scenario in zip(table.get("mode", []), table.get("scenario", []), strict=True):
        name = f"jct-cdf-{mode}-{scenario}.png"
        _cdf(runs, mode, scenario, folder / name)
        lines += [f"![{mode} {scenario}]({name})", ""]
    path = folder / "report.md"
    path.write_text("\n".join(lines))
    return path
