"""Helpers the sparse-bench commands share: seed lists, the run pool with its progress bar and
JSON-lines sink, the results folder."""

from __future__ import annotations

import json
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

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


def run_all(jobs: list[tuple], fn, workers: int, label, sink: Path | None = None) -> list:
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


def out_dir(out: str | None, experiment: str) -> Path:
    if out:
        return Path(out)
    return Path("results") / f"{experiment}-{time.strftime('%Y%m%d-%H%M%S')}"


def fgd_job(args: tuple) -> object:
    # module-level (fgd and losses share it) so pool workers can import it by name
    from bench.sim.fgd import run_fgd

    workload, policy, seed, tune, nodes = args
    return run_fgd(workload, policy, seed, tune=tune, nodes_path=nodes)


def run_fgd_protocol(workloads, policies, seeds: str, tune: float, nodes: str | None,
                     workers: int, folder: Path) -> list:
    """Every workload x policy x seed under the FGD protocol (``all`` = the 13 published
    workloads), kept in ``folder/runs.jsonl`` as each finishes; ``fgd`` and ``losses`` run it."""
    from bench.sim.trace import WORKLOADS

    if "all" in workloads:
        workloads = WORKLOADS
    jobs = [(w, p, s, tune, nodes) for w in workloads for p in policies
            for s in parse_seeds(seeds)]
    return run_all(jobs, fgd_job, workers, lambda j: f"{j[0]} {j[1]} seed {j[2]}",
                   folder / "runs.jsonl")
