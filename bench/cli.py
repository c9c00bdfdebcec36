"""sparse-bench: trace-driven experiments on the extender's placement core.

    sparse-bench fgd --workload default --policy fgd --policy sparse --seeds 42-51 -j 2
    sparse-bench replay --policy kube-exclusive --policy sparse --seeds 42
"""

from __future__ import annotations

import json
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
              help="openb workload name or pod-list CSV path (needs creation/deletion times)")
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
@click.option("--workers", "-j", default=os.cpu_count() or 1, show_default=True)
@click.option("--out", default=None, help="results folder (default results/replay-<time>)")
def replay(workload, nodes, policies, seeds, mode, rec_share, n_jobs, overload, load, workers,
           out) -> None:
    """Time replay: queueing, retries, durations, interference slowdowns."""
    from bench.sim.report import write_replay

    kw = {"nodes_path": nodes, "rec_share": rec_share, "n_jobs": n_jobs, "overload": overload,
          "load": load}
    jobs = [(workload, p, s, {**kw, "mode": m}) for m in mode for p in policies
            for s in parse_seeds(seeds)]
    folder = _out_dir(out, "replay")
    runs = _run_all(jobs, _replay_job, workers, lambda j: f"{j[3]['mode']} {j[1]} seed {j[2]}",
                    folder / "runs.jsonl")
    path = write_replay(runs, folder, "sparse-bench " + shlex.join(sys.argv[1:]))
    click.echo(f"report: {path}")


@main.command()
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--out", required=True, help="folder for the merged report")
def report(sources, out) -> None:
    """Rebuild an `fgd` report from the runs.jsonl of one or more result folders."""
    from bench.sim.report import write_fgd

    runs = _read_runs(sources)
    click.echo(f"report: {write_fgd(runs, Path(out))}")


@main.command("list")
def list_() -> None:
    """Known workloads and policies."""
    from bench.sim.trace import WORKLOADS
    from extender.placement.policies import REGISTRY

    click.echo(json.dumps({"workloads": WORKLOADS, "policies": sorted(REGISTRY)}, indent=1))


if __name__ == "__main__":
    main()
