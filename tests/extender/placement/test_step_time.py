"""The locality term in step time saved (``step_time``) and the index's time bonus."""

from __future__ import annotations

import json

import numpy as np
import pytest

from extender.annotations import ANN_EMBEDDING, ANN_EMBEDDING_CACHE, DEFAULT_RACK_LABEL
from extender.placement.locality import (
    EmbeddingSpec,
    InvalidEmbedding,
    LocalityIndex,
    LocalityWeights,
    encode_cache,
    parse_embedding,
)
from extender.placement.step_time import (
    GBPS,
    NetworkModel,
    miss_path,
    reference_seconds,
    saved_share,
    step_seconds,
)

ZONE = "topology.kubernetes.io/zone"
NET = NetworkModel()
MB = 1e6


def test_step_time_prices_hits_and_paths():
    b = np.array([25 * MB])
    per_byte, far = miss_path(NET, np.array([1.0, 0.0, 0.0]), np.array([1.0, 1.0, 0.0]))
    t = step_seconds(NET, 0.01, np.zeros((1, 3)), b, per_byte, far)
    # cold: rack 10 Gb/s, zone 5, across zones 2.5 (+ the farthest shard's latency)
    assert t == pytest.approx([0.01 + 5e-5 + 2e-4 + 0.02, 0.01 + 5e-5 + 5e-4 + 0.04,
                               0.01 + 5e-5 + 1e-3 + 0.08])
    assert t[2] == pytest.approx(reference_seconds(NET, 0.01, b))
    warm = step_seconds(NET, 0.01, np.ones((1, 3)), b, per_byte, far)
    assert warm == pytest.approx([0.01 + 5e-5 + 25 * MB / 1e10] * 3)


def test_a_fetch_bound_job_weighs_locality_heavily_a_compute_bound_one_barely():
    b = np.array([25 * MB, 25 * MB])
    hits = np.array([[0.9, 0.0], [0.9, 0.0]])  # tables x (warm node, cold node)
    rack, zone = np.array([1.0, 0.0]), np.array([1.0, 0.0])
    fetch_bound = saved_share(NET, 0.005, hits, b, rack, zone)
    compute_bound = saved_share(NET, 5.0, hits, b, rack, zone)
    assert fetch_bound[1] == compute_bound[1] == 0.0  # the reference: cold, across zones
    assert fetch_bound[0] > 0.8
    assert 0 < compute_bound[0] < 0.05


def test_a_saturated_store_prices_every_path_alike_and_counts_the_readers_held_back():
    net = NetworkModel(store_gbps=40.0)
    b = np.array([25 * MB])
    rack, zone = np.array([1.0, 0.0]), np.array([1.0, 0.0])  # the store's rack; across zones
    half = np.array([[0.5, 0.5]])
    idle = saved_share(net, 0.01, half, b, rack, zone)  # no other reader: the paths decide
    assert idle[0] > idle[1] + 0.1
    assert np.array_equal(idle, saved_share(NET, 0.01, half, b, rack, zone))
    # 100 readers share 40 Gb/s: 0.4 Gb/s each, below every path; a missed byte costs the
    # same from both nodes (only the farthest shard's latency still differs)
    busy = saved_share(net, 0.01, half, b, rack, zone, readers=100)
    egress = 40.0 * GBPS
    own_ref = reference_seconds(net, 0.01, b, readers=100)
    assert own_ref == pytest.approx(0.01 + 5e-5 + 1e-3 + 25 * MB * 101 / egress)
    assert busy[0] - busy[1] == pytest.approx((1e-3 - 2e-4) / own_ref)
    # a row the cache serves saves the job its share's time and the 100 others the time the
    # byte would hold them back, in shares of the job's own reference step
    more = saved_share(net, 0.01, np.array([[0.9, 0.5]]), b, rack, zone, readers=100)
    gain = 0.4 * 25 * MB * (201 / egress - NET.local.seconds_per_byte) / own_ref
    assert more[0] - busy[0] == pytest.approx(gain)
    assert more[0] - busy[0] > 0.4 * 1.9  # about twice the job's own share of those rows
    # a store whose share is above every path (400 Gb/s, 3 readers) changes nothing
    roomy = NetworkModel(store_gbps=400.0)
    assert np.array_equal(saved_share(roomy, 0.01, half, b, rack, zone, readers=3), idle)


def test_network_model_from_a_topology_section():
    net = NetworkModel.from_dict({"rack": {"gbps": 40, "latency_ms": 0.1}})
    assert net.rack.gbps == 40 and net.zone == NET.zone
    with pytest.raises(ValueError, match="gbps"):
        NetworkModel.from_dict({"zone": {"gbps": 0, "latency_ms": 1}})
    assert net.store_gbps == 0.0  # not named: misses priced on an idle network
    assert NetworkModel.from_dict({"store": {"gbps": 40}}).store_gbps == 40.0
    with pytest.raises(ValueError, match="store"):
        NetworkModel.from_dict({"store": {"gbps": -1}})
    with pytest.raises(ValueError, match="score"):
        LocalityWeights(score="fast")


def test_parse_step_compute():
    ann = {ANN_EMBEDDING: json.dumps({"store": "s", "tables": ["a"], "stepComputeMs": 12.5})}
    assert parse_embedding(ann).step_compute_ms == 12.5
    for bad in (-1, "1", True, None):
        if bad is None:
            assert parse_embedding({ANN_EMBEDDING: json.dumps(
                {"store": "s", "tables": ["a"]})}).step_compute_ms is None
            continue
        with pytest.raises(InvalidEmbedding, match="stepComputeMs"):
            parse_embedding({ANN_EMBEDDING: json.dumps(
                {"store": "s", "tables": ["a"], "stepComputeMs": bad})})


ROW = 512.0


def index() -> LocalityIndex:
    ix = LocalityIndex()
    cap = int(2e6 * ROW)
    for name, zone, rack, rows in (("warm", "z1", "r1", 1_000_000), ("rack", "z1", "r1", 0),
                                   ("far", "z2", "r9", 0), ("farwarm", "z2", "r9", 1_000_000)):
        held = {"a": rows} if rows else {}
        ann = encode_cache(held, {"a": 50_000_000}, int(rows * ROW), cap, 0.0, readers={},
                           row_bytes=ROW)
        ix.observe_node(name, {ANN_EMBEDDING_CACHE: ann}, {ZONE: zone, DEFAULT_RACK_LABEL: rack})
    ix.observe_node("store", None, {ZONE: "z1", DEFAULT_RACK_LABEL: "r1"})
    ix.set_store("s", {"store"})
    return ix


def spec(compute_ms: float | None) -> EmbeddingSpec:
    return EmbeddingSpec("s", ("a",), {"a": 10_000_000}, ids_per_step={"a": 200_000},
                         steps=10_000, step_compute_ms=compute_ms)


def test_time_bonus_ranks_warm_near_first_and_scales_with_the_fetch_share():
    ix = index()
    names = ["warm", "rack", "farwarm", "far"]
    fetch_bound = ix.bonus(spec(1.0), names)
    assert fetch_bound[0] > fetch_bound[1] > fetch_bound[3]
    assert fetch_bound[0] > fetch_bound[2] > fetch_bound[3]
    # A cold cache still fills over the job's run, so the far cold node saves something too.
    assert 0 < fetch_bound[3] < fetch_bound[2]
    compute_bound = ix.bonus(spec(60_000.0), names)
    assert np.all(compute_bound < 0.01) and compute_bound[0] > compute_bound[3]
    # Without a declared compute the term is the cached share and tiers, as before.
    share = LocalityIndex(LocalityWeights(score="share"))
    share.__dict__.update({k: v for k, v in ix.__dict__.items() if k not in ("weights", "_kept")})
    assert ix.bonus(spec(None), names) == pytest.approx(share.bonus(spec(1.0), names))
    assert ix.reference_run_seconds(spec(None)) is None
    ref = ix.reference_run_seconds(spec(1.0))
    assert ref == pytest.approx(10_000 * reference_seconds(
        NET, 1e-3, ix.cache_room.fetched_rows(spec(1.0)) * ROW))


def test_the_store_readers_are_the_pods_the_caches_count():
    ix = LocalityIndex(LocalityWeights(network=NetworkModel(store_gbps=40.0)))
    # a publisher that counts pods: 3 (one reads both tables)
    ix.observe_node("n1", {ANN_EMBEDDING_CACHE: encode_cache(
        {"a": 10, "b": 10}, {}, 100, 1000, 0.0, {"a": 2, "b": 2}, pods=3)}, {})
    # an older one: at least as many pods as its most read table has readers
    ix.observe_node("n2", {ANN_EMBEDDING_CACHE: encode_cache(
        {"a": 10, "b": 10}, {}, 100, 1000, 0.0, {"a": 2, "b": 1})}, {})
    ix.observe_node("n3", None, {})  # no cache: no readers known
    assert ix.store_readers() == 5.0
    ix.observe_node("n1", {ANN_EMBEDDING_CACHE: encode_cache(
        {"a": 10}, {}, 100, 1000, 0.0, {"a": 1}, pods=1)}, {})
    assert ix.store_readers() == 3.0
    ix.forget_node("n2")
    assert ix.store_readers() == 1.0
