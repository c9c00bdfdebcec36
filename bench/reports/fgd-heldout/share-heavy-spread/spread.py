"""sparse / FGD per pod list from FGD-protocol runs: mean, worst seed, margins over the bound.

Each folder is a ``sparse-bench fgd -p fgd -p sparse`` output (``runs.csv`` for the unallocated
GPUs at arrived = 100 %, ``runs.jsonl`` for the lower bound). Means are over the seeds both
policies ran; the ratio is mean sparse / mean FGD, as in the held-out README.

    python bench/reports/fgd-heldout/share-heavy-spread/spread.py FOLDER [FOLDER ...]
"""

from __future__ import annotations

import csv
import json
import sys
from collections import defaultdict
from pathlib import Path


def load(folder: Path) -> tuple[dict, dict]:
    unalloc: dict[tuple[str, str, int], float] = {}
    with open(folder / "runs.csv", newline="") as f:
        for row in csv.DictReader(f):
            key = row["workload"], row["policy"], int(row["seed"])
            unalloc[key] = float(row["unalloc_gpus_100"])
    bound: dict[tuple[str, int], float] = {}
    with open(folder / "runs.jsonl") as f:
        for line in f:
            r = json.loads(line)
            bound[r["workload"], r["seed"]] = r["extra"]["unallocated_lower_bound_gpus"]
    return unalloc, bound


def main(folders: list[str]) -> None:
    unalloc: dict = {}
    bound: dict = {}
    for folder in folders:
        u, b = load(Path(folder))
        unalloc.update(u)
        bound.update(b)
    seeds: dict[str, list[int]] = defaultdict(list)
    for (w, p, s) in unalloc:
        if p == "sparse" and (w, "fgd", s) in unalloc:
            seeds[w].append(s)
    print("| list | seeds | FGD | sparse | sparse / FGD | worst seed | FGD above the bound"
          " | sparse above the bound | bound |")
    print("|---|---|---|---|---|---|---|---|---|")
    for w in sorted(seeds):
        ss = sorted(seeds[w])
        fgd = sum(unalloc[w, "fgd", s] for s in ss) / len(ss)
        sp = sum(unalloc[w, "sparse", s] for s in ss) / len(ss)
        lb = sum(bound[w, s] for s in ss) / len(ss)
        worst = max(ss, key=lambda s: unalloc[w, "sparse", s] / unalloc[w, "fgd", s])
        wr = unalloc[w, "sparse", worst] / unalloc[w, "fgd", worst]
        print(f"| {w} | {','.join(map(str, ss))} | {fgd:.1f} | {sp:.1f} | {sp / fgd:.3f}"
              f" | {wr:.3f} ({worst}) | {fgd - lb:.1f} | {sp - lb:.1f} | {lb:.1f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
