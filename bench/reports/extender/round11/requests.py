"""Per-request CPU of filter + prioritize, extender against the null server: the
distribution (p50 / p90 / p99 / p99.9) and, for the extender's requests above its p99, what
the request did that others did not (nodes priced by the node verdicts and the cost cache,
a re-read of the learned mix, a shape's first request).

The pods, servers and order of ``python -m bench.latency.cpu`` (same warm-up, same bodies);
each cycle's process CPU time is kept instead of the sum.

    .venv/bin/python bench/reports/extender/round11/requests.py --nodes 5000 --requests 1000
"""

from __future__ import annotations

import asyncio
import time

import click
import numpy as np
from aiohttp.test_utils import TestClient, TestServer

from bench.latency.cluster import request_bodies, synthetic_inventory
from bench.latency.cpu import WARM_UP, _cycle
from bench.latency.servers import extender_app, null_app
from extender.cli import use_fast_event_loop
from extender.http.keys import SCHEDULER
from extender.verbs import costcache


async def per_request(apps: dict, bodies: list[bytes], count: int
                      ) -> tuple[np.ndarray, np.ndarray, list[dict]]:
    scheduler = apps["extender"][SCHEDULER]
    verdicts, cache, policy = scheduler.node_verdicts, scheduler.cost_cache, scheduler.policy
    clients = {k: TestClient(TestServer(a)) for k, a in apps.items()}
    spent = {k: np.zeros(count) for k in apps}
    notes: list[dict] = []
    try:
        for c in clients.values():
            await c.start_server()
        for body in bodies[:WARM_UP]:
            for c in clients.values():
                await _cycle(c, body)
        for i, body in enumerate(bodies[WARM_UP:]):
            before = (verdicts.computed, cache.computed_nodes, policy._frag.model,
                      len(verdicts._entries))
            for kind, c in clients.items():
                started = time.process_time()
                await _cycle(c, body)
                spent[kind][i] = time.process_time() - started
            shapes = len(verdicts._entries)
            notes.append({"verdict_nodes": verdicts.computed - before[0],
                          "cache_nodes": cache.computed_nodes - before[1],
                          "reread": policy._frag.model is not before[2],
                          "new_shape": shapes != before[3]})
    finally:
        for c in clients.values():
            await c.close()
    return spent["extender"] * 1000, spent["null"] * 1000, notes


@click.command()
@click.option("--nodes", default=5000, show_default=True)
@click.option("--gpus", default=8, show_default=True)
@click.option("--candidates", default=500, show_default=True)
@click.option("--requests", "count", default=1000, show_default=True)
@click.option("--fill-all", "fill", type=int, default=None,
              help="Experiment: costcache.FILL_ALL set to this (default: as shipped).")
@click.option("--top", default=15, show_default=True, help="Slowest requests listed.")
def main(nodes: int, gpus: int, candidates: int, count: int, fill: int | None,
         top: int) -> None:
    use_fast_event_loop()
    if fill is not None:
        costcache.FILL_ALL = fill
    inventory = synthetic_inventory(nodes, gpus)
    bodies = request_bodies(inventory, count + WARM_UP, min(candidates, nodes), False)
    apps = {"extender": extender_app(nodes, gpus), "null": null_app()}
    ours, null, notes = asyncio.run(per_request(apps, bodies, count))
    qs = (50, 90, 99, 99.9)
    click.echo(f"{nodes} nodes, {min(candidates, nodes)} NodeNames, {count} pods; ms CPU per"
               " pod (client and server)")
    for name, xs in (("extender", ours), ("null", null)):
        row = "  ".join(f"p{q:g} {np.percentile(xs, q):.2f}" for q in qs)
        click.echo(f"  {name:9} mean {xs.mean():.2f}  {row}  max {xs.max():.2f}")
    ratio = "  ".join(f"p{q:g} {np.percentile(ours, q) / np.percentile(null, q):.2f}x"
                      for q in qs)
    click.echo(f"  ratio     mean {ours.mean() / null.mean():.2f}x  {ratio}")
    priced = np.array([n["verdict_nodes"] > 0 or n["cache_nodes"] > 0 for n in notes])
    click.echo(f"  requests that priced nodes: {priced.sum()} of {count}; extender mean"
               f" {ours[priced].mean() if priced.any() else 0:.2f} ms there,"
               f" {ours[~priced].mean():.2f} ms elsewhere; CPU share of those requests"
               f" {ours[priced].sum() / ours.sum():.0%}")
    click.echo(f"  above null (sum over the run, per pod): all {ours.mean() - null.mean():.3f} ms,"
               f" from pricing requests {(ours[priced] - null[priced]).sum() / count:.3f},"
               f" from the others {(ours[~priced] - null[~priced]).sum() / count:.3f}")
    rereads = sum(n["reread"] for n in notes)
    new = sum(n["new_shape"] for n in notes)
    click.echo(f"  mix re-reads: {rereads}; shapes first seen: {new}")
    p99 = np.percentile(ours, 99)
    click.echo(f"  slowest {top} (extender ms, null ms, verdict nodes, cost-cache nodes, why):")
    for i in np.argsort(-ours)[:top].tolist():
        n = notes[i]
        why = ", ".join(w for w, on in (("mix re-read", n["reread"]),
                                         ("new shape", n["new_shape"])) if on)
        mark = "*" if ours[i] > p99 else " "
        click.echo(f"   {mark}#{i + WARM_UP:5d} {ours[i]:7.2f} {null[i]:6.2f}"
                   f" {n['verdict_nodes']:6d} {n['cache_nodes']:6d}  {why}")


if __name__ == "__main__":
    main()
