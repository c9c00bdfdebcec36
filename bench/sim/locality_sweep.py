"""Sensitivity of the locality replay (``bench/sim/locality.py``): mean JCT with the locality
term over without it as one physical parameter of the topology moves across a realistic range,
the others at the shipped file's values. It shows in which clusters the term pays.

Sweeps (``SWEEPS``):

* ``uplink``: each rack's uplink oversubscription against its nodes' NICs (1:1 .. 8:1);
* ``cache``: the node cache's size (GiB; nodes have 768 GiB of host memory);
* ``store-racks``: racks holding store shards (each rack's shards bring the file's egress);
* ``store-gbps``: the store's egress (Gb/s; each shard serves its part, NIC-capped);
* ``fetch``: distinct rows one step fetches per table (the fetch share of the step time);
* ``table-scale``: every table's rows times a factor (the caches' size against the tables);
* ``length``: every job's steps times a factor (short jobs spend more of their run warming
  their caches: where they land matters more);
* ``sharing``: jobs per table: the recommendation jobs come in groups that read the same
  tables (a hyper-parameter sweep's trials, a model retrained), each group its own tables
  (``run_locality(readers_per_table=...)``); co-located readers share one copy and one
  warm-up, spread readers each fill their own.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
import yaml

from bench.sim.locality import TOPOLOGY, run_locality
from bench.sim.report import _plt, md_table, write_table

GOAL_JCT = 0.80


@dataclass(frozen=True)
class Sweep:
    name: str
    label: str
    values: tuple[float, ...]
    shipped: float

    def overrides(self, raw: dict, value: float) -> dict:
        """Topology overrides (dotted keys) for this sweep at ``value``."""
        links = raw.get("links") or {}
        if self.name == "uplink":
            downlink = raw["nodes_per_rack"] * float(links["node_nic_gbps"])
            return {"links.rack_uplink_gbps": downlink / value}
        if self.name == "cache":
            return {"cache.gib_per_node": float(value)}
        if self.name == "store-racks":
            racks = [f"{z}/rack-{r}" for r in range(raw["racks_per_zone"]) for z in raw["zones"]]
            return {"store.racks": racks[:int(value)]}  # each rack's shards bring their egress
        if self.name == "store-gbps":
            if "shard_gbps" not in links:  # an older file: the whole store's egress
                return {"links.store_gbps": float(value)}
            return {"links.shard_gbps": float(value) / shard_count(raw)}
        if self.name == "fetch":
            return {"jobs.unique_rows_per_table_step": float(value)}
        if self.name == "table-scale":
            t = raw["tables"]
            return {"tables.rows_min": int(t["rows_min"] * value),
                    "tables.rows_max": int(t["rows_max"] * value)}
        if self.name in RUN_SWEEPS:
            return {}
        raise KeyError(self.name)

    def run_kwargs(self, value: float) -> dict:
        """``run_locality`` arguments for this sweep at ``value`` (sweeps of the jobs, not of
        the topology)."""
        if self.name == "length":
            return {"length_scale": float(value)}
        if self.name == "sharing":
            return {"readers_per_table": int(value)}
        return {}


RUN_SWEEPS = ("length", "sharing")  # sweeps of the jobs, not the topology file


def shard_count(raw: dict) -> int:
    per_rack = int(raw["store"].get("shards_per_rack", raw["nodes_per_rack"]))
    return len(raw["store"]["racks"]) * min(per_rack, int(raw["nodes_per_rack"]))


def store_egress(raw: dict) -> float:
    """The store's egress in Gb/s: its shards' serving rate (NIC-capped), or an older file's
    ``links.store_gbps``."""
    links = raw.get("links") or {}
    if "shard_gbps" not in links:
        return float(links.get("store_gbps", 0))
    per_shard = float(links["shard_gbps"])
    nic = float(links.get("node_nic_gbps", 0))
    return (min(per_shard, nic) if nic else per_shard) * shard_count(raw)


def sweeps(topology: str | Path | None = None) -> dict[str, Sweep]:
    raw = yaml.safe_load(Path(topology or TOPOLOGY).read_text())
    links = raw.get("links") or {}
    downlink = raw["nodes_per_rack"] * float(links["node_nic_gbps"])
    n_racks = len(raw["zones"]) * raw["racks_per_zone"]
    return {s.name: s for s in (
        Sweep("uplink", "rack uplink oversubscription (x:1 vs the nodes' NICs)",
              (1.0, 3.0, 8.0), round(downlink / float(links["rack_uplink_gbps"]), 2)),
        Sweep("cache", "node cache (GiB)", (4.0, 16.0, 64.0, 256.0),
              float(raw["cache"]["gib_per_node"])),
        Sweep("store-racks", f"racks with store shards (of {n_racks})",
              tuple(float(k) for k in range(1, n_racks + 1)), float(len(raw["store"]["racks"]))),
        Sweep("store-gbps", "store egress (Gb/s)", (20.0, 40.0, 100.0), store_egress(raw)),
        Sweep("fetch", "distinct rows fetched per table and step", (5e3, 1.5e4, 5e4, 1.5e5),
              float(raw["jobs"]["unique_rows_per_table_step"])),
        Sweep("table-scale", "table size (x the shipped rows)", (0.1, 1.0, 10.0), 1.0),
        Sweep("length", "job length (x the trace's steps)", (0.01, 0.1, 1.0), 1.0),
        # The shipped jobs share the file's tables by popularity, not in groups: no point of
        # this sweep is the shipped workload.
        Sweep("sharing", "jobs reading each table (in groups)", (1.0, 4.0, 16.0), math.nan),
    )}


@dataclass
class SweepRun:
    sweep: str
    value: float
    seed: int
    locality: bool
    jct_mean: float
    rec_jct_mean: float
    makespan: float
    fetch_share: float
    placed_store_rack: float
    link_stretch: float
    hit_ratio: float = float("nan")  # share of the fetched rows the node caches served

    def to_json(self) -> dict:
        return asdict(self)


def parse_set(items: tuple[str, ...] | list[str]) -> dict:
    """``KEY=VALUE`` topology overrides (dotted keys; values read as YAML)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"expected KEY=VALUE, got {item!r}")
        out[key.strip()] = yaml.safe_load(value)
    return out


def sweep_job(args: tuple) -> SweepRun:
    """One run: ``(sweep, value, seed, locality, kw)``; ``kw['base']``: overrides under the
    sweep's own."""
    sweep, value, seed, locality, kw = args
    kw = dict(kw)
    base = kw.pop("base", None) or {}
    s = sweeps(kw.get("topology"))[sweep]
    raw = yaml.safe_load(Path(kw.get("topology") or TOPOLOGY).read_text())
    r = run_locality(seed=seed, locality=locality,
                     overrides={**base, **s.overrides(raw, value)}, **s.run_kwargs(value), **kw)
    return SweepRun(sweep, value, seed, locality, r.jct_mean, r.rec_jct_mean, r.makespan,
                    r.fetch_share, r.placed_store_rack, r.link_stretch, r.hit_ratio)


def shipped_runs(folder: Path, names: list[str], seeds: list[int],
                 topology: str | Path | None, n_jobs: int) -> list[SweepRun]:
    """The continuous recommendation runs of a ``locality`` results folder, as each sweep's
    runs at its shipped value (the same runs: shipped topology, same seeds and jobs)."""
    defs = sweeps(topology)
    out = []
    for line in (folder / "runs.jsonl").read_text().splitlines():
        d = json.loads(line) if line.strip() else None
        if (not d or d.get("mode") != "continuous" or d.get("scenario") != "recommendation"
                or d.get("seed") not in seeds or d.get("jobs") != n_jobs):
            continue
        out += [SweepRun(n, defs[n].shipped, d["seed"], d["locality"], d["jct_mean"],
                         d["rec_jct_mean"], d["makespan"], d["fetch_share"],
                         d["placed_store_rack"], d["link_stretch"], d["hit_ratio"])
                for n in names if not math.isnan(defs[n].shipped)]
    return out


def summarise(runs: list[SweepRun]) -> pd.DataFrame:
    by = {(r.sweep, r.value, r.seed, r.locality): r for r in runs}
    rows = []
    for (sweep, value, seed, loc), on in sorted(by.items()):
        off = by.get((sweep, value, seed, False))
        if loc and off is not None:
            rows.append({"sweep": sweep, "value": value, "seed": seed,
                         "jct_ratio": on.jct_mean / off.jct_mean,
                         "rec_jct_ratio": on.rec_jct_mean / off.rec_jct_mean,
                         "makespan_ratio": on.makespan / off.makespan,
                         "fetch_share_off": off.fetch_share,
                         "store_rack_off": off.placed_store_rack,
                         "store_rack_on": on.placed_store_rack,
                         "hit_ratio_off": off.hit_ratio, "hit_ratio_on": on.hit_ratio,
                         "link_stretch_off": off.link_stretch})
    per_seed = pd.DataFrame(rows)
    if per_seed.empty:
        return per_seed
    table = per_seed.groupby(["sweep", "value"], sort=False).agg(
        seeds=("seed", "count"), jct_ratio=("jct_ratio", "mean"),
        jct_ratio_min=("jct_ratio", "min"), jct_ratio_max=("jct_ratio", "max"),
        rec_jct_ratio=("rec_jct_ratio", "mean"), makespan_ratio=("makespan_ratio", "mean"),
        fetch_share_off=("fetch_share_off", "mean"), store_rack_off=("store_rack_off", "mean"),
        store_rack_on=("store_rack_on", "mean"), hit_ratio_off=("hit_ratio_off", "mean"),
        hit_ratio_on=("hit_ratio_on", "mean"), link_stretch_off=("link_stretch_off", "mean"))
    return table.reset_index()


def plot(per_seed: pd.DataFrame, table: pd.DataFrame, defs: dict[str, Sweep], path: Path
         ) -> None:
    plt = _plt()
    names = [n for n in defs if n in set(table["sweep"])]
    cols = min(3, len(names))
    rows = (len(names) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for ax in axes.ravel()[len(names):]:
        ax.set_visible(False)
    for ax, name in zip(axes.ravel(), names, strict=False):
        s, t = defs[name], table[table["sweep"] == name].sort_values("value")
        p = per_seed[per_seed["sweep"] == name]
        ax.scatter(p["value"], p["jct_ratio"], s=10, color="C0", alpha=0.5)
        ax.plot(t["value"], t["jct_ratio"], "o-", color="C0", label="mean JCT with / without")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.axhline(GOAL_JCT, color="C3", ls="--", lw=0.8, label=f"goal {GOAL_JCT}")
        if not math.isnan(s.shipped):
            ax.axvline(s.shipped, color="grey", ls=":", lw=1, label="shipped topology")
        ax.set_xscale("log")
        ax.set_xticks(t["value"], [f"{v:g}" for v in t["value"]])
        ax.minorticks_off()
        ax.set_xlabel(s.label, fontsize=8)
        ax.set_ylabel("mean JCT ratio")
        twin = ax.twinx()
        twin.plot(t["value"], t["fetch_share_off"], "s--", color="C2", ms=3, lw=0.8)
        twin.set_ylim(0, 1)
        twin.set_ylabel("fetch share of rec. run time (without)", fontsize=7, color="C2")
        twin.tick_params(labelsize=7, colors="C2")
    axes.ravel()[0].legend(fontsize=7, loc="lower left")
    fig.suptitle("Locality term: mean JCT with / without (continuous, recommendation-heavy)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_sweep(runs: list[SweepRun], folder: Path, command: str,
                topology: str | Path | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    defs = sweeps(topology)
    table = summarise(runs)
    by = {(r.sweep, r.value, r.seed, r.locality): r for r in runs}
    per_seed = pd.DataFrame([{"sweep": k[0], "value": k[1], "seed": k[2],
                              "jct_ratio": on.jct_mean / by[(k[0], k[1], k[2], False)].jct_mean}
                             for k, on in by.items() if k[3] and (*k[:3], False) in by])
    write_table(table, folder, "sweep")
    lines = ["# Locality replay: sensitivity", "", f"`{command}`", "",
             "Mean JCT with the locality term over without it (continuous arrivals, "
             "recommendation-heavy workload), one parameter (of the topology, or the jobs' "
             "length or sharing) moved at a time, the others as shipped; "
             "`jct_ratio_min`/`max` over seeds; `fetch_share_off`: share of the "
             "recommendation jobs' run time spent fetching, without the term; `store_rack`: "
             "recommendation jobs placed in a rack of the store's shards.", ""]
    for name in defs:
        t = table[table["sweep"] == name] if len(table) else table
        if len(t):
            s = defs[name]
            shipped = "not grouped" if math.isnan(s.shipped) else f"{s.shipped:g}"
            lines += [f"## {s.label} (shipped: {shipped})", "",
                      md_table(t.drop(columns=["sweep"]), "{:.3f}"), ""]
    if len(table):
        plot(per_seed, table, defs, folder / "sweep.png")
        lines += ["![sweep](sweep.png)", ""]
    path = folder / "sweep.md"
    path.write_text("\n".join(lines))
    return path


def points(names: list[str], seeds: list[int], topology: str | Path | None = None
           ) -> list[tuple[str, float, int]]:
    defs = sweeps(topology)
    return [(n, v, s) for n in names for v in defs[n].values for s in seeds]

