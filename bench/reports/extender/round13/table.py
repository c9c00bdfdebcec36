"""The tables of this folder's README, from its result files:

    .venv/bin/python bench/reports/extender/round13/table.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent


def latency() -> None:
    print("python -m bench.latency, NodeNames (ms; pods/s at c=4):")
    print("| run | c=1 p50 | c=1 p99 | c=4 pods/s | null c=1 p50 / p99 | p99 / null |")
    print("|---|---|---|---|---|---|")
    for f in sorted((HERE / "ab").glob("*.json")):
        r = json.loads(f.read_text())
        e1, e4 = r["extender | NodeNames | c=1"], r["extender | NodeNames | c=4"]
        n1 = r["null | NodeNames | c=1"]
        print(f"| {f.stem} | {e1['p50_ms']:.2f} | {e1['p99_ms']:.2f} | {e4['pods_per_s']:.0f}"
              f" | {n1['p50_ms']:.2f} / {n1['p99_ms']:.2f} | {e1['p99_ms'] / n1['p99_ms']:.2f} |")
    for who in ("base", "prev", "head"):
        runs = [json.loads(f.read_text()) for f in sorted((HERE / "ab").glob(f"*-{who}-*.json"))]
        p50 = np.median([r["extender | NodeNames | c=1"]["p50_ms"] for r in runs])
        p99 = np.median([r["extender | NodeNames | c=1"]["p99_ms"] for r in runs])
        tput = np.median([r["extender | NodeNames | c=4"]["pods_per_s"] for r in runs])
        print(f"  {who}: median over {len(runs)} runs: c=1 p50 {p50:.2f}, p99 {p99:.2f},"
              f" c=4 {tput:.0f} pods/s")


def cpu() -> None:
    print("\nserver_cpu.py --pods 400, ms per pod (wall; the extender's serving thread's CPU):")
    print("| run | wall p50 | wall p99 | CPU p50 | CPU p99 | CPU max | CPU mean |")
    print("|---|---|---|---|---|---|---|")
    for name in ("base-1", "head-1", "base-2", "head-2", "prev-1", "head-3", "prev-2",
                 "base-3"):
        s = json.loads((HERE / "cpu" / f"{name}.json").read_text())["summary"]
        w, c = s["wall"], s["server CPU"]
        print(f"| {name} | {w['p50']:.2f} | {w['p99']:.2f} | {c['p50']:.2f} | {c['p99']:.2f}"
              f" | {c['max']:.2f} | {c['mean']:.2f} |")


def paced() -> None:
    print("\npaced.py --pods 1000 (ms):")
    for f in sorted((HERE / "paced").glob("*.json")):
        r = json.loads(f.read_text())
        s = r["summary"]["all"]
        print(f"  {f.stem}: p50 {s['p50_ms']:.2f}  p99 {s['p99_ms']:.2f}  max {s['max_ms']:.2f}"
              f"  renewals {r['renewals'] or 'n/a'}")


if __name__ == "__main__":
    latency()
    cpu()
    paced()
