"""Filter + prioritize latency at one pod at a time, with a pause between pods as the
scheduler leaves one (its own filtering, scoring and binding of each pod), over enough pods
for several re-reads of the learned mix.

The servers, inventory and request bodies of ``python -m bench.latency`` (5,000 nodes x 8
GPUs at half occupancy, 500 NodeNames per pod); each pod is sent once, in order, after 20
warm-up pods. The server runs the code of the current directory (``-m``); run from the root
of the checkout whose extender is measured, with this checkout's (``$THIS``) interpreter:

    cd <checkout> && $THIS/.venv/bin/python \
        $THIS/bench/reports/extender/round13/paced.py --pods 1000 --gap-ms 2

Prints the latency percentiles per block of pods (the learned mix is re-read every 256 pods)
and, where the extender exports it, how many renewals it made
(``sparse_extender_cache_renewals_total``).
"""

from __future__ import annotations

import asyncio
import json
import re
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

WARM_UP = 20


async def _run(port: int, bodies: list[bytes], gap_s: float) -> tuple[list[float], str]:
    base = f"http://127.0.0.1:{port}"
    latencies: list[float] = []
    async with aiohttp.ClientSession() as session:
        for i, body in enumerate(bodies):
            started = time.perf_counter()
            await cycle(session, port, body)
            if i >= WARM_UP:
                latencies.append((time.perf_counter() - started) * 1000)
            if gap_s:
                await asyncio.sleep(gap_s)
        async with session.get(f"{base}/metrics") as r:
            metrics = await r.text() if r.status == 200 else ""
    return latencies, metrics


@click.command()
@click.option("--nodes", default=5000, show_default=True)
@click.option("--gpus", default=8, show_default=True)
@click.option("--candidates", default=500, show_default=True)
@click.option("--pods", default=1000, show_default=True, help="Measured pods (after warm-up).")
@click.option("--gap-ms", default=2.0, show_default=True,
              help="Pause between two pods (0: back to back).")
@click.option("--block", default=256, show_default=True, help="Pods per reported block.")
@click.option("--out", type=click.Path(path_type=Path), default=None)
def main(nodes: int, gpus: int, candidates: int, pods: int, gap_ms: float, block: int,
         out: Path | None) -> None:
    inventory = synthetic_inventory(nodes, gpus)
    bodies = request_bodies(inventory, pods + WARM_UP, candidates, False)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bench.latency.servers", "extender",
                             str(port), str(nodes), str(gpus)])
    try:
        asyncio.run(wait_ready(port))
        ms, metrics = asyncio.run(_run(port, bodies, gap_ms / 1000))
    finally:
        proc.terminate()
        proc.wait(10)
    lat = np.array(ms)
    click.echo(f"{nodes} nodes x {gpus} GPUs, {candidates} NodeNames, {pods} pods one at a"
               f" time, {gap_ms:g} ms between pods")
    rows = {"all": lat}
    for start in range(0, len(lat), block):
        rows[f"pods {start}-{min(start + block, len(lat)) - 1}"] = lat[start:start + block]
    summary = {}
    for name, xs in rows.items():
        summary[name] = {"p50_ms": float(np.percentile(xs, 50)),
                         "p99_ms": float(np.percentile(xs, 99)),
                         "max_ms": float(xs.max())}
        click.echo(f"  {name:16} p50 {summary[name]['p50_ms']:6.2f}  p99"
                   f" {summary[name]['p99_ms']:6.2f}  max {summary[name]['max_ms']:6.2f} ms")
    renewed = re.findall(r'sparse_extender_cache_renewals_total\{result="(\w+)"\} (\S+)',
                         metrics)
    click.echo(f"  renewals: {dict(renewed) if renewed else 'n/a (no such metric)'}")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"summary": summary, "renewals": dict(renewed),
                                   "latencies_ms": ms}, indent=1))


if __name__ == "__main__":
    main()
