"""``python -m bench.embed.warmup``: the node cache's warm-up, measured on the real engine, next
to the model the scheduler and the locality replay use (``extender.placement.cache_warmup``).

A fresh redis-server with the DaemonSet's LFU settings (``embed.cache.LFU_SETTINGS``) and a
``maxmemory`` that holds ``room`` rows of the real key format (measured on the same server),
filled on miss by the client's read-through code (``embed.cache.ReadThrough``, doorkeeper
included), in front of a store holding one table; each step looks up ``ids`` Zipf(``alpha``)
ids. Per step: the hit ratio of its distinct rows and the rows held, next to the model's
``hit(0, step x ids, room)`` and ``held``. Writes ``warmup.csv``, ``warmup.md`` and
``warmup.png`` under ``--out``.
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import click
import numpy as np
import pandas as pd

from bench.embed.zipf import ZipfIds
from bench.redis_server import RedisServer
from embed.cache import LFU_SETTINGS, ReadThrough
from embed.layout import TableMeta
from embed.store import EmbeddingStore, connect
from extender.placement.cache_warmup import warm_curve


def load_table(store: EmbeddingStore, rows: int, dim: int = 4, name: str = "t") -> None:
    data = np.random.default_rng(0).standard_normal((rows, dim)).astype(np.float32)
    store.write_table(TableMeta(name, rows, dim), [data])


def bounded_cache(store: EmbeddingStore, room: int | None, table: str = "t"
                  ) -> tuple[RedisServer, object]:
    """A node cache holding at most ``room`` rows of ``table`` (its used_memory with that
    many keys of the real format, measured on the same server), or unbounded."""
    server = RedisServer()
    cache = connect(server.url)
    for name, value in LFU_SETTINGS.items():
        cache.config_set(name, value)
    if room is not None:
        ReadThrough(cache, store, admission=False).lookup(table, np.arange(room))
        used = int(cache.info("memory")["used_memory"])
        cache.flushall()
        cache.config_set("maxmemory", str(used))
    return server, cache


def replay_warmup(store: EmbeddingStore, rows: int, room: int | None, ids: int, steps: int,
                  alpha: float = 1.05, seed: int = 0, table: str = "t"
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Per step: the hit ratio of its distinct rows, and the rows the cache held after it."""
    server, cache = bounded_cache(store, room, table)
    try:
        reader = ReadThrough(cache, store)
        zipf, rng = ZipfIds(rows, alpha, seed), np.random.default_rng(seed)
        hits, held = [], []
        for _ in range(steps):
            h0, m0 = reader.metrics.hits, reader.metrics.misses
            reader.lookup(table, zipf.sample(ids, rng))
            got = reader.metrics.hits - h0
            hits.append(got / max(got + reader.metrics.misses - m0, 1))
            held.append(int(cache.dbsize()))
        return np.array(hits), np.array(held)
    finally:
        server.stop()


def run_warmup(rows: int, rooms: list[int | None], ids: int, steps: int, alpha: float,
               seed: int = 0, progress=print) -> pd.DataFrame:
    """Measured and modelled curves, one row per room and step."""
    store_server = RedisServer()
    try:
        store = EmbeddingStore.from_url(store_server.url)
        load_table(store, rows)
        curve = warm_curve(rows, alpha, ids)
        out = []
        for room in rooms:
            hit, held = replay_warmup(store, rows, room, ids, steps, alpha, seed)
            cap = rows if room is None else int(held[-1])  # the rows the memory holds
            exposure = np.arange(steps) * float(ids)
            model = curve.hit(0.0, exposure, cap)
            out.append(pd.DataFrame({
                "room": room or rows, "step": np.arange(steps), "hit": hit,
                "model_hit": model, "held": held,
                "model_held": curve.held(0.0, exposure + ids, cap)}))
            last = slice(-max(steps // 3, 1), None)
            progress(f"room {room or 'unbounded'}: hit over the last third {hit[last].mean():.3f}"
                     f", model {model[last].mean():.3f}")
        return pd.concat(out, ignore_index=True)
    finally:
        store_server.stop()


def _plot(frame: pd.DataFrame, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, (room, g) in enumerate(frame.groupby("room", sort=True)):
        ax.plot(g["step"], g["hit"], f"C{i}-", lw=0.8, alpha=0.7,
                label=f"redis allkeys-lfu, room {room:,} rows")
        ax.plot(g["step"], g["model_hit"], f"C{i}--", lw=1.5, label="model (ideal LFU)")
    ax.set_xlabel("step")
    ax.set_ylabel("hit ratio of the step's distinct rows")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


@click.command()
@click.option("--rows", default=200_000, show_default=True)
@click.option("--ids", default=4096, show_default=True, help="ids per step")
@click.option("--steps", default=400, show_default=True)
@click.option("--alpha", default=1.05, show_default=True)
@click.option("--rooms", default="0.05,0.2,0",
              show_default=True, help="cache room as shares of the table (0 = unbounded)")
@click.option("--out", default=None, help="results folder (default results/warmup-<time>)")
def main(rows, ids, steps, alpha, rooms, out) -> None:
    """Node cache warm-up: real engine vs model."""
    folder = Path(out) if out else Path("results") / f"warmup-{time.strftime('%Y%m%d-%H%M%S')}"
    folder.mkdir(parents=True, exist_ok=True)
    shares = [float(s) for s in rooms.split(",")]
    frame = run_warmup(rows, [int(s * rows) if s > 0 else None for s in shares], ids, steps,
                       alpha, progress=click.echo)
    frame.to_csv(folder / "warmup.csv", index=False)
    title = f"Zipf({alpha}) over {rows:,} rows, {ids:,} ids a step"
    _plot(frame, folder / "warmup.png", title)
    thirds = []
    for room, g in frame.groupby("room", sort=True):
        for k, part in enumerate(np.array_split(g.index.to_numpy(), 3)):
            p = frame.loc[part]
            thirds.append(f"| {room:,} | {k + 1} | {p['hit'].mean():.3f} | "
                          f"{p['model_hit'].mean():.3f} | {int(p['held'].iloc[-1]):,} | "
                          f"{int(p['model_held'].iloc[-1]):,} |")
    lines = ["# Node cache warm-up: redis-server vs the model", "",
             f"`python -m bench.embed.warmup {shlex.join(sys.argv[1:])}`", "", title + ".", "",
             "| room (rows) | third of the run | hit, measured | hit, model | rows held at "
             "its end | model |", "|---|---|---|---|---|---|", *thirds, "",
             "![warm-up](warmup.png)", ""]
    (folder / "warmup.md").write_text("\n".join(lines))
    click.echo(f"report: {folder / 'warmup.md'}")


if __name__ == "__main__":
    main()
