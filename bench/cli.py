"""sparse-bench: trace-driven experiments on the extender's placement core.

    sparse-bench fgd --workload default --policy fgd --policy sparse --seeds 42-51 -j 2
    sparse-bench replay --policy kube-exclusive --policy sparse --seeds 42
"""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import click

from bench.sim.expected import BASELINES

DEFAULT_POLICIES = (*BASELINES, "sparse")


def parse_seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        elif part:
            out.append(int(part))
    return out


def _fgd_job(args: tuple) -> object:
    from bench.sim.fgd import run_fgd

    workload, policy, seed, tune, nodes = args
    return run_fgd(workload, policy, seed, tune=tune, nodes_path=nodes)


def _replay_job(args: tuple) -> object:
    from bench.sim.replay import run_replay

    workload, policy, seed, kw = args
    return run_replay(workload, policy, seed, **kw)


def _recmix_job(args: tuple) -> object:
    from bench.sim.recmix_replay import run_recmix

    _, policy, seed, kw = args
    return run_recmix(policy, seed, **kw)


def _run_all(jobs: list[tuple], fn, workers: int, label, sink: Path | None = None) -> list:
    """Run the jobs (in a process pool when workers > 1); each finished run is also appended
    to ``sink`` (JSON lines, started afresh: the folder describes this batch only) so an
    interrupted batch keeps what it did."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    if sink is not None and sink.exists():
        sink.unlink()
    results = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns) as progress:
        task = progress.add_task("runs", total=len(jobs))
        if workers <= 1:
            for job in jobs:
                progress.update(task, description=label(job))
                results.append(_keep(fn(job), sink))
                progress.advance(task)
        else:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                futures = {pool.submit(fn, job): job for job in jobs}
                for fut in as_completed(futures):
                    results.append(_keep(fut.result(), sink))
                    progress.update(task, description=label(futures[fut]))
                    progress.advance(task)
    return results


def _keep(run, sink: Path | None):
    if sink is not None:
        sink.parent.mkdir(parents=True, exist_ok=True)
        with sink.open("a") as f:
            f.write(json.dumps(run.to_json()) + "\n")
    return run


def _out_dir(out: str | None, experiment: str) -> Path:
    if out:
        return Path(out)
    return Path("results") / f"{experiment}-{time.strftime('%Y%m%d-%H%M%S')}"


@click.group()
@click.version_option(package_name="sparse", prog_name="sparse-bench")
def main() -> None:
    """Trace-driven benchmarks of sparse's placement core (FGD protocol, time replay)."""


@main.command()
@click.option("--workload", "-w", "workloads", multiple=True, default=("default",),
              show_default=True, help="openb workload name (default, cpu050, gpushare40, ...) "
              "or path to a pod-list CSV; repeatable; 'all' = the 13 with published results")
@click.option("--nodes", default=None, help="node-list CSV (default: openb GPU nodes)")
@click.option("--policy", "-p", "policies", multiple=True, default=DEFAULT_POLICIES,
              show_default=True, help="placement policy (extender REGISTRY name); repeatable")
@click.option("--seeds", default="42-51", show_default=True, help="e.g. 42-51 or 42,43")
@click.option("--tune", default=1.3, show_default=True, help="resample to this x GPU capacity")
@click.option("--workers", "-j", default=os.cpu_count() or 1, show_default=True)
@click.option("--out", default=None, help="results folder (default results/fgd-<time>)")
def fgd(workloads, nodes, policies, seeds, tune, workers, out) -> None:
    """FGD paper protocol: allocation and fragmentation vs arrived workload."""
    from bench.sim.report import write_fgd
    from bench.sim.trace import WORKLOADS

    if "all" in workloads:
        workloads = WORKLOADS
    jobs = [(w, p, s, tune, nodes) for w in workloads for p in policies
            for s in parse_seeds(seeds)]
    folder = _out_dir(out, "fgd")
    runs = _run_all(jobs, _fgd_job, workers, lambda j: f"{j[0]} {j[1]} seed {j[2]}",
                    folder / "runs.jsonl")
    path = write_fgd(runs, folder, "sparse-bench " + shlex.join(sys.argv[1:]))
    click.echo(f"report: {path}")


@main.command()
@click.option("--variant", "-v", "names", multiple=True, required=True,
              help="gpushareNN, multigpuNN, gpuspecNN or cpuNNN; repeatable")
@click.option("--seed", default=0, show_default=True, help="the generator's seed")
@click.option("--compare", "-c", "shipped", multiple=True,
              help="also generate this shipped list's name and print both summaries")
@click.option("--out", default=None, help="folder for the CSVs (default results/variants-<time>)")
def variants(names, seed, shipped, out) -> None:
    """Pod lists derived from default as the upstream variants are (bench/sim/variants.py);
    run them with ``sparse-bench fgd -w <folder>/openb_pod_list_gen-<name>.csv``."""
    import pandas as pd

    from bench.sim import variants as va
    from bench.sim.report import md_table
    from bench.sim.trace import load_pods, workload_path

    folder = _out_dir(out, "variants")
    rows = []
    for name in shipped:
        rows.append({"list": f"{name} (shipped)", **va.summary(load_pods(workload_path(name)))})
        rows.append({"list": f"{name} (generated)", **va.summary(va.generate(name, seed))})
    for name in names:
        path = va.write(name, folder, seed)
        rows.append({"list": f"gen-{name}", **va.summary(load_pods(path))})
        click.echo(f"wrote {path}")
    table = md_table(pd.DataFrame(rows), floatfmt="{:.3f}")
    (folder / "summary.md").write_text(table + "\n")
    click.echo(table)


def _read_runs(sources) -> list:
    from bench.sim.fgd import FgdRun

    runs, seen = [], set()
    for src in sources:
        path = Path(src)
        path = path / "runs.jsonl" if path.is_dir() else path
        for line in path.read_text().splitlines():
            run = FgdRun.from_json(json.loads(line))
            key = (run.workload, run.policy, run.seed, run.tune)
            if key not in seen:
                seen.add(key)
                runs.append(run)
    return runs


@main.command()
@click.option("--workload", "-w", "workloads", multiple=True, default=("default",),
              show_default=True, help="as for `fgd`; 'all' = the 13 workloads")
@click.option("--nodes", default=None, help="node-list CSV (default: openb GPU nodes)")
@click.option("--policy", "-p", "policies", multiple=True, default=("fgd", "sparse"),
              show_default=True)
@click.option("--seeds", default="42", show_default=True)
@click.option("--tune", default=1.3, show_default=True)
@click.option("--workers", "-j", default=1, show_default=True)
@click.option("--runs", "sources", multiple=True, type=click.Path(exists=True),
              help="read runs.jsonl of earlier `fgd` folders instead of running")
@click.option("--out", default=None, help="results folder (default results/losses-<time>)")
def losses(workloads, nodes, policies, seeds, tune, workers, sources, out) -> None:
    """Where the unallocated GPUs sit at arrived = 100 %, per workload and policy (slivers,
    stranded multi-GPU capacity, CPU-bound nodes, model mismatches; failed request by shape),
    and each policy minus FGD from the same seeds."""
    from bench.sim import losses as lo
    from bench.sim.report import md_table, write_fgd
    from bench.sim.trace import WORKLOADS

    if sources:
        runs = _read_runs(sources)
        folder = Path(out) if out else None
    else:
        if "all" in workloads:
            workloads = WORKLOADS
        jobs = [(w, p, s, tune, nodes) for w in workloads for p in policies
                for s in parse_seeds(seeds)]
        folder = _out_dir(out, "losses")
        runs = _run_all(jobs, _fgd_job, workers, lambda j: f"{j[0]} {j[1]} seed {j[2]}",
                        folder / "runs.jsonl")
    tab = lo.table(runs)
    if not len(tab):
        raise click.ClickException("no run carries a loss breakdown (re-run with `fgd`)")
    click.echo("GPUs, mean over seeds; free capacity by reason, then failed request by shape:")
    click.echo(md_table(tab, "{:.1f}"))
    for policy in sorted(set(tab.policy) - {"fgd"}):
        diff = lo.against(tab, policy)
        if len(diff):
            click.echo(f"\n{policy} minus fgd (same seeds; negative = fewer GPUs lost there):")
            click.echo(md_table(diff, "{:+.1f}"))
    if folder is not None:
        click.echo(f"report: {write_fgd(runs, folder, 'sparse-bench ' + shlex.join(sys.argv[1:]))}")


@main.command()
@click.option("--workload", "-w", default="default", show_default=True,
              help="openb workload name or pod-list CSV path (needs creation/deletion times), "
              "or rec-mix: recommendation jobs from the predictor's measured families")
@click.option("--nodes", default=None, help="node-list CSV (default: openb GPU nodes)")
@click.option("--policy", "-p", "policies", multiple=True,
              default=("kube-exclusive", "kube-shared", "fgd", "sparse"), show_default=True)
@click.option("--seeds", default="42", show_default=True)
@click.option("--mode", type=click.Choice(["high-load", "continuous"]), multiple=True,
              default=("high-load", "continuous"), show_default=True,
              help="high-load: all jobs submitted at once; continuous: trace arrival times")
@click.option("--rec-share", default=0.3, show_default=True,
              help="share of GPU-sharing jobs labelled recommendation")
@click.option("--jobs", "n_jobs", default=2000, show_default=True,
              help="jobs sampled from the trace per run (0 = all)")
@click.option("--overload", default=4.0, show_default=True,
              help="cluster size = job GPU-seconds / (overload x longest job)")
@click.option("--load", default=1.0, show_default=True,
              help="continuous mode: offered load the arrival times are compressed to")
@click.option("--mix", default=None, help="rec-mix: family mix, rec=<share> or FAMILY=WEIGHT,"
              "... (default rec=0.7)")
@click.option("--pad", default=1.5, show_default=True,
              help="rec-mix: median padding users add to the memory they declare")
@click.option("--pad-spread", default=0.3, show_default=True,
              help="rec-mix: log-normal sigma of that padding (0 = everyone pads alike)")
@click.option("--oom-bump", default=1.5, show_default=True,
              help="rec-mix: a job that ran out of memory is retried with its booking x this")
@click.option("--holdout-rows", is_flag=True,
              help="rec-mix: draw jobs only from rows the shipped predictor did not train on")
@click.option("--interference", "interference", default="learned", show_default=True,
              type=click.Choice(["learned", "matrix"]),
              help="rec-mix: what sparse's interference term knows: the learned pair model on "
              "the jobs' solo profiles, or the class matrix alone")
@click.option("--queue-order", "queue_orders", multiple=True, default=("product",),
              show_default=True,
              type=click.Choice(["product", "fifo", "bands", "bands-shortest-first",
                                 "bands-critical-first", "longest-first", "shortest-first-hold",
                                 "critical-path", "drain-path", "drain-rate", "critical-share",
                                 "critical-share-sf", "critical-path-bands",
                                 "error-bound-path", "error-bound-drain", "arrival-drain",
                                 "arrival-slack", "gang-share"]),
              help="queue order; product: sparse by predicted-duration band (the "
              "chart's default order), the stock schedulers FIFO; fifo / bands (longest band "
              "first) / bands-shortest-first / bands-critical-first (the critical bands "
              "longest first, then the others shortest first) force one order on every "
              "policy (mode <mode>-<order>); longest-first (an oracle that knows solo "
              "times) is reported as mode <mode>-longest-first, to separate queue order "
              "from placement; shortest-first-hold: sparse shortest-first with the gang "
              "rule and the first gang refused holding a node (EASY backfill), the stock "
              "schedulers FIFO; critical-path: that, and a job whose latest start has come "
              "goes first (drain-path: on the point estimate; drain-rate: the drain time at "
              "the observed retire rate; critical-path-bands: only jobs of the critical "
              "bands; error-bound-path: the margin is the job family's measured bound "
              "of the step-time under-estimate; error-bound-drain: that, with the drain "
              "time from each job's prediction x its family's median error); "
              "critical-share: the critical bands get GPUs in "
              "proportion to their predicted work, longest first inside (-sf: shortest "
              "first), the rest shortest first; arrival-slack: the controller's latest-start "
              "promotion; gang-share (sparse's product): that, the long gangs ahead only "
              "while below their share of the GPUs")
@click.option("--queue-bands", default=4, show_default=True, type=click.IntRange(1, 16),
              help="predicted-duration bands (log-spaced over the trace's durations)")
@click.option("--pass-over", "pass_over", default=None, type=click.FloatRange(min=0),
              help="openb workloads: model the job controller's bounded backfill for sparse's "
              "banded queue (seconds a job may be passed over; its default is 300); off "
              "when not given")
@click.option("--declared-share", default=1.0, show_default=True, type=click.FloatRange(0, 1),
              help="openb workloads: share of jobs that declare their steps (the others have "
              "no predicted duration and take the controller's default band)")
@click.option("--explain", is_flag=True,
              help="also print what bounds each run's makespan (bounds, what the GPUs held "
              "while jobs waited, why placements failed, the last jobs to finish; replay: "
              "sparse's reason per seed against kube-shared and FGD); the report has it "
              "either way")
@click.option("--workers", "-j", default=os.cpu_count() or 1, show_default=True)
@click.option("--out", default=None, help="results folder (default results/replay-<time>)")
def replay(workload, nodes, policies, seeds, mode, rec_share, n_jobs, overload, load, mix, pad,
           pad_spread, oom_bump, holdout_rows, interference, queue_orders, queue_bands,
           pass_over, declared_share, explain, workers, out) -> None:
    """Time replay: queueing, retries, durations, interference slowdowns."""
    from bench.sim.report import write_replay

    command = "sparse-bench " + shlex.join(sys.argv[1:])
    folder = _out_dir(out, "replay")
    if workload == "rec-mix":
        from bench.sim.recmix import DEFAULT_MIX
        from bench.sim.recmix_replay import split_policy
        from bench.sim.recmix_report import write_recmix

        for p in policies:
            try:
                split_policy(p)
            except ValueError as exc:
                raise click.BadParameter(str(exc), param_hint="--policy") from None
        kw = {"nodes_path": nodes, "n_jobs": n_jobs or 1000, "overload": overload,
              "load": load, "mix": mix or DEFAULT_MIX, "pad": pad, "pad_spread": pad_spread,
              "oom_bump": oom_bump, "holdout_only": holdout_rows,
              "interference": interference, "queue_bands": queue_bands}
        jobs = [(workload, p, s, {**kw, "mode": m, "queue_order": q}) for q in queue_orders
                for m in mode for p in policies for s in parse_seeds(seeds)]
        runs = _run_all(jobs, _recmix_job, workers,
                        lambda j: f"{j[3]['mode']} {j[3]['queue_order']} {j[1]} seed {j[2]}",
                        folder / "runs.jsonl")
        if explain:
            from bench.sim.recmix_explain import explain_markdown

            click.echo("\n".join(explain_markdown(runs)))
        click.echo(f"report: {write_recmix(runs, folder, command)}")
        return
    kw = {"nodes_path": nodes, "rec_share": rec_share, "n_jobs": n_jobs, "overload": overload,
          "load": load, "queue_bands": queue_bands, "declared_share": declared_share,
          "pass_over_s": math.inf if pass_over is None else pass_over}
    jobs = [(workload, p, s, {**kw, "mode": m, "queue_order": q}) for q in queue_orders
            for m in mode for p in policies for s in parse_seeds(seeds)]
    runs = _run_all(jobs, _replay_job, workers,
                    lambda j: f"{j[3]['mode']} {j[3]['queue_order']} {j[1]} seed {j[2]}",
                    folder / "runs.jsonl")
    path = write_replay(runs, folder, command)
    if explain:
        from bench.sim.replay_explain import explain_markdown as replay_explain

        click.echo("\n".join(replay_explain(runs)))
    click.echo(f"report: {path}")


def _locality_job(args: tuple) -> object:
    from bench.sim.locality import run_locality

    workload, scenario, mode, locality, seed, kw = args
    return run_locality(workload, seed, locality=locality, scenario=scenario, mode=mode, **kw)


@main.command()
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
              help="with the term, delay scheduling too (extender/placement/delay.py)")
@click.option("--out", default=None, help="results folder (default results/locality-<time>)")
def locality(workload, topology, scenario, mode, seeds, n_jobs, rec_share, load, workers,
             score, delay, out) -> None:
    """Embedding locality: JCT and makespan with and without the locality term."""
    from bench.sim.locality_report import write_locality
    from extender.placement.locality import LocalityWeights

    kw = {"n_jobs": n_jobs, "rec_share": rec_share, "load": load, "topology": topology,
          "weights": LocalityWeights(score=score), "delay": delay}
    jobs = [(workload, sc, m, loc, s, kw) for m in mode for sc in scenario
            for loc in (False, True) for s in parse_seeds(seeds)]
    folder = _out_dir(out, "locality")
    runs = _run_all(jobs, _locality_job, workers,
                    lambda j: f"{j[2]} {j[1]} {'on' if j[3] else 'off'} seed {j[4]}",
                    folder / "runs.jsonl")
    path = write_locality(runs, folder, "sparse-bench " + shlex.join(sys.argv[1:]))
    click.echo(f"report: {path}")


@main.command("locality-sweep")
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
        folder = _out_dir(out, "locality-sweep")
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
    folder = _out_dir(out, "locality-sweep")
    runs = _run_all(jobs, sweep_job, workers,
                    lambda j: f"{j[0]}={j[1]:g} {'on' if j[3] else 'off'} seed {j[2]}",
                    folder / "runs.jsonl")
    with (folder / "runs.jsonl").open("a") as sink:  # the folder holds every run it reports
        sink.writelines(json.dumps(r.to_json()) + "\n" for r in given)
    runs = given + runs

    path = write_sweep(runs, folder, "sparse-bench " + shlex.join(sys.argv[1:]), topology)
    click.echo(f"report: {path}")


@main.command()
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--out", required=True, help="folder for the merged report")
@click.option("--command", "commands", multiple=True,
              help="rec-mix: a command that made the sources, listed in the report")
@click.option("--note", default="", help="rec-mix: a paragraph put under the header")
def report(sources, out, commands, note) -> None:
    """Rebuild an `fgd` or `replay -w rec-mix` report from the runs.jsonl of result folders
    (or, for `fgd`, from a written report's runs.csv and curves.json; earlier sources win)."""
    from bench.sim.fgd import FgdRun
    from bench.sim.report import runs_from_report, write_fgd

    docs = []
    for src in sources:
        path = Path(src)
        if path.is_dir() and not (path / "runs.jsonl").exists():  # a kept report folder
            docs += [r.to_json() for r in runs_from_report(path)]
            continue
        path = path / "runs.jsonl" if path.is_dir() else path
        docs += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if docs and all("sm_util_mean" in d for d in docs):
        from bench.sim.recmix_replay import RecMixRun
        from bench.sim.recmix_report import write_recmix

        unique = {(d["mode"], d["policy"], d["seed"]): d for d in docs}
        runs = [RecMixRun(**d) for d in unique.values()]
        click.echo(f"report: {write_recmix(runs, Path(out), '`; `'.join(commands), note)}")
        return
    runs, seen = [], set()
    for doc in docs:
        run = FgdRun.from_json(doc)
        key = (run.workload, run.policy, run.seed, run.tune)
        if key not in seen:
            seen.add(key)
            runs.append(run)
    click.echo(f"report: {write_fgd(runs, Path(out))}")


@main.group()
def interference() -> None:
    """The learned pairwise interference model: train on measured pairs, score pair files."""


@interference.command("train")
@click.option("--out", default=None, help="folder for the model, pair tables and report "
              "(default results/interference-<time>)")
@click.option("--install", is_flag=True, help="also ship the result: the model to "
              "extender/interference/data/, the pair tables to bench/data/gavel/")
@click.option("--seed", default=0, show_default=True, help="held-out split and fold seed")
@click.option("--no-cv", is_flag=True, help="skip the cross-validation (faster)")
def interference_train(out, install, seed, no_cv) -> None:
    """Fit the pair model on Gavel's measured pairs; print train, held-out and CV scores."""
    import shutil

    from bench.interference.training import train

    folder = _out_dir(out, "interference")
    report = train(folder, seed=seed, cv=not no_cv)
    for key in ("train", "heldout", "cv_unseen_pairs", "cv_unseen_family_pairs"):
        if key in report:
            r = report[key]
            click.echo(f"{key:24s} n={r['n']:5d}  R2={r['r2']:.3f}  MAE={r['mae']:.4f}")
    if install:
        root = Path(__file__).resolve().parent.parent
        shutil.copy(folder / "pair_model.json",
                    root / "extender" / "interference" / "data" / "pair_model.json")
        for name in ("gavel_pairs_train.csv", "gavel_pairs_heldout.csv", "report.json"):
            target = "pair_model_report.json" if name == "report.json" else name
            shutil.copy(folder / name, root / "bench" / "data" / "gavel" / target)
    click.echo(f"model: {folder / 'pair_model.json'}")


@interference.command("evaluate")
@click.option("--pairs", "pairs_path", required=True,
              type=click.Path(exists=True, dir_okay=False),
              help="CSV with a_gpu_util, a_mem_util, a_mem_mib, b_gpu_util, b_mem_util, "
              "b_mem_mib, a_speed (utilisations in %, measured solo)")
@click.option("--model", "model_path", default=None,
              type=click.Path(exists=True, dir_okay=False),
              help="model JSON (default: the shipped extender/interference/data/pair_model.json)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def interference_evaluate(pairs_path, model_path, as_json) -> None:
    """R2 and MAE of the model's predicted a_speed on a pair file."""
    from bench.interference.training import evaluate, read_pairs
    from extender.interference.pairmodel import PairModel, default_pair_model

    try:
        model = PairModel.load(model_path) if model_path else default_pair_model()
    except (OSError, ValueError, KeyError, TypeError) as exc:  # JSONDecodeError is a ValueError
        raise click.ClickException(f"{model_path}: not a pair model ({exc})") from None
    if model is None:
        raise click.ClickException("no shipped pair model; run `sparse-bench interference "
                                   "train --install` or pass --model")
    try:
        table = read_pairs(pairs_path)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    result = {"pairs": str(pairs_path), **evaluate(model, table)}
    if as_json:
        click.echo(json.dumps(result))
    else:
        click.echo(f"{pairs_path}: n={result['n']}  R2={result['r2']:.3f}  "
                   f"MAE={result['mae']:.4f}")


@main.command("list")
def list_() -> None:
    """Known workloads and policies."""
    from bench.sim.trace import WORKLOADS
    from extender.placement.policies import REGISTRY

    click.echo(json.dumps({"workloads": WORKLOADS, "policies": sorted(REGISTRY)}, indent=1))


if __name__ == "__main__":
    main()
