"""Per pod, the extender's own CPU time on its serving thread while the scheduler waits for
filter + prioritize (``/proc/<pid>/schedstat``, nanoseconds), next to the wall time: CPU time
does not grow when the machine's other tenants take the core, so two versions of the code
compare on a noisy machine where wall-clock percentiles do not.

The servers, inventory and bodies of ``python -m bench.latency`` (5,000 nodes x 8 GPUs at half
occupancy, 500 NodeNames, 20 warm-up pods, then ``--pods`` one at a time, the pod order of its
c=1 run). Work done between pods (the renewal's slices in idle time, with ``--gap-ms``) is not
any pod's: the scheduler does not wait for it. The server runs the code of the current
directory (``-m``); run from the root of the checkout measured, with this checkout's (``$THIS``)
interpreter (an older checkout lacks the client's helpers):

    cd <checkout> && $THIS/.venv/bin/python \
        $THIS/bench/reports/extender/round13/server_cpu.py --pods 400
"""

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

WARM_UP = 20


def _cpu_ns(pid: int) -> int:
    """CPU time of the process's main thread (the event loop), in ns."""
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


async def _run(port: int, pid: int, bodies: list[bytes], gap_s: float
               ) -> tuple[list[float], list[float]]:
    wall, cpu = [], []
    async with aiohttp.ClientSession() as session:
        for i, body in enumerate(bodies):
            before_cpu, started = _cpu_ns(pid), time.perf_counter()
            await cycle(session, port, body)
            took = time.perf_counter() - started
            used = _cpu_ns(pid) - before_cpu
            if i >= WARM_UP:
                wall.append(took * 1000)
                cpu.append(used / 1e6)
            if gap_s:
                await asyncio.sleep(gap_s)
    return wall, cpu


@click.command()
@click.option("--nodes", default=5000, show_default=True)
@click.option("--gpus", default=8, show_default=True)
@click.option("--candidates", default=500, show_default=True)
@click.option("--pods", default=400, show_default=True, help="Measured pods (after warm-up).")
@click.option("--gap-ms", default=0.0, show_default=True, help="Pause between two pods.")
@click.option("--out", type=click.Path(path_type=Path), default=None)
def main(nodes: int, gpus: int, candidates: int, pods: int, gap_ms: float,
         out: Path | None) -> None:
    inventory = synthetic_inventory(nodes, gpus)
    # bench.latency's c=1 run takes its bodies from the end of the list
    bodies = request_bodies(inventory, pods + WARM_UP, candidates, False)
    bodies = bodies[:WARM_UP] + bodies[WARM_UP:][::-1]
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bench.latency.servers", "extender",
                             str(port), str(nodes), str(gpus)])
    try:
        asyncio.run(wait_ready(port))
        wall, cpu = asyncio.run(_run(port, proc.pid, bodies, gap_ms / 1000))
    finally:
        proc.terminate()
        proc.wait(10)
    summary = {}
    for name, xs in (("wall", np.array(wall)), ("server CPU", np.array(cpu))):
        summary[name] = {f"p{q:g}": float(np.percentile(xs, q)) for q in (50, 90, 99)}
        summary[name]["max"] = float(xs.max())
        summary[name]["mean"] = float(xs.mean())
        row = "  ".join(f"{k} {v:6.2f}" for k, v in summary[name].items())
        click.echo(f"  {name:11} ms per pod: {row}")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"summary": summary, "wall_ms": wall, "cpu_ms": cpu},
                                  indent=1))


if __name__ == "__main__":
    main()
