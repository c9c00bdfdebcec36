"""The policy's part of a filter, pod by pod, with the price term on and off: where the
tail (p99, p99.9, max) comes from when the learned mix is re-read and its value table solved.
Modes: ``inline`` (the table solved by the first share pod after a re-read), ``off`` (price
weight 0), ``thread`` and ``process`` (the policy deferred, the extender's adapter
``extender.pricesolver`` solving in a worker thread or process and polled after each pod, as
the extender does after each verb; the pods run back to back, as in a burst, while it solves).

Share pods of the gen-gpushare80 sizes (50-810 milli) on 500 nodes x 8 GPUs (the latency
bench's cluster, 30 % booked), 500 candidates each, through the extender's cost cache, one
random booking or release after each pod (so nodes change as in a burst). Wall time of
``fit`` + ``node_costs`` per pod; the first 50 pods (the cache filling) left out. The value
tables' own solve times are printed for the inline and thread runs (the process's are not
seen here); for the deferred ones how many tables were installed and dropped.

    PYTHONPATH=. python bench/reports/fgd-heldout/share-heavy-pack/filter_tail.py \
        [PODS [MODE ...]]   # default 1500 pods, inline off inline off
"""

from __future__ import annotations

import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from bench.latency.cluster import half_occupancy, pod, synthetic_inventory
from extender.demand import pod_demand
from extender.interference import default_matrix
from extender.placement import ClusterState, assign, fit, node_costs, reservation_for
from extender.placement.policies import share_price, sparse, sparse_inputs
from extender.pricesolver import PriceSolver, worker_pool
from extender.protocol import pod_from_dict
from extender.verbs.costcache import CachedPolicy, CostCache

SIZES = [810, 650, 590, 550, 470, 460, 370, 320, 230, 160, 50]
SOLVES: list[float] = []


def _timed_value_table(*args, **kwargs):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    out = share_price.value_table(*args, **kwargs)
    SOLVES.append((time.perf_counter() - start) * 1000)
    return out


def _timed_solve(job: share_price.PriceJob) -> share_price.PriceTable:
    return share_price.PriceTable(job, *_timed_value_table(job.tasks, job.start))


sparse_inputs.solve = _timed_solve  # the inline policy's solves, timed


def run(mode: str, pods: int, seed: int = 3) -> None:
    rng = random.Random(seed)
    inv = synthetic_inventory(500, 8)
    state = ClusterState.build(inv, default_matrix(), half_occupancy(inv, 0.3))
    SOLVES.clear()
    start = time.perf_counter()
    deferred = mode in ("thread", "process")
    policy = sparse.Sparse(price_weight=0.0 if mode == "off" else 1.0,
                           price_solve=sparse.DEFERRED if deferred else sparse.INLINE)
    made = (time.perf_counter() - start) * 1000
    solver = None
    if mode == "thread":
        solver = PriceSolver(policy, lambda: ThreadPoolExecutor(1), _timed_value_table)
    elif mode == "process":
        solver = PriceSolver(policy, worker_pool)
        solver.start()
        while solver.starting:  # its imports are not a pod's work
            time.sleep(0.05)
    cache, names, booked, times = CostCache(), sorted(inv.nodes), [], []
    for i in range(pods):
        body = pod(i, rng)
        body["spec"]["containers"][0]["resources"]["limits"]["sparse.io/gpu-milli"] = str(
            rng.choice(SIZES))
        demand = pod_demand(pod_from_dict(body))
        candidates = rng.sample(names, 500)
        start = time.perf_counter()
        result = fit(state, demand, candidates)
        node_costs(state, demand, result, CachedPolicy(policy, cache))
        times.append((time.perf_counter() - start) * 1000)
        if solver is not None:
            solver.poll()  # after the verb, as the extender does
        fitting = [result.names[k] for k in np.flatnonzero(result.fits)]
        if booked and (rng.random() < 0.5 or not fitting):
            state.unapply(booked.pop(rng.randrange(len(booked))))
        elif fitting:
            choice = assign(state, demand, rng.choice(fitting), policy)
            r = reservation_for(demand, choice, state, 0.0, None)
            state.apply(r)
            booked.append(r.pod_uid)
    if solver is not None:
        solver.close()
    ms = np.array(times[50:])
    solved = (f"; value tables solved (ms) {[round(s, 1) for s in SOLVES]}"
              if SOLVES else "")
    if solver is not None:
        solved += f"; installed {solver.installed}, dropped {solver.dropped}"
    print(f"{mode}: policy made in {made:.1f} ms; per pod mean {ms.mean():.2f}, "
          f"p50 {np.percentile(ms, 50):.2f}, p99 {np.percentile(ms, 99):.2f}, "
          f"p99.9 {np.percentile(ms, 99.9):.2f}, max {ms.max():.1f} ms; first pod "
          f"{times[0]:.1f} ms; slowest six {np.sort(ms)[-6:].round(1).tolist()}" + solved,
          flush=True)


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1500
    for name in sys.argv[2:] or ("inline", "off", "inline", "off"):
        run(name, count)
