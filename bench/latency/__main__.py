"""python -m bench.latency: filter + prioritize latency of the extender vs a null server."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import click
import numpy as np

from bench.latency.cluster import request_bodies, synthetic_inventory
from bench.latency.servers import cycle, wait_ready
from bench.redis_server import free_port


async def _measure(port: int, bodies: list[bytes], concurrency: int,
                   shapes: list[tuple[str, ...]], seen: set[tuple[str, ...]]
                   ) -> dict[str, float]:
    """Each pod = filter then prioritize, as one scheduling cycle does; ``concurrency``
    cycles in flight (1 = the scheduler's serial cycle). ``shapes``: each body's
    (``shape_of``), and ``seen``: those the server was sent before, to report the first pod
    of each new shape apart (it prices every node); updated with this run's."""
    latencies: list[float] = []
    first: list[bool] = []
    queue = list(enumerate(bodies))
    conn = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=conn) as session:

        async def worker() -> None:
            while queue:
                i, body = queue.pop()
                shape = shapes[i]
                first.append(shape not in seen)
                seen.add(shape)
                started = time.perf_counter()
                await cycle(session, port, body)
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    ms = np.array(latencies) * 1000
    new = np.array(first)  # one per latency: both appended per pod
    rest = ms[~new] if (~new).any() else ms
    return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
            "pods_per_s": len(latencies) / elapsed,
            "new_shapes": int(new.sum()),
            "new_shape_p50_ms": float(np.percentile(ms[new], 50)) if new.any() else 0.0,
            "new_shape_max_ms": float(ms[new].max()) if new.any() else 0.0,
            "others_p99_ms": float(np.percentile(rest, 99))}


@click.command()
@click.option("--nodes", default=5000, show_default=True)
@click.option("--gpus", default=8, show_default=True)
@click.option("--candidates", default=500, show_default=True)
@click.option("--requests", "count", default=400, show_default=True,
              help="Pods per measurement (after the warm-up pods).")
@click.option("--warm-up", "warm_up", default=20, show_default=True,
              help="Pods sent to each server before measuring; the first pod of each shape"
                   " the warm-up did not send prices every node (each server gets the same).")
@click.option("--out", type=click.Path(path_type=Path), default=Path("results/latency.json"),
              show_default=True)
def main(nodes: int, gpus: int, candidates: int, count: int, warm_up: int, out: Path) -> None:
    """Filter + prioritize latency and throughput: NodeNames and full Node objects, each
    against a null server in the same run; prints the ratios."""
    inventory = synthetic_inventory(nodes, gpus)
    results: dict[str, dict[str, float]] = {}
    procs = {}
    try:
        for kind in ("extender", "null"):
            port = free_port()
            procs[kind] = (port, subprocess.Popen(
                [sys.executable, "-m", "bench.latency.servers", kind, str(port), str(nodes),
                 str(gpus)]))
        for port, _ in procs.values():
            asyncio.run(wait_ready(port))
        seen_by: dict[str, set[tuple[str, ...]]] = {kind: set() for kind in procs}
        for mode, full in (("NodeNames", False), ("full Nodes", True)):
            click.echo(f"building {count + warm_up} {mode} requests of {candidates} candidates"
                       " ...", err=True)
            shapes: list[tuple[str, ...]] = []
            bodies = request_bodies(inventory, count + warm_up, candidates, full,
                                    shapes=shapes)
            click.echo(f"  body size {len(bodies[0]) / 1024:.0f} KiB", err=True)
            for kind, (port, _) in procs.items():
                seen = seen_by[kind]  # the server keeps what it priced across modes
                asyncio.run(_measure(port, bodies[:warm_up], 1, shapes[:warm_up], seen))
                for conc in (1, 4):
                    results[f"{kind} | {mode} | c={conc}"] = asyncio.run(
                        _measure(port, bodies[warm_up:], conc, shapes[warm_up:], seen))
    finally:
        for _, proc in procs.values():
            proc.terminate()
            proc.wait(10)
    header = f"{'server | request | concurrency':40} {'p50 ms':>8} {'p99 ms':>8} {'pods/s':>8}"
    click.echo(f"\n{nodes} nodes x {gpus} GPUs at ~50% occupancy, {candidates} candidates\n")
    click.echo(header)
    for key, r in results.items():
        click.echo(f"{key:40} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} {r['pods_per_s']:8.0f}")
    click.echo("\nc=1, the first pod of each shape the server had not seen (it prices every"
               " node) and the others:")
    for key, r in results.items():
        if key.endswith("c=1") and r["new_shapes"]:
            click.echo(f"  {key:36} {r['new_shapes']:3d} first: p50 {r['new_shape_p50_ms']:.2f}"
                       f" max {r['new_shape_max_ms']:.2f} ms; others p99"
                       f" {r['others_p99_ms']:.2f} ms")
    click.echo("\nratios extender / null (p99; goals: NodeNames <= 1.5x the null's,"
               " full Nodes <= 0.5x):")
    for mode in ("NodeNames", "full Nodes"):
        ext, null = results[f"extender | {mode} | c=1"], results[f"null | {mode} | c=1"]
        click.echo(f"  {mode:11} p99 {ext['p99_ms']:.2f} ms vs {null['p99_ms']:.2f} ms ->"
                   f" {ext['p99_ms'] / null['p99_ms']:.2f}x; throughput (c=4)"
                   f" {results[f'extender | {mode} | c=4']['pods_per_s']:.0f} vs"
                   f" {results[f'null | {mode} | c=4']['pods_per_s']:.0f} pods/s")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    click.echo(f"\nwritten {out}")


if __name__ == "__main__":
    main()
