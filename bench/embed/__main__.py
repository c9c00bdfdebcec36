"""``python -m bench.embed``: the node cache's microbenchmarks (latency paths, hit ratio vs
Belady), a Markdown report with a plot and the raw JSON under ``--out``."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import click

from bench.embed.hitratio import run_hitratio
from bench.embed.latency import at_latency, run_latency
from embed.cache import LFU_SETTINGS


def _plot(hit: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shares = [r["share"] * 100 for r in hit]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for key, label, style in (("belady", "Belady (offline optimum)", "k-o"),
                              ("lfu", "redis allkeys-lfu (the node cache)", "C0-s"),
                              ("lru", "redis allkeys-lru", "C1-^"),
                              ("static_top_k", "top-k oracle (knows popularity, pre-warmed)",
                               "C2:")):
        if key in hit[0]:
            ax.plot(shares, [r[key] for r in hit], style, label=label)
    ax.set_xscale("log")
    ax.set_xticks(shares, [f"{s:g} %" for s in shares])
    ax.set_xlabel("cache size (share of the table's rows)")
    ax.set_ylabel("hit ratio (per-batch unique lookups)")
    r = hit[0]
    ax.set_title(f"Zipf({r['alpha']}) over {r['rows']:.0e} rows, {r['lookups']} lookups")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _table(rows: list[dict], cols: list[tuple[str, str, str]]) -> str:
    lines = ["| " + " | ".join(c[1] for c in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(format(r[c[0]], c[2]) if isinstance(r[c[0]], float)
                                       else str(r[c[0]]) for c in cols) + " |")
    return "\n".join(lines)


@click.command()
@click.option("--out", default=None, help="results folder (default results/embed-<time>)")
@click.option("--rows", default=200_000, show_default=True, help="latency: table rows")
@click.option("--batches", default=40, show_default=True, help="latency: batches per path")
@click.option("--hit-rows", default=10_000_000, show_default=True, help="hit ratio: table rows")
@click.option("--hit-batches", default=6000, show_default=True,
              help="hit ratio: batches (6,000 fill a 5 % cache of 10^7 rows many times over)")
@click.option("--small-rows", default=0, show_default=True,
              help="hit ratio: a second, smaller table whose caches fill (0 = skip)")
@click.option("--policies", default="allkeys-lfu", show_default=True,
              help="hit ratio: Redis eviction policies to replay")
@click.option("--skip-latency", is_flag=True)
@click.option("--skip-hitratio", is_flag=True)
def main(out, rows, batches, hit_rows, hit_batches, small_rows, policies, skip_latency,
         skip_hitratio) -> None:
    """Embedding cache microbenchmarks (real redis-servers, toxiproxy)."""
    folder = Path(out) if out else Path("results") / f"embed-{time.strftime('%Y%m%d-%H%M%S')}"
    folder.mkdir(parents=True, exist_ok=True)
    report = ["# Embedding cache microbenchmarks", "",
              f"`python -m bench.embed {shlex.join(sys.argv[1:])}`", ""]
    result: dict = {}
    if not skip_latency:
        lat = run_latency(rows=rows, batches=batches, progress=click.echo)
        half = at_latency(lat, "store", 0.5)
        lat.append(half)
        lat.append(at_latency(lat, "local-miss", 0.5))
        by = {r["path"]: r for r in lat}
        ratios = {p: by[p]["lookups_per_s"] / half["lookups_per_s"]
                  for p in ("local-hit", "local-hit-redis", "process-hit")}
        far = by["store+2ms"]["lookups_per_s"]
        result["latency"] = lat
        result["over_store_at_0.5ms"] = ratios
        result["local_hit_over_store_at_2ms"] = by["local-hit"]["lookups_per_s"] / far
        report += ["## Lookup paths (batch 4,096 ids, dim 64, fp32)", "",
                   _table(lat, [("path", "path", ""), ("p50_ms", "p50 ms", ".2f"),
                                ("p99_ms", "p99 ms", ".2f"),
                                ("lookups_per_s", "lookups/s", ",.0f"),
                                ("lookups_per_s_at_p50", "lookups/s at p50", ",.0f")]), "",
                   "Throughput against the store at +0.5 ms: local hit (the node cache's "
                   f"shared-memory tier) **{ratios['local-hit']:.2f}x** (goal >= 5x); a hit in "
                   f"the node-local Redis {ratios['local-hit-redis']:.2f}x; in-process "
                   f"{ratios['process-hit']:.2f}x. Against the store at +2 ms: local hit "
                   f"{result['local_hit_over_store_at_2ms']:.2f}x.", ""]
        click.echo("over store+0.5ms: " + ", ".join(f"{p} {r:.2f}x" for p, r in ratios.items()))
    if not skip_hitratio:
        for n in (hit_rows, small_rows):
            if not n:
                continue
            hr = run_hitratio(rows=n, batches=hit_batches, progress=click.echo,
                              policies=tuple(policies.split(",")))
            result[f"hitratio_{n}"] = hr
            _plot(hr, folder / f"hitratio-{n}.png")
            report += [f"## Hit ratio vs cache size, next to Belady ({n:,} rows)", "",
                       _table(hr, [c for c in [
                           ("share", "cache", ".0%"), ("capacity", "rows", ""),
                           ("belady", "Belady", ".3f"), ("static_top_k", "top-k oracle", ".3f"),
                           ("lfu", "LFU (redis)", ".3f"), ("lru", "LRU (redis)", ".3f"),
                           ("lfu_over_belady", "LFU / Belady", ".3f"),
                           ("lfu_held", "keys held", ""), ("lfu_evicted", "evictions", "")]
                           if c[0] in hr[0]]), "",
                       f"Redis settings: {LFU_SETTINGS}; the top-k oracle knows the "
                       "popularity and holds the top ids from the first lookup (the bound of "
                       "any frequency-based online cache on this stationary trace).", "",
                       f"![hit ratio](hitratio-{n}.png)", ""]
    (folder / "results.json").write_text(json.dumps(result, indent=1))
    (folder / "report.md").write_text("\n".join(report))
    click.echo(f"report: {folder / 'report.md'}")


if __name__ == "__main__":
    main()
