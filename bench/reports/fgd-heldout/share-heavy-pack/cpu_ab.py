"""CPU per filter + prioritize pod in one run: the extender as shipped (share price tables
solved in its worker process, whose CPU is counted with it), the same extender solving them
inline (in the request, as before) and in a worker thread, and the null server; the servers
take turns pod by pod, the first one changing with each pod (``bench.latency.cpu --rotate``).
In a run the app built first has measured up to 0.05 ms a pod more than the others (the same
app in another position did not), so the order of the modes is an argument: run it twice
with another order. The worker process's CPU is counted with its app (from /proc); a worker
thread's is counted with whichever app is served while it runs (process time is the whole
process's), so the thread mode's figure is not its own.

    PYTHONPATH=. python bench/reports/fgd-heldout/share-heavy-pack/cpu_ab.py \\
        [PODS [ROUNDS [MODE ...]]]   # default 1000 2 process inline thread
"""

from __future__ import annotations

import asyncio
import sys
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from bench.latency.cluster import request_bodies, synthetic_inventory
from bench.latency.cpu import WARM_UP, cpu_per_pod
from bench.latency.servers import extender_app, null_app
from extender.cli import use_fast_event_loop
from extender.http.keys import SCHEDULER
from extender.placement.policies.sparse import DEFERRED, INLINE
from extender.pricesolver import PriceSolver


def app_of(mode: str) -> web.Application:
    app = extender_app(500, 8, INLINE if mode == INLINE else DEFERRED)
    scheduler = app[SCHEDULER]
    if mode == "thread":
        scheduler.prices.close()
        scheduler.prices = PriceSolver(scheduler.policy, lambda: ThreadPoolExecutor(1))
    return app


def main() -> None:
    use_fast_event_loop()
    pods = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    modes = sys.argv[3:] or ["process", "inline", "thread"]
    inventory = synthetic_inventory(500, 8)
    for r in range(rounds):
        bodies = request_bodies(inventory, pods + WARM_UP, 500, False)
        apps = {mode: app_of(mode) for mode in modes}
        apps["null"] = null_app()
        row = asyncio.run(cpu_per_pod(apps, bodies, rotate=True))
        cells = ", ".join(f"{m} {row[m]:.3f} ms ({row[m] / row['null']:.3f}x)" for m in modes)
        installed = {m: apps[m][SCHEDULER].prices.installed for m in modes}
        print(f"round {r}: {cells}, null {row['null']:.3f} ms CPU/pod; tables installed"
              f" {installed}", flush=True)


if __name__ == "__main__":
    main()
