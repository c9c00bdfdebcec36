"""The locality replay's physics the placement bound rests on (node caches shared by tables,
filled once for all local readers) and the bounds themselves (``run_locality(oracle=...)``)."""

from __future__ import annotations

import pytest

from bench.sim.locality import NodeCaches, Topology, run_locality, step_rows

ROWS = {"a": 2 * 10**8, "b": 2 * 10**8}


def _caches() -> tuple[NodeCaches, list[str]]:
    topo = Topology.load(None, seed=1)
    draws = {t: step_rows(float(n), 1.05, 50_000.0)[0] for t, n in ROWS.items()}
    return NodeCaches(topo, dict(ROWS), row_bytes=512, draws=draws), topo.names


def test_readers_of_one_table_share_the_cache_and_other_tables_take_room():
    caches, (same, mixed, *_) = _caches()
    caches.start(same, ("a",))
    caches.start(same, ("a",))
    caches.start(mixed, ("a",))
    caches.start(mixed, ("b",))
    for node in (same, mixed):
        caches.read(node, dict.fromkeys(ROWS, 1e13))  # long enough to fill every room
    assert caches.cap[same]["a"] == pytest.approx(caches.capacity)
    assert caches.cap[mixed]["a"] == pytest.approx(caches.capacity / 2, rel=1e-3)
    co_located = caches.mean_hit(same, "a", 100.0)
    assert co_located > caches.mean_hit(mixed, "a", 100.0) + 0.02
    assert co_located == pytest.approx(caches.alone_hit(("a",))["a"], abs=1e-3)
    # alone_hit is the most a node gives a reader: its tables alone in the cache.
    assert caches.alone_hit(("a", "b"))["a"] == pytest.approx(caches.mean_hit(mixed, "a", 100.0),
                                                              abs=1e-3)


def test_local_readers_fill_a_row_once():
    """A read-through cache writes a missed row once, whichever local reader missed it: two
    readers of a table fill it as one reader reading both their ids, twice as fast as one."""
    caches, (two, one, *_) = _caches()
    caches.start(two, ("a",))
    caches.start(two, ("a",))
    caches.start(one, ("a",))
    d = caches.draws["a"]
    steps = 2_000.0
    # Over their next steps, two readers' hit ratio is one reader's over twice the steps.
    assert caches.mean_hit(two, "a", steps) == pytest.approx(caches.mean_hit(one, "a", 2 * steps),
                                                             rel=1e-6)
    assert caches.mean_hit(two, "a", steps) > caches.mean_hit(one, "a", steps)
    caches.read(two, {"a": 2 * d * steps})  # each reader's steps: 2 x their ids
    caches.read(one, {"a": d * steps})
    assert caches.rows_of(two, "a") > caches.rows_of(one, "a")
    caches.read(one, {"a": d * steps})
    assert caches.rows_of(two, "a") == pytest.approx(caches.rows_of(one, "a"), rel=1e-6)


def test_the_ideal_oracle_bounds_placement_and_the_greedy_one_places_by_the_physics():
    off = run_locality(seed=3, locality=False, n_jobs=60)
    ideal = run_locality(seed=3, locality=True, n_jobs=60, oracle="ideal")
    greedy = run_locality(seed=3, locality=True, n_jobs=60, oracle="greedy")
    assert ideal.hit_ratio == pytest.approx(ideal.hit_ceiling, abs=1e-6)
    assert off.hit_ratio < off.hit_ceiling == ideal.hit_ceiling
    assert ideal.rec_jct_mean < min(off.rec_jct_mean, greedy.rec_jct_mean)
    assert ideal.saturated["uplink_store"] == ideal.saturated["nic"] == 0.0  # shards only
    assert greedy.jct != off.jct  # it moved jobs
    # It sends readers nearer the store and next to their tables' readers.
    assert greedy.placed_store_rack > off.placed_store_rack
    assert greedy.hit_ratio > off.hit_ratio + 0.01
    assert greedy.rec_jct_mean < off.rec_jct_mean
    with pytest.raises(ValueError, match="oracle"):
        run_locality(seed=3, n_jobs=4, oracle="best")


def test_cli_runs_an_oracle_in_place_of_the_term(tmp_path):
    import pandas as pd
    from click.testing import CliRunner

    from bench.cli import main as bench_cli

    out = CliRunner().invoke(bench_cli, ["locality", "--scenario", "recommendation", "--mode",
                                         "continuous", "--seeds", "5", "--jobs", "30", "-j", "1",
                                         "--oracle", "ideal", "--out", str(tmp_path)])
    assert out.exit_code == 0, out.output
    table = pd.read_csv(tmp_path / "summary.csv")
    assert table["hit_ratio_on"].iloc[0] == pytest.approx(table["hit_ceiling"].iloc[0])
    assert table["hit_ratio_off"].iloc[0] < table["hit_ceiling"].iloc[0]
    assert "oracle" in (tmp_path / "report.md").read_text()
