"""`sparse-bench fgd`: the FGD paper protocol."""

from __future__ import annotations

import os
import shlex
import sys

import click

from bench.commands.common import DEFAULT_POLICIES, out_dir, run_fgd_protocol


@click.command()
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

    folder = out_dir(out, "fgd")
    runs = run_fgd_protocol(workloads, policies, seeds, tune, nodes, workers, folder)
    path = write_fgd(runs, folder, "sparse-bench " + shlex.join(sys.argv[1:]))
    click.echo(f"report: {path}")
