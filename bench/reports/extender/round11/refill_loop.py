"""A whole-inventory refill per shape, in a loop: the extender of ``bench.latency`` (half-booked
memory ledger), one request per pod shape after a re-read of the learned mix is forced (a new
fragmentation model over the same tasks, its value table solved before the clock starts).

    .venv/bin/python bench/reports/extender/round11/refill_loop.py 5000
"""

from __future__ import annotations

import asyncio
import sys
import time

import numpy as np

from bench.latency.cluster import request_bodies, synthetic_inventory
from bench.latency.servers import extender_app
from extender.http.keys import SCHEDULER
from extender.protocol import decode_extender_args
from extender.verbs.costcache import shape_key

nodes = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
s = extender_app(nodes, 8)[SCHEDULER]
bodies = request_bodies(synthetic_inventory(nodes, 8), 400, min(500, nodes), False)


async def prepare() -> list:
    out = []
    for body in bodies:
        args = decode_extender_args(body, "filter")
        demand = await s.demand_of(args.pod)
        out.append((demand, s.own_excluded(await s.view(), demand.uid), args.node_names))
    return out


items = asyncio.run(prepare())
verdicts, policy = s.node_verdicts, s.policy


def filter_(demand, state, names) -> None:  # type: ignore[no-untyped-def]
    v = verdicts.fits(policy, state, demand, names)
    verdicts.costs(policy, state, demand, v, np.flatnonzero(v.fits))


for item in items[:200]:
    filter_(*item)
shapes = list({shape_key(item[0]): item for item in items[200:]}.values())
for _ in range(4):
    policy._frag.set_workload(policy._mix.tasks())  # a re-read keeping the tasks
    policy._value_table()  # the LP off the clock
    spent = []
    for item in shapes:
        started = time.perf_counter()
        filter_(*item)
        spent.append((time.perf_counter() - started) * 1e6)
    print(f"{nodes} nodes, {len(shapes)} shapes after a re-read: {sum(spent) / 1e3:.1f} ms,"
          f" median {np.median(spent):.0f} us per shape")
