"""The locality replay drives the extender's locality term through the simulator."""

from __future__ import annotations

import pandas as pd
import pytest
from click.testing import CliRunner

from bench.cli import main as bench_cli
from bench.sim.locality import NodeCaches, Topology, run_locality
from extender.placement.locality import LocalityWeights


def test_topology_names_do_not_follow_racks():
    topo = Topology.load(None, seed=1)
    racks = [topo.rack[n] for n in sorted(topo.names)]
    assert racks != sorted(racks)  # the node order must not put the store's rack first
    assert {topo.tier(n) for n in topo.names} == {"rack", "zone", "cross_zone"}


def test_locality_term_moves_recommendation_jobs_to_their_rows():
    off = run_locality(seed=3, locality=False, n_jobs=80)
    on = run_locality(seed=3, locality=True, n_jobs=80)
    assert on.placed_store_rack > off.placed_store_rack
    assert on.fetch_share < off.fetch_share
    assert on.rec_jct_mean < off.rec_jct_mean
    again = run_locality(seed=3, locality=True, n_jobs=80)
    assert again.jct == on.jct  # seeded


def test_cli_writes_the_report(tmp_path):
    out = CliRunner().invoke(bench_cli, ["locality", "--seeds", "5", "--jobs", "40", "-j", "1",
                                         "--mode", "continuous",
                                         "--out", str(tmp_path)])
    assert out.exit_code == 0, out.output
    report = (tmp_path / "report.md").read_text()
    assert "recommendation" in report and "no-embeddings" in report
    assert (tmp_path / "ratios.png").exists()


def test_shared_links_stretch_misses_only_when_loaded():
    import numpy as np

    from bench.sim.embed_net import GBPS, StoreNetwork

    topo = Topology.load(None, seed=1)
    raw = {**topo.raw, "links": {"store_gbps": 10.0, "rack_uplink_gbps": 0,
                                 "zone_link_gbps": 0, "node_nic_gbps": 0}}
    net = StoreNetwork(raw, topo.zone, topo.rack, topo.shards())  # 10 Gb/s over the shards
    node = topo.names[0]
    paths = [net.path(node)] * 4
    miss = np.full(4, 1e7)  # bytes per step
    free = np.full(4, 0.01)
    alone = miss / (10.0 * GBPS)  # each alone at the link's speed
    one = net.stretch(paths[:1], miss[:1], free[:1], alone[:1])
    assert one == np.ones(1)  # a single job below the capacity is not stretched
    f = net.stretch(paths, miss, free, alone * 0.1)
    carried = (miss / (free + alone * 0.1 * f)).sum()
    assert (f > 1).all()
    assert abs(carried - 10 * GBPS) < 0.01 * 10 * GBPS  # four jobs share the link at capacity


def test_a_starting_job_takes_cache_room_from_its_co_runners_tables():
    topo = Topology.load(None, seed=1)
    rows = {"a": 10**9, "b": 10**9, "c": 10**9}
    caches = NodeCaches(topo, rows, row_bytes=256, draws=dict.fromkeys(rows, 1e5))
    node = topo.names[0]
    caches.start(node, ("a",))
    assert caches.cap[node]["a"] == pytest.approx(caches.capacity)  # alone: the whole cache
    assert caches.rows_of(node, "a") == 0  # but nothing read yet: empty
    caches.read(node, {"a": 1e9})
    filled = caches.rows_of(node, "a")
    assert 0 < filled < caches.capacity
    caches.start(node, ("b", "c"))  # a's room shrinks to a third
    assert caches.cap[node]["a"] <= caches.capacity / 3 + 1
    assert caches.rows_of(node, "a") <= caches.cap[node]["a"] + 1
    assert caches.rows_of(node, "b") == 0
    # LFU: a table read by two jobs gets more room than one read by one.
    other = topo.names[1]
    caches.start(other, ("a", "b"))
    caches.start(other, ("a",))
    assert caches.cap[other]["a"] > 1.5 * caches.cap[other]["b"]
    caches.read(other, {"a": 1e12, "b": 1e12})  # read long enough to fill the room
    assert caches.rows_of(other, "b") == pytest.approx(caches.cap[other]["b"], rel=1e-3)
    # A job ends: the table it read loses a reader, the other keeps its rows and may grow.
    b_rows = caches.rows_of(other, "b")
    caches.stop(other, ("a",))
    assert caches.rows_of(other, "b") == pytest.approx(b_rows)
    assert caches.cap[other]["b"] > b_rows
    caches.stop(other, ("a", "b"))  # nobody reads them: they stay as leftovers
    assert caches.active[other] == {} and caches.rows_of(other, "a") > 0
    # A new table in use fills and evicts the leftovers as it grows, longest idle first.
    caches.start(other, ("c",))
    assert caches.rows_of(other, "a") > 0
    caches.read(other, {"c": 1e13})
    assert caches.rows_of(other, "c") == pytest.approx(caches.capacity, rel=1e-3)
    assert caches.rows_of(other, "a") < 1 and caches.rows_of(other, "b") < 1


def test_store_shards_split_every_jobs_misses():
    """Each shard serves its part of every job's misses: the store's egress grows with its
    shards, and a job in one shard rack still reads the other racks' shards over the uplinks."""
    from bench.sim.embed_net import StoreNetwork

    topo = Topology.load(None, seed=1, overrides={
        "store.racks": ["zone-a/rack-0", "zone-a/rack-1"], "store.shards_per_rack": 2})
    shards = topo.shards()
    assert len(shards) == 4 and {(topo.zone[s], topo.rack[s]) for s in shards} == {
        ("zone-a", "rack-0"), ("zone-a", "rack-1")}
    net = StoreNetwork(topo.raw, topo.zone, topo.rack, shards)
    assert net.capacity[:4].tolist() == [10.0 * 1.25e8] * 4  # shard_gbps each, NIC-capped
    node = next(n for n in topo.names if (topo.zone[n], topo.rack[n]) == ("zone-a", "rack-0"))
    path = {net.names[k]: v for k, v in net.path(node).items()}
    assert path[f"nic:{node}"] == 1.0
    assert all(path[f"shard:{s}"] == 0.25 for s in shards)
    assert path["uplink:zone-a/rack-0"] == path["uplink:zone-a/rack-1"] == 0.5
    assert topo.shard_tiers(node).count("rack") == 2 and topo.tier(node) == "rack"
    far = next(n for n in topo.names if topo.zone[n] == "zone-b")
    far_path = {net.names[k]: v for k, v in net.path(far).items()}
    assert far_path["zone:zone-a"] == far_path["zone:zone-b"] == 1.0
    assert set(topo.shard_tiers(far)) == {"cross_zone"}


def test_topology_overrides_replace_file_values():
    topo = Topology.load(None, seed=1, overrides={"links.shard_gbps": 7.0,
                                                  "store.racks": ["zone-b/rack-1"]})
    assert topo.raw["links"]["shard_gbps"] == 7.0
    assert {n for n in topo.names if topo.tier(n) == "rack"} == {
        n for n in topo.names if (topo.zone[n], topo.rack[n]) == ("zone-b", "rack-1")}
    with pytest.raises(KeyError):
        Topology.load(None, seed=1, overrides={"links.nope": 1})


def test_sweep_cli_writes_ratios_and_plot(tmp_path):
    bad = CliRunner().invoke(bench_cli, ["locality-sweep", "--set", "links.nope=1"])
    assert bad.exit_code == 2 and "links.nope" in bad.output
    out = CliRunner().invoke(bench_cli, ["locality-sweep", "--sweep", "store-racks", "--seeds",
                                         "5", "--jobs", "24", "-j", "1", "--set",
                                         "links.rack_uplink_gbps=100", "--out",
                                         str(tmp_path)])
    assert out.exit_code == 0, out.output
    table = pd.read_csv(tmp_path / "sweep.csv")
    assert table["value"].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert table["jct_ratio"].between(0.2, 2.0).all()
    # Store shards in every rack: every job is in a store rack with or without the term.
    assert table["store_rack_off"].iloc[-1] == table["store_rack_on"].iloc[-1] == 1.0
    assert (tmp_path / "sweep.png").exists()


def test_table_scale_sweep_and_shipped_runs_from_a_locality_folder(tmp_path):
    import json

    import yaml

    from bench.sim.locality import TOPOLOGY
    from bench.sim.locality_sweep import shipped_runs, sweeps

    raw = yaml.safe_load(TOPOLOGY.read_text())
    over = sweeps()["table-scale"].overrides(raw, 10.0)
    assert over == {"tables.rows_min": raw["tables"]["rows_min"] * 10,
                    "tables.rows_max": raw["tables"]["rows_max"] * 10}
    run = {"mode": "continuous", "scenario": "recommendation", "seed": 7, "jobs": 24,
           "locality": True, "jct_mean": 2.0, "rec_jct_mean": 3.0, "makespan": 4.0,
           "fetch_share": 0.5, "placed_store_rack": 0.25, "link_stretch": 1.5, "hit_ratio": 0.7}
    other = {**run, "mode": "high-load"}
    (tmp_path / "runs.jsonl").write_text(json.dumps(run) + "\n" + json.dumps(other) + "\n")
    got = shipped_runs(tmp_path, ["uplink", "table-scale"], [7], None, 24)
    assert [(r.sweep, r.value, r.hit_ratio) for r in got] == [
        ("uplink", sweeps()["uplink"].shipped, 0.7), ("table-scale", 1.0, 0.7)]
    assert shipped_runs(tmp_path, ["uplink"], [8], None, 24) == []  # other seeds: rerun


def test_the_scheduler_scores_the_room_the_replay_caches_give():
    """One LFU room split: what the extender's index expects a job's tables to get on a node
    (from the published annotation: readers and their ids per step) is what the replay's
    cache gives them once the job starts there."""
    from bench.sim.locality import step_rows
    from extender.placement.locality import EmbeddingSpec, LocalityIndex

    topo = Topology.load(None, seed=1)
    rows = {"a": 10**8, "b": 3 * 10**8, "c": 5 * 10**7, "d": 20_000}
    draws = {t: step_rows(float(n), 1.05, 50_000.0)[0] for t, n in rows.items()}
    caches = NodeCaches(topo, rows, row_bytes=256, draws=draws)
    node = topo.names[0]
    caches.start(node, ("a", "b"))
    caches.start(node, ("a", "d"))
    caches.read(node, dict.fromkeys(("a", "b", "d"), 1e9))  # rows held: bytes per row known
    ix = LocalityIndex()
    ix.observe_node(node, caches.annotation(node, 0.0), topo.labels(node))
    # c was never published: its size comes from the job's declaration (hotRows).
    spec = EmbeddingSpec("s", ("b", "c"), {"c": rows["c"]},
                         ids_per_step={t: int(draws[t]) for t in ("b", "c")})
    rooms, _ = ix.room(spec, ix.slots_of([node]))
    caches.start(node, ("b", "c"))
    for t in rows:
        assert rooms[t][0] == pytest.approx(caches.cap[node][t], rel=1e-3, abs=2), t
    assert caches.cap[node]["d"] == rows["d"]  # fits whole: its spare room went to the rest
    assert rooms["b"][0] > rooms["c"][0]  # b has two readers now


def test_lfu_room_is_vectorised_over_caches():
    import numpy as np

    from extender.placement.cache_model import lfu_room

    rng = np.random.default_rng(0)
    readers = rng.integers(0, 4, (20, 6)).astype(float)
    rows = np.exp(rng.uniform(np.log(1e2), np.log(1e7), 6))
    cap = rng.uniform(1e3, 1e7, 20)
    draws = rng.uniform(1e3, 1e5, (20, 6))
    together = lfu_room(cap, readers, rows, 1.05, draws)
    for i in range(20):
        alone = lfu_room(float(cap[i]), readers[i], rows, 1.05, draws[i])
        assert together[i] == pytest.approx(alone)
        assert together[i].sum() <= cap[i] * (1 + 1e-9)
        assert (together[i] <= rows + 1e-6).all()


def test_grouped_tables_give_every_table_its_readers_and_no_more():
    import numpy as np

    from bench.sim.locality import grouped_tables

    rows = {"table-00": 100, "table-01": 50}
    drawn = [("table-00",), (), ("table-00", "table-01"), ("table-01",), ("table-00",)]
    created = np.array([5.0, 0.0, 1.0, 3.0, 2.0])  # arrival order: 2, 4, 3, 0
    got = grouped_tables(drawn, created, 2, rows)
    assert got[1] == ()  # not a reader
    assert got[2] == got[4] == ("g000-table-00", "g000-table-01")  # the first reader's draw
    assert got[3] == got[0] == ("g001-table-01",)
    assert rows["g000-table-01"] == rows["g001-table-01"] == 50  # copies, same size
    readers = {}
    for ts in got:
        for t in ts:
            readers[t] = readers.get(t, 0) + 1
    assert set(readers.values()) == {2}
    with pytest.raises(ValueError):
        grouped_tables(drawn, created, 0, rows)


def test_length_and_sharing_sweeps_move_the_jobs_not_the_topology():
    import yaml

    from bench.sim.locality import TOPOLOGY
    from bench.sim.locality_sweep import sweeps

    raw = yaml.safe_load(TOPOLOGY.read_text())
    s = sweeps()
    assert s["length"].overrides(raw, 0.1) == {} and s["sharing"].overrides(raw, 4) == {}
    assert s["length"].run_kwargs(0.1) == {"length_scale": 0.1}
    assert s["sharing"].run_kwargs(4.0) == {"readers_per_table": 4}
    full = run_locality(seed=4, locality=False, n_jobs=30)
    short = run_locality(seed=4, locality=False, n_jobs=30, length_scale=0.01)
    assert short.jct_mean < 0.1 * full.jct_mean  # same jobs, a hundredth of the steps
    # Short jobs spend more of their run warming their caches.
    assert short.warmup_miss > full.warmup_miss
    alone = run_locality(seed=4, locality=False, n_jobs=30, readers_per_table=1)
    assert alone.jobs == full.jobs and alone.hit_ratio < full.hit_ratio


def test_sweep_report_from_runs_pairs_with_and_without(tmp_path):
    import json

    base = {"sweep": "sharing", "value": 4.0, "rec_jct_mean": 3.0, "makespan": 4.0,
            "fetch_share": 0.5, "placed_store_rack": 0.25, "link_stretch": 1.5,
            "hit_ratio": 0.7}
    runs = [{**base, "seed": s, "locality": loc, "jct_mean": 10.0 if not loc else 8.0 + s % 2}
            for s in (1, 2) for loc in (False, True)]
    runs.append({**base, "seed": 3, "locality": False, "jct_mean": 10.0})  # no pair: left out
    src = tmp_path / "runs.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in runs))
    out = CliRunner().invoke(bench_cli, ["locality-sweep", "--runs-from", str(src), "--out",
                                         str(tmp_path / "report")])
    assert out.exit_code == 0, out.output
    table = pd.read_csv(tmp_path / "report" / "sweep.csv")
    assert table["seeds"].tolist() == [2]
    assert table["jct_ratio"].tolist() == pytest.approx([0.85])  # (0.9 + 0.8) / 2
    assert "not grouped" in (tmp_path / "report" / "sweep.md").read_text()


def test_delay_scheduling_runs_the_same_trace_and_counts_who_waited():
    off = run_locality(seed=5, locality=False, n_jobs=60, mode="high-load")
    on = run_locality(seed=5, locality=True, n_jobs=60, mode="high-load", delay=True)
    assert on.jobs == off.jobs and on.jct_mean > 0
    assert off.delayed == 0.0 and 0.0 <= on.delayed <= 1.0
    term_only = run_locality(seed=5, locality=True, n_jobs=60, mode="high-load")
    assert term_only.delayed == 0.0


def recorded_publications(monkeypatch: pytest.MonkeyPatch, made: list | None = None
                          ) -> list[tuple[str, bool]]:
    """The replay's index records each node publication it reads: (node, with an annotation);
    ``made``: the indexes the replay makes are added to it."""
    import bench.sim.locality as replay
    from extender.placement.locality import LocalityIndex

    seen: list[tuple[str, bool]] = []

    class Recording(LocalityIndex):
        def __init__(self, weights):  # type: ignore[no-untyped-def]
            super().__init__(weights)
            if made is not None:
                made.append(self)

        def observe_node(self, name, annotations, labels):  # type: ignore[no-untyped-def]
            seen.append((name, bool(annotations)))
            return super().observe_node(name, annotations, labels)

    monkeypatch.setattr(replay, "LocalityIndex", Recording)
    return seen


def test_every_cache_publishes_itself_before_the_first_job(monkeypatch):
    """As the cache DaemonSet does on every node (its first publication, empty), the replay's
    index knows every node's cache size before any job: a node no job ran on yet is scored
    by the warm-up the job's own reads give it there, not as a node without a cache."""
    seen = recorded_publications(monkeypatch)
    topo = Topology.load(None, seed=3)
    run_locality(seed=3, locality=True, n_jobs=20)
    first = seen[:len(topo.names)]
    assert sorted(n for n, _ in first) == sorted(topo.names)
    assert all(published for _, published in first)


def test_an_empty_published_cache_scores_the_jobs_own_warm_up():
    from bench.sim.locality import step_rows
    from extender.placement.locality import EmbeddingSpec, LocalityIndex

    topo = Topology.load(None, seed=1)
    rows = {"a": 10**8}
    draws = {"a": step_rows(float(rows["a"]), 1.05, 50_000.0)[0]}
    caches = NodeCaches(topo, rows, row_bytes=256, draws=draws)
    empty, unknown = topo.names[0], topo.names[1]
    ix = LocalityIndex()
    ix.observe_node(empty, caches.annotation(empty, 0.0), topo.labels(empty))
    ix.observe_node(unknown, None, topo.labels(unknown))
    long_job = EmbeddingSpec("s", ("a",), {"a": rows["a"]}, ids_per_step={"a": int(draws["a"])},
                             steps=100_000)
    per_table, _, _ = ix.cache_room.expected_tables(long_job, ix.slots_of([empty, unknown]))
    # a long job fills an empty cache early in its run: most of its rows are served there
    assert per_table[0, 0] > 0.5
    assert per_table[0, 1] == 0.0  # no cache known: nothing served


def test_caches_publish_again_as_their_readers_fill_them(monkeypatch):
    """Between its jobs' starts and ends a node's cache publishes what its readers' misses
    filled, at the cache DaemonSet's pace; reading what it holds for that leaves the replay's
    caches as they were (a term of zero weight places and runs every job alike either way)."""
    import math

    import bench.sim.locality as replay

    calls = recorded_publications(monkeypatch)
    nodes = len(Topology.load(None, seed=3).names)
    mute = LocalityWeights(cache=0.0, rack=0.0, zone=0.0, avoid=0.0)
    paced = run_locality(seed=3, locality=True, n_jobs=30, weights=mute)
    # beyond the first publications and one at each reader's start and end
    assert len(calls) > nodes + 2 * 30
    monkeypatch.setitem(replay.PACING, "min_interval_s", math.inf)
    calls.clear()
    unpaced = run_locality(seed=3, locality=True, n_jobs=30, weights=mute)
    assert len(calls) <= nodes + 2 * 30
    assert unpaced.jct == paced.jct
    assert unpaced.hit_ratio == paced.hit_ratio


def test_a_shadow_oracle_is_asked_and_not_followed():
    """``shadow``: the oracle prices every choice of node beside the term, and the run is the
    term's own, run for run; what is reported is how often the two chose alike."""
    plain = run_locality(seed=3, locality=True, n_jobs=40)
    shadowed = run_locality(seed=3, locality=True, n_jobs=40, shadow="greedy-rows")
    assert shadowed.jct == plain.jct
    assert shadowed.hit_ratio == plain.hit_ratio
    assert 0.0 <= shadowed.oracle_agreement <= 1.0
    assert plain.oracle_agreement != plain.oracle_agreement  # nan: not asked
    with pytest.raises(ValueError):
        run_locality(seed=3, locality=False, n_jobs=10, shadow="greedy-rows")
    with pytest.raises(ValueError):
        run_locality(seed=3, locality=True, n_jobs=10, shadow="greedy-rows", oracle="ideal")


def test_the_term_knows_the_stores_egress_and_its_readers(monkeypatch):
    """The replay's term prices misses under the store's load: the egress its shards serve
    together (``links.shard_gbps`` x shards) and the reader pods the caches publish."""
    made: list = []
    recorded_publications(monkeypatch, made)
    topo = Topology.load(None, seed=3)
    run_locality(seed=3, locality=True, n_jobs=30)
    ix = made[0]
    shards = len(topo.shards())
    assert ix.weights.network.store_gbps == topo.raw["links"]["shard_gbps"] * shards
    assert ix.store_readers() >= 0  # the publications carry their pods
    assert (ix.pods[:len(ix.slot)] >= 0).all()


def test_the_extenders_wait_runs_in_the_replay_and_only_with_a_bound():
    from extender.placement.locality import LocalityWeights

    kw = {"seed": 5, "n_jobs": 150, "load": 1.5}
    off = run_locality(locality=False, **kw)
    waiting = run_locality(locality=True, weights=LocalityWeights(max_wait_s=600), **kw)
    assert waiting.jobs == off.jobs and 0.0 < waiting.delayed < 0.5
    assert run_locality(locality=True, **kw).delayed == 0.0  # no bound: nobody waits
    no_time = run_locality(locality=True, weights=LocalityWeights(max_wait_s=1e-6), **kw)
    assert no_time.delayed == 0.0


def test_cli_takes_topology_values_and_rejects_bad_ones(tmp_path):
    import csv

    unlimited = [a for link in ("node_nic", "shard", "rack_uplink", "zone_link")
                 for a in ("--set", f"links.{link}_gbps=0")]
    out = CliRunner().invoke(bench_cli, ["locality", "--seeds", "5", "--jobs", "40", "-j", "1",
                                         "--mode", "continuous", "--scenario", "recommendation",
                                         *unlimited, "--out", str(tmp_path)])
    assert out.exit_code == 0, out.output
    (row,) = csv.DictReader((tmp_path / "summary.csv").open())
    assert float(row["link_stretch_off"]) == float(row["link_stretch_on"]) == 1.0  # no link binds
    bad = CliRunner().invoke(bench_cli, ["locality", "--set", "nonsense"])
    assert bad.exit_code == 2 and "KEY=VALUE" in bad.output
