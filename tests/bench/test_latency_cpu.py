"""bench.latency.cpu's burst: replicas of one shape, each offered the next window of nodes,
as kube-scheduler offers a burst; and the CPU bench runs with it end to end."""

from __future__ import annotations

import json

from click.testing import CliRunner

from bench.latency.cluster import request_bodies, shape_of, synthetic_inventory
from bench.latency.cpu import main


def test_a_burst_is_one_shape_over_windows_that_move_with_each_pod() -> None:
    inventory = synthetic_inventory(10, 2)
    names = sorted(inventory.nodes)
    bodies = [json.loads(b) for b in request_bodies(inventory, 5, 4, False, burst=True)]
    assert len({tuple(shape_of(b["Pod"])) for b in bodies}) == 1
    assert len({b["Pod"]["metadata"]["uid"] for b in bodies}) == 5
    windows = [b["NodeNames"] for b in bodies]
    assert windows[0] == names[0:4] and windows[1] == names[4:8]
    assert windows[2] == names[8:10] + names[0:2]  # wraps around, as the scheduler's search


def test_the_cpu_bench_binds_a_burst_and_counts_the_picks_taken() -> None:
    out = CliRunner().invoke(main, ["--nodes", "40", "--gpus", "2", "--candidates", "10",
                                    "--requests", "30", "--no-full", "--filter-only",
                                    "--single", "--burst", "--bind"])
    assert out.exit_code == 0, out.output
    assert "one answered, one shape in a moving window, bound" in out.output
    assert "filter's pick taken by" in out.output


def test_one_answered_node_needs_filter_alone() -> None:
    out = CliRunner().invoke(main, ["--nodes", "20", "--single"])
    assert out.exit_code == 2 and "--filter-only" in out.output
