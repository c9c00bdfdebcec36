"""Prints this folder's tables from throughput-N-runK.json: python table.py

Per run and verbs: the stock scheduler's pods/s and median (before / after the extender's
runs; median: seconds from the scheduler's start until half the burst was bound), the null
extender's pods/s and ratio to stock, ours (pods/s: ratio to stock / ratio to the null of the
same verbs, median time to half the burst bound), the extender's CPU per bound pod (of which
its price worker), the CPU per bound pod of all the run's processes (kube-scheduler, API
server, etcd, extender), and the price tables and log lines of the extender's runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

HERE = Path(__file__).parent
HEAD = ("| run | load | verbs | stock pods/s (median) | null | ours, memory | ours, Redis"
        " | extender CPU ms/pod, memory / Redis (worker) | all CPU ms/pod: stock / null / memory"
        " / Redis |")


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


def main() -> None:
    notes = []
    for nodes in (500, 5000):
        print(f"\n{nodes} nodes\n\n{HEAD}\n" + "|---" * 9 + "|")
        for k in (1, 2, 3):
            path = HERE / f"throughput-{nodes}-run{k}.json"
            if not path.exists():
                continue
            runs = json.loads(path.read_text())[str(nodes)]
            text = (HERE / f"throughput-{nodes}-run{k}.txt").read_text().splitlines()
            load = [float(re.search(r"load (\S+)", ln).group(1)) for ln in (text[0], text[-1])]
            s1, s2 = runs["stock kube-scheduler"], runs["stock kube-scheduler (again)"]
            stock = (s1["pods_per_s"] + s2["pods_per_s"]) / 2
            for verbs, tag in (("two-call", ""), ("filter-one", " (filter-one)")):
                null = runs[f"null extender{tag}"]["pods_per_s"]
                mem, red = (runs[f"extender, shares, {s}{tag}"] for s in ("memory", "redis"))
                cpu = " / ".join(f"{r['cpu_ms_per_pod']['extender']:.2f}"
                                 f" ({r['cpu_ms_per_pod']['extender children']:.2f})"
                                 for r in (mem, red))
                print(f"| {k} | {load[0]:.1f}-{load[1]:.1f} | {verbs}"
                      f" | {s1['pods_per_s']:.0f} / {s2['pods_per_s']:.0f}"
                      f" ({s1['median_to_bind_s']:.2f} / {s2['median_to_bind_s']:.2f} s)"
                      f" | {null:.1f}, {null / stock:.2f}x | {ours(mem, stock, null)}"
                      f" | {ours(red, stock, null)} | {cpu} | {everything(s1, runs, tag)} |")
                for store, r in (("memory", mem), ("redis", red)):
                    p = r["extender"]["prices"]
                    notes.append(f"{nodes} run{k} {verbs} {store}: tables"
                                 f" {p['installed']:.0f} installed, {p['dropped']:.0f} dropped,"
                                 f" {p['failed']:.0f} failed; log lines {len(r['extender_log'])}")
    print("\n" + "\n".join(notes))


if __name__ == "__main__":
    main()
