"""`sparse-bench losses`: where the unallocated GPUs sit."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import click

from bench.commands.common import out_dir, run_fgd_protocol


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


@click.command()
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
    the free capacity when the first whole-GPU pod fails and at 100 % against the pods coming
    in between (slivers below the smallest / median coming share, CPU or memory, models), and
    each policy minus FGD from the same seeds."""
    from bench.sim import losses as lo
    from bench.sim.report import md_table, write_fgd

    if sources:
        runs = _read_runs(sources)
        folder = Path(out) if out else None
    else:
        folder = out_dir(out, "losses")
        runs = run_fgd_protocol(workloads, policies, seeds, tune, nodes, workers, folder)
    tab = lo.table(runs)
    if not len(tab):
        raise click.ClickException("no run carries a loss breakdown (re-run with `fgd`)")
    snap = [c for c in lo.SNAP_COLUMNS if c in tab.columns]
    ids = ["workload", "policy", "seeds"]
    click.echo("GPUs, mean over seeds; free capacity by reason, then failed request by shape:")
    click.echo(md_table(tab.drop(columns=snap), "{:.1f}"))
    if tab[snap].notna().any().any():
        for prefix, when in (("fail_", "when the first whole-GPU pod fails"),
                             ("end_", "at arrived = 100 %")):
            cols = ["whole_fail_pct"] * (prefix == "fail_") + [
                c for c in snap if c.startswith(prefix)]
            part = tab[ids + cols].rename(columns={c: c.removeprefix(prefix) for c in cols})
            click.echo(f"\nfree GPU capacity {when}, against the GPU pods arriving from that "
                       "failure to 100 % (bench/sim/losses.py snapshot):")
            click.echo(md_table(part, "{:.1f}"))
    for policy in sorted(set(tab.policy) - {"fgd"}):
        diff = lo.against(tab, policy)
        if len(diff):
            click.echo(f"\n{policy} minus fgd (same seeds; negative = fewer GPUs lost there):")
            click.echo(md_table(diff, "{:+.1f}"))
    if folder is not None:
        click.echo(f"report: {write_fgd(runs, folder, 'sparse-bench ' + shlex.join(sys.argv[1:]))}")
