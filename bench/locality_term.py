"""python -m bench.locality_term: what the locality term costs per prioritize call.

A cluster of ``--nodes`` 8-GPU nodes, each with a node cache that publishes its content
(``encode_cache``: rows, table sizes, readers and their ids per step) for ``--tables-in-use``
of ``--tables`` tables, as a busy recommendation cluster looks; then, for pods that read 1-3
tables, the time of ``LocalityIndex.term`` over all nodes, next to the policy's own cost for
the same pod and nodes (``fit`` + ``node_costs``, the rest of prioritize's core) measured in
the same run. Prints milliseconds per call (median of ``--repeat``) and the ratio, twice: with
``--republish`` node caches publishing new rows between two calls (their caches warming: the
index keeps each pod shape's bonus per node and recomputes only those nodes), and with nothing
kept (every node recomputed, as after a change of the cluster-wide inputs: another candidate
set, a table's readers).
"""

from __future__ import annotations

import statistics
import time

import click
import numpy as np
import pandas as pd

from bench.sim.cluster import SimCluster
from extender.annotations import ANN_EMBEDDING_CACHE
from extender.placement import fit, make_policy, node_costs
from extender.placement.locality import EmbeddingSpec, LocalityIndex, encode_cache

ROW_BYTES = 64 * 4 + 64


CAP_ROWS = 16 * 2**30 // ROW_BYTES


def labels(k: int) -> dict[str, str]:
    return {"topology.kubernetes.io/zone": f"z{k % 2}", "topology.sparse.io/rack": f"r{k % 40}"}


def build_index(names: list[str], n_tables: int, in_use: int, rng: np.random.Generator
                ) -> tuple[LocalityIndex, dict[str, int], dict[str, tuple]]:
    """The index, the tables' sizes and per node what runs there (tables, readers, ids)."""
    sizes = {f"t{i:03d}": int(np.exp(rng.uniform(np.log(5e7), np.log(5e8))))
             for i in range(n_tables)}
    tables = sorted(sizes)
    ix = LocalityIndex()
    ix.set_store("store", set(names[:4]))
    running = {}
    for k, n in enumerate(names):
        used = rng.choice(tables, in_use, replace=False).tolist()
        readers = {t: int(rng.integers(1, 4)) for t in used}
        ids = {t: r * 200_000 for t, r in readers.items()}
        running[n] = (used, readers, ids)
        ix.observe_node(n, publication(running[n], sizes, CAP_ROWS // in_use), labels(k))
    return ix, sizes, running


def publication(running: tuple, sizes: dict[str, int], rows_each: int) -> dict[str, str]:
    used, readers, ids = running
    rows = dict.fromkeys(used, rows_each)
    return {ANN_EMBEDDING_CACHE: encode_cache(
        rows, {t: sizes[t] for t in used}, rows_each * len(used) * ROW_BYTES,
        CAP_ROWS * ROW_BYTES, 0.0, readers, ids)}


def median_ms(fn, repeat: int, between=None) -> tuple[float, float]:
    """Median milliseconds of ``fn``, wall clock and the thread's CPU time (on a loaded
    machine a call longer than a scheduler slice often waits a slice out: the CPU time is the
    work); ``between`` (untimed) runs before each call."""
    fn()  # warm caches (curves, sizes)
    wall, cpu = [], []
    for _ in range(repeat):
        if between is not None:
            between()
        t0, c0 = time.perf_counter(), time.thread_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
    return statistics.median(wall) * 1e3, statistics.median(cpu) * 1e3


@click.command()
@click.option("--nodes", default=1000, show_default=True)
@click.option("--tables", default=50, show_default=True)
@click.option("--tables-in-use", default=7, show_default=True, help="per node cache")
@click.option("--repeat", default=50, show_default=True)
@click.option("--seed", default=0, show_default=True)
@click.option("--republish", default=10, show_default=True,
              help="node caches publishing new rows between two calls")
def main(nodes: int, tables: int, tables_in_use: int, repeat: int, seed: int,
         republish: int) -> None:
    rng = np.random.default_rng(seed)
    names = [f"node-{i:04d}" for i in range(nodes)]
    frame = pd.DataFrame({"sn": names, "cpu_milli": 96000, "memory_mib": 786432, "gpu": 8,
                          "model": "V100M32"})
    pol = make_policy("sparse")
    sim = SimCluster(frame, names, pol)
    ix, sizes, running = build_index(names, tables, tables_in_use, rng)
    node_at = {n: k for k, n in enumerate(names)}

    def warm_some() -> None:  # caches warming: new rows, the same readers
        for n in rng.choice(names, min(republish, nodes), replace=False).tolist():
            rows_each = int(rng.integers(1, CAP_ROWS // tables_in_use))
            ix.observe_node(n, publication(running[n], sizes, rows_each), labels(node_at[n]))

    def forget() -> None:  # nothing kept: every node recomputed
        ix._memo.clear()

    d = sim.demand("pod", 4000, 16384, 1, 1000, "", job_class="recommendation")
    cand = sim.names[sim.candidates(d)].tolist()
    result = fit(sim.state, d, cand, explain=False)

    def policy() -> None:
        r = fit(sim.state, d, cand, explain=False)
        node_costs(sim.state, d, r, pol)

    base, base_cpu = median_ms(policy, repeat)
    click.echo(f"{nodes} nodes, {tables} tables, {tables_in_use} in use per cache; "
               f"fit + node_costs (baseline): {base:.2f} ms ({base_cpu:.2f} ms CPU)")
    for k in (1, 3):
        ts = tuple(sorted(rng.choice(sorted(sizes), k, replace=False).tolist()))
        for declared in (False, True):
            spec = EmbeddingSpec("store", ts, {t: sizes[t] // 5 for t in ts},
                                 ids_per_step=dict.fromkeys(ts, 200_000) if declared else None,
                                 steps=100_000 if declared else None,
                                 step_compute_ms=10.0 if declared else None)
            said = "declared (time score)" if declared else "absent (share score)"
            for how, between in ((f"{republish} caches republished", warm_some),
                                 ("nothing kept", forget)):
                ms, cpu = median_ms(lambda s=spec: ix.term(s, d, result.names), repeat,
                                    between)
                click.echo(f"term, {k} table(s), idsPerStep, steps and stepComputeMs {said},"
                           f" {how}: {ms:.2f} ms ({ms / base:.2f}x the baseline);"
                           f" CPU {cpu:.2f} ms ({cpu / base_cpu:.2f}x)")


if __name__ == "__main__":
    main()
