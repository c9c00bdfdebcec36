"""The locality replay drives the extender's locality term through the simulator."""

from __future__ import annotations

from click.testing import CliRunner

from bench.cli import main as bench_cli
from bench.sim.locality import Topology, run_locality


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
    net = StoreNetwork(raw, topo.zone, topo.rack)
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
