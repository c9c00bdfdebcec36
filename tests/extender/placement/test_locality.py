"""The locality term: parsing, the index, and its effect through filter and prioritize."""

from __future__ import annotations

import json

import numpy as np
import pytest
from builders import gpu_node, inventory, pod

from extender.annotations import ANN_EMBEDDING, ANN_EMBEDDING_CACHE, DEFAULT_RACK_LABEL
from extender.demand import ContainerRequest, PodDemand
from extender.interference import default_matrix
from extender.ledger.memory import MemoryLedger
from extender.placement import make_policy
from extender.placement.locality import (
    EmbeddingSpec,
    InvalidEmbedding,
    LocalityIndex,
    LocalityWeights,
    combine,
    decode_cache,
    encode_cache,
    parse_embedding,
)
from extender.protocol import decode_extender_args
from extender.service import Scheduler

ZONE = "topology.kubernetes.io/zone"


def demand(n=1):
    return PodDemand(uid="p", namespace="ml", name="p", containers=(ContainerRequest("c", n),),
                     whole_gpus=n, share_milli=0, share_mem_mib=0)


def cache(rows, totals=None, used=0, cap=0):
    return {ANN_EMBEDDING_CACHE: encode_cache(rows, totals or {}, used, cap, 0.0)}


def labels(zone, rack):
    return {ZONE: zone, DEFAULT_RACK_LABEL: rack}


def test_parse_embedding_accepts_and_rejects():
    assert parse_embedding({}) is None
    spec = parse_embedding({ANN_EMBEDDING: json.dumps(
        {"store": "s", "tables": ["a", "b", "a"], "hotRows": {"a": 10}, "required": True})})
    assert spec == EmbeddingSpec("s", ("a", "b"), {"a": 10}, True)
    assert parse_embedding({ANN_EMBEDDING: '{"store":"s","tables":["a"],"hotRows":5}'}
                           ).hot_rows == {"a": 5}
    assert parse_embedding({ANN_EMBEDDING: '{"store":"s","tables":["a"],"maxWaitSeconds":90}'}
                           ).max_wait_s == 90.0
    for bad in ("nope", "[]", '{"tables":["a"]}', '{"store":"s","tables":[]}',
                '{"store":"s","tables":["a"],"hotRows":-1}',
                '{"store":"s","tables":["a"],"hotRows":true}',
                '{"store":"s","tables":["a"],"required":"yes"}',
                '{"store":"s","tables":["a"],"maxWaitSeconds":-1}',
                '{"store":"s","tables":["a"],"maxWaitSeconds":"60"}',
                '{"store":"s","tables":["a"],"maxWaitSeconds":true}'):
        with pytest.raises(InvalidEmbedding):
            parse_embedding({ANN_EMBEDDING: bad})


def test_cache_annotation_round_trip_and_garbage():
    c = decode_cache(encode_cache({"a": 5}, {"a": 100}, 50, 100, 1.0))
    assert c.rows == {"a": 5} and c.totals == {"a": 100} and c.fill == 0.5
    assert c.readers is None  # not published: the scheduler cannot tell use from leftovers
    assert decode_cache("{bad") is None and decode_cache(None) is None
    # Readers per table; a table read but not cached yet is listed with no rows.
    c = decode_cache(encode_cache({"a": 5, "old": 7}, {}, 50, 100, 1.0, readers={"a": 2, "b": 1}))
    assert c.rows == {"a": 5, "old": 7, "b": 0}
    assert c.readers == {"a": 2, "old": 0, "b": 1}


def test_parse_ids_per_step():
    spec = parse_embedding({ANN_EMBEDDING: json.dumps(
        {"store": "s", "tables": ["a", "b"], "idsPerStep": {"a": 4096}})})
    assert spec.ids_per_step == {"a": 4096}
    spec = parse_embedding({ANN_EMBEDDING: '{"store":"s","tables":["a"],"idsPerStep":100}'})
    assert spec.ids_per_step == {"a": 100}
    with pytest.raises(InvalidEmbedding, match="idsPerStep"):
        parse_embedding({ANN_EMBEDDING: '{"store":"s","tables":["a"],"idsPerStep":0}'})


def test_fetched_rows_share_is_below_the_lookup_share():
    from extender.placement.cache_model import served_share

    c = np.array([0.0, 1e3, 1e5, 1e6, 1e7])
    draws = served_share(c, 1e7, 1.05)
    fetched = served_share(c, 1e7, 1.05, draws=200_000)
    assert fetched[0] == draws[0] == 0 and fetched[-1] == pytest.approx(1.0)
    assert (np.diff(fetched) > 0).all() and (fetched[1:-1] < draws[1:-1]).all()
    # Against a sampled step: the share of its distinct ids among the top 10^5 ranks.
    ids = np.random.default_rng(1).zipf(1.05, 2_000_000)
    ids = np.unique(ids[ids <= 1e7][:200_000])
    assert fetched[2] == pytest.approx((ids <= 1e5).mean(), abs=0.03)


def test_cache_room_and_shared_tables():
    """A node whose cache already serves the job's table to running pods beats an empty cache
    (warm at once, no new table), which beats a cache crowded with other tables in use (less
    room once warm, and the tables there lose rows)."""
    ix = LocalityIndex(LocalityWeights(id_skew=1.05))
    row = 100  # bytes per cached row
    cap = 1_000_000 * row
    ix.observe_node("shared", {ANN_EMBEDDING_CACHE: encode_cache(
        {"t": 500_000, "u": 500_000}, {"t": 10**7, "u": 10**7}, 10**6 * row, cap, 0.0,
        readers={"t": 1, "u": 1})}, None)
    ix.observe_node("empty", cache({}, used=0, cap=cap), None)
    ix.observe_node("crowded", {ANN_EMBEDDING_CACHE: encode_cache(
        {"u": 250_000, "v": 250_000, "w": 250_000, "x": 250_000}, {}, 10**6 * row, cap, 0.0,
        readers=dict.fromkeys("uvwx", 2))}, None)
    ix.observe_node("nocache", None, None)
    spec = EmbeddingSpec("s", ("t",), {"t": 2_000_000}, ids_per_step={"t": 100_000})
    slots = ix.slots_of(["shared", "empty", "crowded", "nocache"])
    rooms, cap = ix.room(spec, slots)
    assert cap[:3].tolist() == pytest.approx([1e6] * 3) and cap[3] == np.inf
    pull = 2 ** (1 / 1.05)  # t read by two pods (the job too), u by one: LFU keeps more of t
    assert rooms["t"][0] == pytest.approx(1e6 * pull / (1 + pull))
    assert rooms["t"][1] == pytest.approx(1e6)  # the empty cache's row size from the others
    assert rooms["t"][2] < 2e5 and rooms["t"][3] == np.inf
    share = ix.cached_share(spec, slots)
    assert share[0] > share[1] > share[2] and share[3] == 0
    squeezed = ix.squeeze(spec, slots)
    assert squeezed[2] > squeezed[0] > 0 == squeezed[1]  # u loses a little room on "shared"


def test_rack_bonus_is_the_share_of_shards_in_the_rack():
    ix = LocalityIndex(LocalityWeights(cache=0, rack=1.0, zone=0.0))
    for name, rack in (("s1", "r1"), ("s2", "r1"), ("s3", "r1"), ("s4", "r2"), ("n", "r3")):
        ix.observe_node(name, None, labels("z", rack))
    ix.set_store("s", {"s1", "s2", "s3", "s4"})
    bonus = ix.bonus(EmbeddingSpec("s", ("a",)), ["s1", "s4", "n", "unknown"])
    assert bonus.tolist() == pytest.approx([0.75, 0.25, 0.0, 0.0])


def test_cached_share_counts_hot_rows_then_rack_then_zone():
    ix = LocalityIndex(LocalityWeights(id_skew=0))  # by row count
    ix.observe_node("full", cache({"a": 1000, "b": 50}), labels("z1", "r1"))
    ix.observe_node("half", cache({"a": 500}), labels("z1", "r2"))
    ix.observe_node("rack", None, labels("z1", "r1"))
    ix.observe_node("zone", None, labels("z1", "r9"))
    ix.observe_node("far", None, labels("z2", "r1"))  # same rack name, other zone
    ix.set_store("s", {"rack"})
    spec = EmbeddingSpec("s", ("a", "b"), {"a": 1000, "b": 100})
    names = ["full", "half", "rack", "zone", "far", "unknown"]
    share = ix.cached_share(spec, ix.slots_of(names))
    assert share == pytest.approx([1050 / 1100, 500 / 1100, 0, 0, 0, 0])
    bonus = ix.bonus(spec, names)
    assert bonus[0] > bonus[2] > bonus[3] > bonus[4] == bonus[5] == 0
    # Half cached, off the store's rack: the zone tier pays on the misses only.
    assert bonus[1] == pytest.approx(500 / 1100 + 0.2 * (600 / 1100))
    assert bonus[0] == pytest.approx(1050 / 1100 + 0.7 * (50 / 1100))
    assert bonus[2] == pytest.approx(0.7) and bonus[3] == pytest.approx(0.2)
    # Table sizes from the annotation stand in for missing hotRows.
    ix.observe_node("half", cache({"a": 500}, {"a": 2000}), labels("z1", "r2"))
    no_hot = EmbeddingSpec("s", ("a",))
    assert ix.cached_share(no_hot, ix.slots_of(["half"]))[0] == pytest.approx(0.25)


def test_cached_share_by_lookups_served_under_zipf_ids():
    ix = LocalityIndex()  # id_skew 1.05: the hottest rows serve most lookups
    ix.observe_node("head", cache({"a": 10_000}, {"a": 10_000_000}), None)
    ix.observe_node("more", cache({"a": 1_000_000}, {"a": 10_000_000}), None)
    ix.observe_node("all", cache({"a": 10_000_000}, {"a": 10_000_000}), None)
    ix.observe_node("none", None, None)
    share = ix.cached_share(EmbeddingSpec("s", ("a",)), ix.slots_of(["head", "more", "all",
                                                                        "none"]))
    ids = np.random.default_rng(0).zipf(1.05, 200_000)
    ids = ids[ids <= 10_000_000]
    assert share[0] == pytest.approx((ids <= 10_000).mean(), abs=0.05)  # about 0.7, not 0.001
    assert share[1] == pytest.approx((ids <= 1_000_000).mean(), abs=0.05)
    assert 0 < share[0] < share[1] < share[2] == pytest.approx(1.0) and share[3] == 0


def test_term_scales_with_gpus_never_overrides_fit_and_steers_others_away():
    ix = LocalityIndex()
    ix.observe_node("cached", cache({"a": 10}, used=90, cap=100), None)
    ix.observe_node("empty", None, None)
    spec = EmbeddingSpec("s", ("a",), {"a": 10})
    term = ix.term(spec, demand(2), ["cached", "empty"])
    assert term.tolist() == [-2.0, 0.0]
    costs = combine(np.array([np.inf, 1.0]), term)
    assert costs[0] == np.inf and costs[1] == 1.0  # infeasible stays infeasible
    avoid = ix.term(None, demand(1), ["cached", "empty"])
    assert 0 < avoid[0] <= 0.02 and avoid[1] == 0


def test_unchanged_node_is_cheap_and_forget_clears():
    ix = LocalityIndex()
    assert ix.observe_node("n", cache({"a": 1}), labels("z", "r"))
    assert not ix.observe_node("n", cache({"a": 1}), labels("z", "r"))
    ix.forget_node("n")
    assert ix.cached_share(EmbeddingSpec("s", ("a",)), ix.slots_of(["n"]))[0] == 0


def test_required_mode_keeps_only_the_store_racks():
    ix = LocalityIndex()
    ix.observe_node("in", None, labels("z", "r1"))
    ix.observe_node("out", None, labels("z", "r2"))
    spec = EmbeddingSpec("s", ("a",), required=True)
    assert set(ix.required_misses(spec, ["in", "out"])) == {"in", "out"}  # store unknown
    ix.set_store("s", {"in"})
    assert list(ix.required_misses(spec, ["in", "out"])) == ["out"]


# --- through the verbs ----------------------------------------------------------------------

def args(p, names):
    return decode_extender_args(json.dumps({"Pod": p, "NodeNames": names}).encode())


def scheduler():
    s = Scheduler(inventory=inventory(gpu_node("a", 4), gpu_node("b", 4), gpu_node("c", 4)),
                  ledger=MemoryLedger(), matrix=default_matrix(), policy=make_policy("sparse"))
    s.update_nodes([("a", cache({"emb": 5000}, used=900, cap=1000), labels("z", "r1")),
                    ("b", None, labels("z", "r1")), ("c", None, labels("z", "r2"))])
    s.locality.set_store("store", {"b"})
    return s


def embedded(required=False, tables=("emb",)):
    p = pod(gpus=1, job_class="recommendation")
    p["metadata"]["annotations"][ANN_EMBEDDING] = json.dumps(
        {"store": "store", "tables": list(tables), "hotRows": 5000, "required": required})
    return p


async def scores(s, p, names=("a", "b", "c")):
    await s.filter(args(p, list(names)))
    return {h.Host: h.Score for h in await s.prioritize(args(p, list(names)))}


async def test_prioritize_prefers_cache_then_rack():
    s = scheduler()
    got = await scores(s, embedded())
    assert got["a"] > got["b"] > got["c"]
    # Nothing of "other" cached: a's cache has room for it once warm (its rows are a leftover
    # nobody reads), then the store's rack.
    got = await scores(s, embedded(tables=("other",)))
    assert got["a"] > got["b"] > got["c"]
    other = EmbeddingSpec("store", ("other",), {"other": 5000})
    leftover = s.locality.bonus(other, ["a", "b"])
    # a's cache now full of tables running pods read: "other" gets less room and squeezes them.
    s.update_nodes([("a", {ANN_EMBEDDING_CACHE: encode_cache(
        {"emb": 2500, "x": 2500}, {}, 900, 1000, 0.0, readers={"emb": 3, "x": 3})},
        labels("z", "r1"))])
    crowded = s.locality.bonus(other, ["a", "b"])
    assert crowded[0] < leftover[0] and crowded[1] == leftover[1]


async def test_pod_without_embeddings_avoids_the_cache_node_only_on_a_tie():
    s = scheduler()
    got = await scores(s, pod(gpus=1))
    assert got["b"] > got["a"]
    s.locality.weights = type(s.locality.weights)(avoid=0.0)  # the node order alone: a first
    got = await scores(s, pod(gpus=1))
    assert got["a"] > got["b"]


async def test_required_filter_rejects_nodes_outside_the_store_rack():
    s = scheduler()
    out = await s.filter(args(embedded(required=True), ["a", "b", "c"]))
    assert out.NodeNames == ["a", "b"]
    assert "not in a rack" in out.FailedNodes["c"]


async def test_invalid_embedding_is_a_clear_filter_error_and_neutral_score():
    s = scheduler()
    p = pod(gpus=1)
    p["metadata"]["annotations"][ANN_EMBEDDING] = "{oops"
    out = await s.filter(args(p, ["a", "b"]))
    assert out.NodeNames == []
    assert "sparse.io/embedding" in out.FailedAndUnresolvableNodes["a"]
    got = {h.Host: h.Score for h in await s.prioritize(args(p, ["a", "b"]))}
    assert set(got) == {"a", "b"}


async def test_store_shards_follow_pod_events():
    from extender.kube.stores import StoreShards

    ix = LocalityIndex()
    shards = StoreShards(ix)

    def shard(uid, node, phase="Running", store="s"):
        return {"metadata": {"uid": uid, "labels": {"sparse.io/embedding-store": store}},
                "spec": {"nodeName": node}, "status": {"phase": phase}}

    await shards.resync([shard("1", "a"), shard("2", "b"), shard("3", None)])
    assert ix.store_nodes["s"] == {"a", "b"}
    await shards.on_event("MODIFIED", shard("2", "b", phase="Failed"))
    assert ix.store_nodes["s"] == {"a"}
    await shards.on_event("DELETED", shard("1", "a"))
    assert "s" not in ix.store_nodes
    await shards.resync([shard("4", "c", store="t")])
    assert ix.store_nodes == {"t": frozenset({"c"})}


def test_avoidance_only_between_idle_nodes():
    from extender.ledger.rules import Allocation, Reservation
    from extender.placement import ClusterState
    from extender.placement.locality import idle_nodes

    state = ClusterState.build(inventory(gpu_node("a", 2), gpu_node("b", 2)), default_matrix())
    state.apply(Reservation(pod_uid="x", namespace="ml", name="x", node="a",
                            allocations=(Allocation("GPU-a-0", "c", 1000, 100),)))
    assert idle_nodes(state, ["a", "b", "ghost"]).tolist() == [False, True, False]
    ix = LocalityIndex()
    ix.observe_node("a", cache({"t": 5}), None)
    ix.observe_node("b", cache({"t": 5}), None)
    term = ix.term(None, demand(1), ["a", "b"], idle_nodes(state, ["a", "b"]))
    assert term[0] == 0 and term[1] > 0  # packing onto the used node is never discouraged


def test_lfu_room_by_read_rate_with_water_filling():
    from extender.placement.cache_model import lfu_room

    equal = lfu_room(900, np.array([1, 1, 1]), np.array([1e6, 1e6, 1e6]), 1.05)
    assert equal.tolist() == pytest.approx([300, 300, 300])
    shared = lfu_room(900, np.array([3, 1, 0]), np.array([1e6, 1e6, 1e6]), 1.05)
    assert shared[2] == 0 and shared[0] == pytest.approx(3 ** (1 / 1.05) * shared[1])
    small = lfu_room(900, np.array([1, 1]), np.array([100, 1e6]), 1.05)  # fits whole
    assert small.tolist() == pytest.approx([100, 800])


def test_cache_of_shows_what_the_index_read():
    ix = LocalityIndex()
    ix.observe_node("n", {ANN_EMBEDDING_CACHE: encode_cache(
        {"a": 5}, {"a": 100}, 50, 100, 0.0, readers={"a": 1, "b": 2}, ids={"b": 300})}, None)
    assert ix.cache_of("n") == {"a": {"rows": 5, "readers": 1, "ids": 0},
                                "b": {"rows": 0, "readers": 2, "ids": 300}}
    assert ix.cache_of("ghost") == {}
    ix.observe_node("n", None, None)  # the annotation went away
    assert ix.cache_of("n") == {}


def test_empty_cache_states_its_row_bytes_and_so_its_size_in_rows():
    # A cold cluster: no cache holds a row yet, so used bytes over rows says nothing.
    old = encode_cache({}, {}, 1_000_000, 2**30, 0.0, readers={})
    assert "rowBytes" not in old and decode_cache(old).row_bytes == 0.0  # as before
    ix = LocalityIndex()
    ix.observe_node("old", {ANN_EMBEDDING_CACHE: old}, None)
    ix.observe_node("new", {ANN_EMBEDDING_CACHE: encode_cache(
        {}, {}, 1_000_000, 2**30, 0.0, readers={}, row_bytes=576.0)}, None)
    rows = ix.capacity_rows(ix.slots_of(["old", "new"]))
    # the old publisher's empty cache falls back to the one stated row size in the cluster
    assert rows.tolist() == pytest.approx([2**30 / 576.0] * 2)
    ix.forget_node("new")
    assert np.isinf(ix.capacity_rows(ix.slots_of(["old"]))).all()
    # a stated row size wins over used bytes / rows (those count Redis' own memory too)
    ix.observe_node("n", {ANN_EMBEDDING_CACHE: encode_cache(
        {"a": 1000}, {"a": 10**6}, 5_000_000, 2**30, 0.0, row_bytes=600.0)}, None)
    assert ix.cache_of("n")["a"]["rows"] == 1000
    assert ix.capacity_rows(ix.slots_of(["n"]))[0] == pytest.approx(2**30 / 600)


def test_fetched_row_curves_are_computed_once_per_table():
    from extender.placement import cache_model

    sizes = np.array([1e6 + k for k in range(40)])  # more tables than the bank starts with
    draws = np.full(40, 5e4)
    group = np.arange(40)
    got = cache_model.served_shares(np.full(40, 1e4), group, sizes, 1.05, draws)
    want = [float(cache_model.served_share(1e4, n, 1.05, 5e4)) for n in sizes]
    assert got == pytest.approx(want, rel=1e-3)
    held = len(cache_model._BANK.at)
    cache_model.served_shares(np.full(41, 1e4), np.arange(41), np.append(sizes, 2e6), 1.05,
                              np.append(draws, 5e4))
    assert len(cache_model._BANK.at) == held + 1  # one new table, one new curve


def test_pods_without_embeddings_avoid_nodes_once_a_cache_holds_something_and_no_longer():
    ix = LocalityIndex()
    ix.observe_node("a", None, None)
    assert not ix.avoids()  # no cache holds anything: the term is zero
    ix.observe_node("b", cache({"t": 500}, {"t": 1000}, used=50, cap=100), None)
    assert ix.avoids()  # asked again after the change, not the answer kept from before
    ix.observe_node("b", cache({}, used=0, cap=100), None)
    assert not ix.avoids()
    ix.observe_node("c", cache({"t": 5}, {"t": 1000}, used=10, cap=100), None)
    assert ix.avoids()
    assert not LocalityIndex(LocalityWeights(avoid=0.0)).avoids()
