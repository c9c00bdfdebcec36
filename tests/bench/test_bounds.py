"""Lower bounds the experiments are read against."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pytest

from bench.sim import bounds
from bench.sim.fgd import FgdRun
from bench.sim.report import against_fgd, runs_from_report


def _pods(shares: list[int], whole: int = 0) -> pd.DataFrame:
    milli = shares + [1000] * whole
    return pd.DataFrame({"num_gpu": [1] * len(milli), "gpu_milli": milli})


def test_large_shares_leave_slivers_only_small_shares_fill() -> None:
    # 810 + 810: two GPUs with 190 free each; the 160 share fills part of one sliver
    assert bounds.sliver_bound(_pods([810, 810, 160]), 10_000) == pytest.approx(0.22)
    # 470s pair up: no threshold above 500 applies
    assert bounds.sliver_bound(_pods([470, 470, 470]), 10_000) == 0.0
    # the best threshold wins: h = 650 counts the 810 and the 650 (190 + 350), the 320 fills
    assert bounds.sliver_bound(_pods([810, 650, 320]), 10_000) == pytest.approx(0.22)


def test_only_pods_arrived_by_capacity_count() -> None:
    pods = _pods([810, 810, 810], whole=0)
    assert bounds.sliver_bound(pods, 1620) == pytest.approx(0.38)  # the third arrives later


def test_bound_holds_for_every_packing() -> None:
    """Exhaustive check on a small instance whose shares add up to the capacity (3 GPUs): no
    assignment, unplaced pods included, leaves less free than the bound, and the best one
    comes close to it."""
    shares = [810, 810, 650, 320, 160, 250]
    assert sum(shares) == 3000
    bound = bounds.sliver_bound(_pods(shares), 3000) * 1000
    assert bound == pytest.approx(220)  # two 190 slivers, the 160 fills one of them
    best = 3000
    for gpus in itertools.product(range(4), repeat=len(shares)):  # 3 = not placed
        used = np.zeros(3)
        for s, g in zip(shares, gpus, strict=True):
            if g < 3:
                used[g] += s
        if (used <= 1000).all():
            best = min(best, 3000 - used.sum())
    assert bound <= best == 250


def test_work_bound() -> None:
    req = np.array([0.5, 0.5, 1.0, 2.0])
    dur = np.array([100.0, 100.0, 100.0, 50.0])
    assert bounds.work_bound(req, dur) == pytest.approx(300.0 / 400.0)


def _run(policy: str, seed: int, unalloc: float, bound: float) -> FgdRun:
    alloc = np.full(131, 100.0 * (1 - unalloc / 100))
    return FgdRun("w", policy, seed, 1.3, 10, 0, 100, 0.1, alloc, alloc * 0, alloc * 0,
                  extra={"unallocated_lower_bound_gpus": bound})


def test_against_fgd_pairs_seeds_both_ran() -> None:
    runs = [_run("fgd", 1, 30, 10), _run("fgd", 2, 40, 12), _run("sparse", 1, 20, 10),
            _run("sparse", 2, 30, 12), _run("sparse", 3, 5, 1)]
    row = against_fgd(runs).iloc[0]
    assert row["seeds"] == 2
    assert row["sparse_unalloc_gpus"] == pytest.approx(25)
    assert row["fgd_unalloc_gpus"] == pytest.approx(35)
    assert row["ratio_to_fgd"] == pytest.approx(25 / 35)
    assert row["lower_bound_gpus"] == pytest.approx(11)


def test_kept_report_folder_gives_back_its_runs(tmp_path) -> None:
    """A report kept without runs.jsonl (runs.csv + curves.json) rebuilds the runs."""
    runs = [_run("fgd", 1, 30, 10), _run("sparse", 1, 20, 10)]
    pd.DataFrame([r.row() for r in runs]).to_csv(tmp_path / "runs.csv", index=False)
    curves = [{"workload": r.workload, "policy": r.policy, "seed": r.seed,
               "alloc": r.alloc.tolist(), "frag": r.frag.tolist(),
               "frag_rate": r.frag_rate.tolist()} for r in runs]
    (tmp_path / "curves.json").write_text(json.dumps(curves))
    back = runs_from_report(tmp_path)
    assert [(r.policy, r.seed) for r in back] == [("fgd", 1), ("sparse", 1)]
    assert [r.unallocated_gpus_100 for r in back] == pytest.approx([30, 20])
