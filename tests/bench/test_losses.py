"""Loss breakdown: each free GPU is charged to the reason the failed pods could not use it."""

from __future__ import annotations

import pandas as pd
import pytest
from click.testing import CliRunner

from bench.cli import main
from bench.sim import losses
from bench.sim.cluster import SimCluster
from extender.placement.policies import make_policy


@pytest.fixture
def sim():
    # a: 2 x T4, little CPU; b: 4 x G2; c: 8 x G2
    nodes = pd.DataFrame({"sn": ["a", "b", "c"], "cpu_milli": [8000, 64000, 96000],
                          "memory_mib": 262144, "gpu": [2, 4, 8], "model": ["T4", "G2", "G2"]})
    return SimCluster(nodes, ["a", "b", "c"], make_policy("best-fit"))


def put(sim, uid, num, milli, cpu=1000, spec=""):
    placed = sim.schedule(sim.demand(uid, cpu, 1024, num, milli, spec))
    assert placed is not None
    return placed


def test_each_free_gpu_is_charged_to_why_the_failed_pods_could_not_use_it(sim):
    put(sim, "cpu-eater", 1, 1000, cpu=7000, spec="T4")  # a: one GPU left, 1000 CPU left
    for i in range(3):
        put(sim, f"w{i}", 1, 1000, spec="G2")  # 3 of b's 4 GPUs (best fit)
    put(sim, "s", 1, 700, spec="G2")  # b's last GPU: a 300 sliver
    for i in range(7):
        put(sim, f"c{i}", 1, 1000, spec="G2")  # c: one GPU left
    assert [p.node for p in sim.placed.values()] == [0, 1, 1, 1, 1, *[2] * 7]
    free = sim.state.milli_free.sum() / 1000
    failed = [sim.demand("big", 4000, 1024, 2, 1000, "")]  # 2 GPUs, 4000 CPU: fits nowhere
    assert sim.candidates(failed[0]).size == 2  # b and c have the CPU
    out = losses.breakdown(sim, failed)
    assert out["failed_multi"] == 2.0
    assert out["sliver"] == pytest.approx(0.3)
    # the whole GPU on the node with CPU left is stranded (1 of 2 needed), a's lacks CPU too
    # but its GPU count would not do either: count comes before CPU
    assert out["multi"] == pytest.approx(free - 0.3)
    assert out["cpu"] == 0.0
    one = [sim.demand("one", 4000, 1024, 1, 1000, "")]
    out = losses.breakdown(sim, one)
    assert out["cpu"] == pytest.approx(1.0)  # node a's free GPU: CPU-bound
    assert out["sliver"] == pytest.approx(0.3)
    assert out["multi"] == 0.0
    model = [sim.demand("t4", 500, 1024, 1, 500, "T4")]
    out = losses.breakdown(sim, model)
    assert out["model"] == pytest.approx(free - sim.state.milli_free[:2].sum() / 1000)
    assert sum(out[r] for r in losses.REASONS) == pytest.approx(free)


def test_nothing_failed_means_unused(sim):
    out = losses.breakdown(sim, [])
    assert out["unused"] == 14.0 and out["sliver"] == 0.0


@pytest.fixture
def tiny_files(tmp_path):
    nodes = pd.DataFrame({"sn": [f"n{i}" for i in range(4)], "cpu_milli": 32000,
                          "memory_mib": 262144, "gpu": [2, 4, 8, 8], "model": "G2"})
    pods = pd.DataFrame({"name": [f"p{i:03d}" for i in range(60)], "cpu_milli": 2000,
                         "memory_mib": 1024, "num_gpu": [1, 1, 2, 8] * 15,
                         "gpu_milli": [810, 1000, 1000, 1000] * 15, "gpu_spec": ""})
    np_, pp = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    nodes.to_csv(np_, index=False)
    pods.to_csv(pp, index=False)
    return str(np_), str(pp)


def test_cli_losses_prints_the_breakdown(tiny_files, tmp_path):
    nodes, pods = tiny_files
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["losses", "-w", pods, "--nodes", nodes, "-p", "fgd",
                                    "-p", "best-fit", "--seeds", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "| sliver | multi | cpu | model |" in res.output
    assert "best-fit minus fgd" in res.output
    assert "| first_fail_pct | window_arrived | window_placed |" in res.output
    assert "Where the unallocated GPUs sit" in (out / "report.md").read_text()
    again = CliRunner().invoke(main, ["losses", "--runs", str(out)])
    assert again.exit_code == 0 and "best-fit minus fgd" in again.output


def test_the_window_after_the_first_failure_holds_every_loss(tmp_path):
    from bench.sim.fgd import run_fgd

    nodes = pd.DataFrame({"sn": [f"n{i}" for i in range(3)], "cpu_milli": 96000,
                          "memory_mib": 262144, "gpu": 8, "model": "G2"})
    pods = pd.DataFrame({"name": [f"p{i:03d}" for i in range(80)], "cpu_milli": 1000,
                         "memory_mib": 1024, "num_gpu": 1,
                         "gpu_milli": [810, 470, 1000, 650] * 20, "gpu_spec": ""})
    nodes.to_csv(tmp_path / "n.csv", index=False)
    pods.to_csv(tmp_path / "p.csv", index=False)
    run = run_fgd(str(tmp_path / "p.csv"), "best-fit", 1, nodes_path=str(tmp_path / "n.csv"))
    out = run.extra["losses"]
    assert 0.0 < out["first_fail_pct"] < 100.0  # 810s and 650s leave slivers nothing fills
    # no departures: what failed up to 100 % is what arrived after the first failure, less
    # what of it still found room (up to the last pod's request: arrived moves in steps)
    failed = sum(out[f"failed_{s}"] for s in losses.SHAPES)
    assert out["window_arrived"] - out["window_placed"] == pytest.approx(failed)
    assert abs(failed - run.unallocated_gpus_100) <= 1.0
    assert out["window_placed"] == pytest.approx(
        sum(out[f"window_placed_{s}"] for s in losses.SHAPES))


def test_the_window_starts_at_the_first_failed_gpu_pod(sim):
    window = losses.FailWindow()
    fits = sim.demand("a", 1000, 1024, 1, 500, "")
    fails = sim.demand("b", 1000, 1024, 8, 1000, "")
    window.record(0, fits, True, 14000)
    window.record(500, sim.demand("cpu", 1000, 1024, 0, 0, ""), False, 14000)  # no GPU
    assert window.summary()["window_arrived"] == 0.0
    window.record(500, fails, False, 14000)
    window.record(8500, fits, True, 14000)
    out = window.summary()
    assert out["first_fail_pct"] == pytest.approx(100 * 500 / 14000)
    assert out["window_arrived"] == 8.5 and out["window_placed"] == 0.5
    assert out["window_placed_share"] == 0.5 and out["window_placed_multi"] == 0.0


def test_the_snapshot_splits_free_capacity_by_what_the_coming_pods_can_use(sim):
    """Slivers below the smallest / median coming share, capacity a fitting coming pod cannot
    reach for the node's CPU, and what the coming pods can still take."""
    put(sim, "cpu-eater", 1, 1000, cpu=7000, spec="T4")  # a: 1 GPU free, 1000 CPU left
    put(sim, "s1", 1, 950, spec="G2")  # b: a 50 sliver
    put(sim, "s2", 1, 700, spec="G2")  # b: a 300 sliver
    coming = [sim.demand(f"x{i}", 2000, 1024, 1, m, "") for i, m in enumerate((100, 400, 500))]
    failing = sim.demand("w", 2000, 1024, 1, 1000, "")
    out = losses.snapshot(sim, coming, failing)
    assert out["sliver_min"] == pytest.approx(0.05)  # below 100
    assert out["sliver_median"] == pytest.approx(0.3)  # below 400, a 100 could take it
    assert out["host"] == pytest.approx(1.0)  # a's whole GPU: no coming pod has the CPU
    assert out["empty_host"] == pytest.approx(1.0)  # ... nor the failing one
    assert out["usable_empty"] == pytest.approx(10.0)  # b's 2 and c's 8 untouched GPUs
    assert out["free"] == pytest.approx(sum(out[k] for k in losses.SNAP[1:8]))
