"""`sparse-bench replay`: time replay of openb workloads or the rec-mix."""

from __future__ import annotations

import math
import os
import shlex
import sys

import click

from bench.commands.common import out_dir, parse_seeds, run_all


def _replay_job(args: tuple) -> object:
    from bench.sim.replay import run_replay

    workload, policy, seed, kw = args
    return run_replay(workload, policy, seed, **kw)


def _recmix_job(args: tuple) -> object:
    from bench.sim.recmix_replay import run_recmix

    _, policy, seed, kw = args
    return run_recmix(policy, seed, **kw)


@click.command()
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
    folder = out_dir(out, "replay")
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
        runs = run_all(jobs, _recmix_job, workers,
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
    runs = run_all(jobs, _replay_job, workers,
                   lambda j: f"{j[3]['mode']} {j[3]['queue_order']} {j[1]} seed {j[2]}",
                   folder / "runs.jsonl")
    path = write_replay(runs, folder, command)
    if explain:
        from bench.sim.replay_explain import explain_markdown as replay_explain

        click.echo("\n".join(replay_explain(runs)))
    click.echo(f"report: {path}")
