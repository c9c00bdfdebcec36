"""`sparse-bench locality` and `locality-sweep`: embedding locality experiments."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import click

from bench.commands.common import out_dir, parse_seeds, run_all


def _locality_job(args: tuple) -> object:
    from bench.sim.locality import run_locality

    workload, scenario, mode, locality, seed, kw = args
    if not locality:  # the oracle stands in for (or shadows) the runs with the term only
        kw = {k: v for k, v in kw.items() if k not in ("oracle", "shadow")}
    return run_locality(workload, seed, locality=locality, scenario=scenario, mode=mode, **kw)


@click.command()
@click.option("--workload", "-w", default="default", show_default=True,
              help="openb workload name or pod-list CSV path (job shapes and durations)")
@click.option("--topology", default=None, help="topology YAML (default: "
              "bench/data/locality/topology.yaml)")
@click.option("--scenario", multiple=True, default=("recommendation", "no-embeddings"),
              show_default=True, type=click.Choice(["recommendation", "no-embeddings"]))
@click.option("--mode", multiple=True, default=("continuous", "high-load"), show_default=True,
              type=click.Choice(["continuous", "high-load"]),
              help="continuous: trace arrivals at --load; high-load: all jobs at t = 0")
@click.option("--seeds", default="42-44", show_default=True)
@click.option("--jobs", "n_jobs", default=400, show_default=True)
@click.option("--rec-share", default=0.7, show_default=True,
              help="share of jobs reading embeddings (recommendation scenario)")
@click.option("--load", default=0.9, show_default=True, help="offered load of the arrivals")
@click.option("--workers", "-j", default=os.cpu_count() or 1, show_default=True)
@click.option("--score", default="time", show_default=True, type=click.Choice(["time", "share"]),
              help="the term: step time saved per node, or the cached share and tiers")
@click.option("--delay/--no-delay", default=False, show_default=True,
              help="with the term, the replay's delay scheduling too: waits and freed nodes "
              "given to the jobs their caches serve (extender/placement/delay.py)")
@click.option("--max-wait", default=0.0, show_default=True, type=click.FloatRange(0),
              help="with the term, the extender's wait for a warm node (--locality-max-wait): "
              "seconds a reader may wait at most; 0: none")
@click.option("--oracle", default=None,
              type=click.Choice(["greedy", "greedy-rows", "ideal", "ideal-hit", "ideal-path"]),
              help="the runs with the term are an upper bound instead: greedy (each reader on "
              "the node where the replay's own physics gives it and the running readers the "
              "least run time left), greedy-rows (the fewest rows they will miss), ideal (every "
              "reader as if alone with its tables on a warm node in the store's rack), or only "
              "its hit ratio / only its path so (ideal-hit, ideal-path)")
@click.option("--shadow-oracle", "shadow", default=None,
              type=click.Choice(["greedy", "greedy-rows"]),
              help="with the term, ask this oracle at every choice of node without following "
              "it: the report gives how often the term's node was the oracle's "
              "(oracle_agreement_on)")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="topology value over the file's, e.g. links.shard_gbps=0 (0: unlimited)")
@click.option("--out", default=None, help="results folder (default results/locality-<time>)")
def locality(workload, topology, scenario, mode, seeds, n_jobs, rec_share, load, workers,
             score, delay, max_wait, oracle, shadow, sets, out) -> None:
    """Embedding locality: JCT and makespan with and without the locality term."""
    from bench.sim.locality_report import write_locality
    from extender.placement.locality import LocalityWeights

    kw = {"n_jobs": n_jobs, "rec_share": rec_share, "load": load, "topology": topology,
          "weights": LocalityWeights(score=score, max_wait_s=max_wait), "delay": delay}
    if oracle and shadow:
        raise click.UsageError("--shadow-oracle asks an oracle beside the term: not with --oracle")
    if sets:
        from bench.sim.locality_sweep import parse_set

        try:
            kw["overrides"] = parse_set(sets)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--set") from None
    if oracle:
        kw["oracle"] = oracle
    if shadow:
        kw["shadow"] = shadow
    jobs = [(workload, sc, m, loc, s, kw) for m in mode for sc in scenario
            for loc in (False, True) for s in parse_seeds(seeds)]
    folder = out_dir(out, "locality")
    runs = run_all(jobs, _locality_job, workers,
                   lambda j: f"{j[2]} {j[1]} {'on' if j[3] else 'off'} seed {j[4]}",
                   folder / "runs.jsonl")
    path = write_locality(runs, folder, "sparse-bench " + shlex.join(sys.argv[1:]))
    click.echo(f"report: {path}")


@click.command("locality-sweep")
@click.option("--sweep", "names", multiple=True,
              type=click.Choice(["uplink", "cache", "store-racks", "store-gbps", "fetch",
                                 "table-scale", "length", "sharing"]),
              default=("table-scale", "store-gbps", "uplink"),
              show_default=True, help="topology parameter to move (others as in the file)")
@click.option("--topology", default=None, help="topology YAML (default: "
              "bench/data/locality/topology.yaml)")
@click.option("--seeds", default="42-44", show_default=True)
@click.option("--jobs", "n_jobs", default=400, show_default=True)
@click.option("--workers", "-j", default=os.cpu_count() or 1, show_default=True)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="topology value under every point, e.g. links.shard_gbps=25")
@click.option("--shipped-from", default=None, type=click.Path(exists=True, file_okay=False),
              help="a `locality` results folder of the same seeds and topology: its continuous "
              "recommendation runs stand for every sweep's shipped value (not rerun)")
@click.option("--runs-from", "runs_from", multiple=True,
              type=click.Path(exists=True, dir_okay=False),
              help="a sweep's runs.jsonl: write the report from its runs (of every sweep in it; "
              "pairs with and without the term only), run nothing")
@click.option("--out", default=None, help="results folder (default results/locality-sweep-<time>)")
def locality_sweep(names, topology, seeds, n_jobs, workers, sets, shipped_from, runs_from,
                   out) -> None:
    """Embedding locality: mean JCT with / without the term against topology parameters or
    the jobs' length and sharing. Runs go seed by seed (every point of seed 42, then 43...),
    so a batch stopped early still pairs every point over the seeds it reached."""
    from bench.sim.locality import Topology
    from bench.sim.locality_sweep import (
        SweepRun,
        parse_set,
        points,
        shipped_runs,
        sweep_job,
        write_sweep,
    )

    if runs_from:
        docs = [json.loads(line) for src in runs_from
                for line in Path(src).read_text().splitlines() if line.strip()]
        runs = list({(d["sweep"], d["value"], d["seed"], d["locality"]): SweepRun(**d)
                     for d in docs}.values())
        folder = out_dir(out, "locality-sweep")
        path = write_sweep(runs, folder, "sparse-bench " + shlex.join(sys.argv[1:]), topology)
        click.echo(f"report: {path}")
        return

    try:
        base = parse_set(sets)
        Topology.load(topology, 0, base)
    except (ValueError, KeyError, TypeError) as exc:
        raise click.BadParameter(str(exc), param_hint="--set") from None
    kw = {"n_jobs": n_jobs, "topology": topology, "base": base}
    seed_list = parse_seeds(seeds)
    given = (shipped_runs(Path(shipped_from), list(names), seed_list, topology, n_jobs)
             if shipped_from and not base else [])
    have = {(r.sweep, r.value, r.seed, r.locality) for r in given}
    jobs = [(n, v, s, loc, kw) for n, v, s in sorted(points(list(names), seed_list, topology),
                                                      key=lambda p: p[2])
            for loc in (False, True) if (n, v, s, loc) not in have]
    folder = out_dir(out, "locality-sweep")
    runs = run_all(jobs, sweep_job, workers,
                   lambda j: f"{j[0]}={j[1]:g} {'on' if j[3] else 'off'} seed {j[2]}",
                   folder / "runs.jsonl")
    with (folder / "runs.jsonl").open("a") as sink:  # the folder holds every run it reports
        sink.writelines(json.dumps(r.to_json()) + "\n" for r in given)
    runs = given + runs

    path = write_sweep(runs, folder, "sparse-bench " + shlex.join(sys.argv[1:]), topology)
    click.echo(f"report: {path}")
