"""The Markdown tables of a report folder's end-to-end runs (``throughput-N-runK.json``, each
beside a ``.txt`` of the printed output whose first and last lines carry the 1-minute load):
per run and verbs, the stock scheduler's pods/s and median (before / after the extender's
runs; median: seconds from the scheduler's start until half the burst was bound), the null
extender's pods/s and ratio to stock, ours (pods/s: ratio to stock / ratio to the null of the
same verbs, median time to half the burst bound), the extender's CPU per bound pod (of which
its price worker), optionally the CPU per bound pod of all the run's processes, and the price
tables and log lines of the extender's runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click

HEAD = ("| run | load | verbs | stock pods/s (median) | null | ours, memory | ours, Redis"
        " | extender CPU ms/pod, memory / Redis (worker) |")
EVERYTHING = " all CPU ms/pod: stock / null / memory / Redis |"
LOAD = re.compile(r"load:? (\S+)")  # "load: 1.44 ..." or "load 1.44 ..."


def ours(r: dict, stock: float, null: float) -> str:
    rate = r["pods_per_s"]
    return f"{rate:.1f}: {rate / stock:.2f} / {rate / null:.2f} ({r['median_to_bind_s']:.2f} s)"


def everything(stock: dict, runs: dict, tag: str) -> str:
    """CPU per bound pod over every process of the run: stock / null / memory / Redis."""
    rows = (stock, runs[f"null extender{tag}"], runs[f"extender, shares, memory{tag}"],
            runs[f"extender, shares, redis{tag}"])
    totals = (sum(v for k, v in r["cpu_ms_per_pod"].items() if k != "extender children")
              for r in rows)  # the worker is in the extender's tree already
    return " / ".join(f"{t:.1f}" for t in totals)


def print_tables(folder: Path, runs: range, all_cpu: bool = False) -> None:
    """The tables of ``folder``'s runs ``runs`` at 500 and 5,000 nodes (missing runs left
    out); ``all_cpu``: with the column of every process's CPU per bound pod."""
    notes = []
    head, columns = (HEAD + EVERYTHING, 9) if all_cpu else (HEAD, 8)
    for nodes in (500, 5000):
        print(f"\n{nodes} nodes\n\n{head}\n" + "|---" * columns + "|")
        for k in runs:
            path = folder / f"throughput-{nodes}-run{k}.json"
            if not path.exists():
                continue
            results = json.loads(path.read_text())[str(nodes)]
            text = (folder / f"throughput-{nodes}-run{k}.txt").read_text().splitlines()
            load = [float(LOAD.search(ln).group(1)) for ln in (text[0], text[-1])]
            s1, s2 = results["stock kube-scheduler"], results["stock kube-scheduler (again)"]
            stock = (s1["pods_per_s"] + s2["pods_per_s"]) / 2
            for verbs, tag in (("two-call", ""), ("filter-one", " (filter-one)")):
                if f"null extender{tag}" not in results:  # a run of the other verbs only
                    continue
                null = results[f"null extender{tag}"]["pods_per_s"]
                mem, red = (results[f"extender, shares, {s}{tag}"] for s in ("memory", "redis"))
                cpu = " / ".join(f"{r['cpu_ms_per_pod']['extender']:.2f}"
                                 f" ({r['cpu_ms_per_pod']['extender children']:.2f})"
                                 for r in (mem, red))
                extra = f" {everything(s1, results, tag)} |" if all_cpu else ""
                print(f"| {k} | {load[0]:.1f}-{load[1]:.1f} | {verbs}"
                      f" | {s1['pods_per_s']:.0f} / {s2['pods_per_s']:.0f}"
                      f" ({s1['median_to_bind_s']:.2f} / {s2['median_to_bind_s']:.2f} s)"
                      f" | {null:.1f}, {null / stock:.2f}x | {ours(mem, stock, null)}"
                      f" | {ours(red, stock, null)} | {cpu} |{extra}")
                for store, r in (("memory", mem), ("redis", red)):
                    p = r["extender"]["prices"]
                    notes.append(f"{nodes} run{k} {verbs} {store}: tables"
                                 f" {p['installed']:.0f} installed, {p['dropped']:.0f} dropped,"
                                 f" {p['failed']:.0f} failed; log lines {len(r['extender_log'])}")
    print("\n" + "\n".join(notes))


@click.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--runs", default=3, show_default=True, help="Runs 1..N (missing ones skipped).")
@click.option("--all-cpu", is_flag=True, help="With every process's CPU per bound pod.")
def main(folder: Path, runs: int, all_cpu: bool) -> None:
    """Print FOLDER's end-to-end run tables (throughput-N-runK.json with their .txt)."""
    print_tables(folder, range(1, runs + 1), all_cpu=all_cpu)


if __name__ == "__main__":
    main()
