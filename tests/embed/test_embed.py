"""Embedding store, read-through cache, publisher and client against real redis-servers."""

from __future__ import annotations

import json

import numpy as np
import pytest
from builders import free_port
from click.testing import CliRunner

from bench.redis_server import RedisServer
from embed import layout
from embed.admission import Admission
from embed.cache import ReadThrough
from embed.cli import main as embed_cli
from embed.client import EmbeddingClient
from embed.layout import TableMeta
from embed.publisher import CachePublisher, Snapshot, count_rows, store_row_bytes
from embed.store import EmbeddingStore, connect
from extender.annotations import ANN_EMBEDDING, ANN_EMBEDDING_CACHE
from extender.placement.embedding_annotations import decode_cache

pytestmark = pytest.mark.redis


@pytest.fixture
def store(redis_url):
    return EmbeddingStore.from_url(redis_url)


def table(rows=1000, dim=8, seed=0):
    return np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)


@pytest.mark.parametrize("block_rows,partitions,dtype", [(1, 1, "float32"), (3, 1, "float32"),
                                                         (1, 4, "float16"), (5, 3, "float16")])
def test_store_round_trip(store, block_rows, partitions, dtype):
    data = table(1001)
    meta = TableMeta("t", 1001, 8, dtype, block_rows, partitions)
    seen = []
    store.write_table(meta, (data[i:i + 97] for i in range(0, 1001, 97)), seen.append)
    assert sum(seen) == 1001
    ids = np.array([0, 1000, 5, 5, 999, 3, 2])
    got = store.lookup("t", ids)
    tol = 0 if dtype == "float32" else 1e-2
    np.testing.assert_allclose(got, data[ids], atol=tol, rtol=tol)
    assert [m.name for m in store.tables()] == ["t"]
    with pytest.raises(IndexError):
        store.lookup("t", np.array([1001]))
    with pytest.raises(KeyError):
        store.lookup("nope", np.array([0]))


def test_keys_share_a_hash_tag_per_table_or_partition():
    meta = TableMeta("clicks", 10, 4, partitions=2)
    assert layout.block_key(meta, 3) == "emb:{clicks/p1}:3"
    assert layout.table_of_key(b"emb:{clicks/p1}:3") == "clicks"
    assert layout.table_of_key("emb:{clicks}:meta") is None
    with pytest.raises(ValueError):
        TableMeta("a{b}", 1, 1)


def test_read_through_fills_the_cache_and_survives_its_loss(redis_server, store):
    data = table()
    store.write_table(TableMeta("t", 1000, 8), [data])
    cache = connect(redis_server.url.replace("/0", "/1"))
    reader = ReadThrough(cache, store)
    ids = np.array([1, 2, 3, 2])
    np.testing.assert_array_equal(reader.lookup("t", ids), data[ids])
    assert (reader.metrics.hits, reader.metrics.misses) == (0, 3)
    assert cache.dbsize() == 3
    np.testing.assert_array_equal(reader.lookup("t", ids), data[ids])
    assert reader.metrics.hits == 3
    dead = connect(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=0.2)
    lost = ReadThrough(dead, store)
    np.testing.assert_array_equal(lost.lookup("t", ids), data[ids])
    assert not lost.cache_up and lost.metrics.fallbacks._value.get() == 1


def test_lfu_cache_keeps_hot_rows_within_maxmemory(store):
    server = RedisServer()
    try:
        cache = connect(server.url)
        cache.config_set("maxmemory", "2mb")
        cache.config_set("maxmemory-policy", "allkeys-lfu")
        data = table(20_000, 64)
        store.write_table(TableMeta("big", 20_000, 64), [data])
        reader = ReadThrough(cache, store)
        hot = np.arange(100)
        for _ in range(20):
            reader.lookup("big", hot)
        rng = np.random.default_rng(1)
        for _ in range(20):  # a cold scan much larger than the cache
            reader.lookup("big", rng.integers(100, 20_000, 1000))
            reader.lookup("big", hot)
        assert int(cache.info("stats")["evicted_keys"]) > 0
        assert int(cache.info("memory")["used_memory"]) <= 2 * 1024 * 1024 * 1.1
        before = reader.metrics.hits
        reader.lookup("big", hot)
        assert reader.metrics.hits - before >= 95  # the hot rows survived the scan
        snap = count_rows(cache, store)
        assert 100 <= snap.rows["big"] < 20_000 and snap.totals["big"] == 20_000
        assert snap.row_bytes == 64 * 4 + Admission.KEY_OVERHEAD  # one row a block
        cache.flushall()  # nothing held: the row size comes from the store's tables
        empty = count_rows(cache, store, default_row_bytes=store_row_bytes(store))
        assert empty.rows == {} and empty.row_bytes == snap.row_bytes
    finally:
        server.stop()


class RecordingCore:
    def __init__(self):
        self.patches = []

    async def patch_node(self, name, body, _content_type=None):
        self.patches.append((name, body))


async def test_publisher_rate_bound_and_material_change():
    clock = [1000.0]
    snaps = [Snapshot({"a": 100}, {"a": 1000}, 10, 100, row_bytes=336.0)]
    pub = CachePublisher("n1", lambda: snaps[-1], min_interval_s=30, min_change=0.05,
                         clock=lambda: clock[0])
    core = RecordingCore()
    assert await pub.publish_once(core)
    name, body = core.patches[0]
    content = decode_cache(body["metadata"]["annotations"][ANN_EMBEDDING_CACHE])
    assert name == "n1" and content.rows == {"a": 100} and content.totals == {"a": 1000}
    assert content.row_bytes == 336.0
    snaps.append(Snapshot({"a": 500}, {"a": 1000}, 50, 100))
    clock[0] += 10
    assert not await pub.publish_once(core)  # too soon
    clock[0] += 30
    assert await pub.publish_once(core)
    snaps.append(Snapshot({"a": 501}, {"a": 1000}, 50, 100))
    clock[0] += 60
    assert not await pub.publish_once(core)  # no material change
    clock[0] += 600
    assert await pub.publish_once(core)  # heartbeat


def test_client_lookup_prefetch_and_numpy_shape(redis_server, store):
    data = table()
    store.write_table(TableMeta("t", 1000, 8), [data])
    cache_url = redis_server.url.replace("/0", "/2")
    with EmbeddingClient("t", cache_url=cache_url, store_url=redis_server.url,
                         as_tensor=False) as client:
        ids = np.array([[1, 2], [3, 4]])
        nxt = np.array([7, 8, 9])
        got = client.lookup(ids, next_ids=nxt)
        assert got.shape == (2, 2, 8)
        np.testing.assert_array_equal(got, data[ids])
        np.testing.assert_array_equal(client.lookup(nxt), data[nxt])  # the prefetched batch
        np.testing.assert_array_equal(client.lookup(np.array([5])), data[[5]])


def test_cli_loads_numpy_tables(tmp_path, redis_url, store):
    a, b = table(50, 4), table(70, 6, seed=1)
    np.savez(tmp_path / "emb.npz", user=a, item=b, bias=np.zeros(3))
    out = CliRunner().invoke(embed_cli, ["load", str(tmp_path / "emb.npz"), "--store",
                                         redis_url, "--dtype", "float16"])
    assert out.exit_code == 0, out.output
    assert sorted(json.loads(out.output.strip().splitlines()[-1])["tables"]) == ["item", "user"]
    np.testing.assert_allclose(store.lookup("item", np.arange(70)), b, atol=1e-2)
    bad = CliRunner().invoke(embed_cli, ["load", str(tmp_path / "emb.npz"), "--store",
                                         redis_url, "--match", "zzz"])
    assert bad.exit_code != 0


def test_hot_tier_pins_the_most_frequent_rows_and_serves_them_in_process(redis_server, store):
    data = table(2000)
    store.write_table(TableMeta("t", 2000, 8), [data])
    with EmbeddingClient("t", cache_url=redis_server.url.replace("/0", "/4"),
                         store_url=redis_server.url, as_tensor=False, prefetch=False,
                         hot_rows=50, hot_refresh=4) as client:
        rng = np.random.default_rng(0)
        for _ in range(8):  # rows 0..49 in every batch, the rest rarely
            ids = np.concatenate([np.arange(50), rng.integers(50, 2000, 30)])
            np.testing.assert_array_equal(client.lookup(ids), data[ids])
        assert client.hot.size == 50
        before = client.metrics.hits + client.metrics.misses
        ids = np.array([3, 7, 49, 1999, 3])
        np.testing.assert_array_equal(client.lookup(ids), data[ids])
        assert client.metrics.hits + client.metrics.misses - before == 1  # only 1999 left


def test_cache_collector_exports_hits_evictions_and_bytes(redis_server, store):
    from prometheus_client import CollectorRegistry, generate_latest

    from embed.metrics import CacheCollector

    store.write_table(TableMeta("t", 100, 4), [table(100, 4)])
    server = RedisServer()  # its own server: INFO counts every database's lookups
    try:
        cache = connect(server.url)
        reader = ReadThrough(cache, store)
        reader.lookup("t", np.arange(10))
        reader.lookup("t", np.arange(10))
        registry = CollectorRegistry()
        registry.register(CacheCollector(cache, lambda: {"t": 10}))
        text = generate_latest(registry).decode()
    finally:
        server.stop()
    assert "sparse_embed_cache_hits_total 10.0" in text
    assert "sparse_embed_cache_misses_total 10.0" in text
    assert "sparse_embed_cache_hit_ratio 0.5" in text
    assert 'sparse_embed_cache_rows{table="t"} 10.0' in text
    assert "sparse_embed_cache_evictions_total" in text and "sparse_embed_cache_bytes" in text
    down = CollectorRegistry()
    down.register(CacheCollector(connect(f"redis://127.0.0.1:{free_port()}/0",
                                         socket_connect_timeout=0.2)))
    assert "sparse_embed_cache_up 0.0" in generate_latest(down).decode()
    hist = generate_latest(reader.metrics.registry).decode()
    assert 'sparse_embed_lookup_seconds_count{source="cache"} 2.0' in hist


def test_cache_location_from_the_environment(monkeypatch, tmp_path):
    from embed import client as client_mod

    monkeypatch.delenv(client_mod.ENV_CACHE, raising=False)
    monkeypatch.setattr(client_mod, "DEFAULT_SOCKET", str(tmp_path / "none.sock"))
    monkeypatch.setenv(client_mod.ENV_HOST_IP, "10.1.2.3")
    assert client_mod.cache_url_from_env() == "redis://10.1.2.3:6390/0"
    sock = tmp_path / "redis.sock"
    sock.touch()
    monkeypatch.setattr(client_mod, "DEFAULT_SOCKET", str(sock))
    assert client_mod.cache_url_from_env() == f"unix://{sock}"
    monkeypatch.setenv(client_mod.ENV_CACHE, "redis://cache:1/0")
    assert client_mod.cache_url_from_env() == "redis://cache:1/0"


def test_cli_loads_a_pytorch_state_dict(tmp_path, redis_url, store):
    import os

    from embed.client import HAVE_TORCH

    if not (HAVE_TORCH and os.environ.get("SPARSE_TORCH_TESTS")):
        pytest.skip("PyTorch path: set SPARSE_TORCH_TESTS=1 (importing torch takes seconds)")
    import torch

    model = torch.nn.ModuleDict({"user": torch.nn.Embedding(30, 4), "mlp": torch.nn.Linear(4, 2)})
    torch.save(model.state_dict(), tmp_path / "model.pt")
    out = CliRunner().invoke(embed_cli, ["load", str(tmp_path / "model.pt"), "--store",
                                         redis_url, "--match", "user.*"])
    assert out.exit_code == 0, out.output
    np.testing.assert_allclose(store.lookup("user", np.arange(30)),
                               model["user"].weight.detach().numpy())


@pytest.fixture
def lfu_server():
    from embed.cache import LFU_SETTINGS

    server = RedisServer()
    for name, value in LFU_SETTINGS.items():  # the node cache's (OBJECT FREQ needs LFU)
        connect(server.url).config_set(name, value)
    yield server
    server.stop()


@pytest.mark.parametrize("block_rows,dtype", [(1, "float32"), (4, "float16")])
def test_shared_memory_tier_serves_the_hottest_blocks_and_swaps_atomically(
        redis_url, store, lfu_server, tmp_path, block_rows, dtype):
    from embed.tier import TierBuilder, TierReader, path_of

    data = table(1001)
    meta = TableMeta("t", 1001, 8, dtype, block_rows)
    store.write_table(meta, [data])
    cache_srv = lfu_server
    cache = connect(cache_srv.url)
    reader = ReadThrough(cache, store)
    hot = np.arange(0, 1001, 7)
    for _ in range(30):  # hot ids looked up often, the rest once
        reader.lookup("t", hot)
    reader.lookup("t", np.arange(1001))
    budget = len(np.unique(hot // block_rows)) * block_rows * meta.row_bytes
    builder = TierBuilder(cache, store.meta, tmp_path, budget, scan_keys=10_000)
    held = builder.refresh()
    assert held == {"t": len(np.unique(hot // block_rows))}
    tier = TierReader(tmp_path, check_s=0.0)
    snap = tier.get(meta)
    ids = np.array([7, 3, 1000, 14, 14, 2])
    mask, rows = snap.split(ids)
    held_blocks = set(np.unique(hot // block_rows).tolist())
    assert mask.tolist() == [i // block_rows in held_blocks for i in ids.tolist()]
    tol = 0 if dtype == "float32" else 1e-2
    np.testing.assert_allclose(rows, data[ids[mask]], atol=tol, rtol=tol)
    # the client serves held rows from the map, the rest through the cache, same values
    client = EmbeddingClient("t", cache_url=cache_srv.url, store_url=redis_url,
                             prefetch=False, as_tensor=False, tier_dir=str(tmp_path))
    np.testing.assert_allclose(client.lookup(ids), data[ids], atol=tol, rtol=tol)
    np.testing.assert_allclose(client.lookup(hot), data[hot], atol=tol, rtol=tol)
    assert client.metrics.tier_hits >= len(hot)
    # a new snapshot replaces the old one atomically; the old mapping stays readable
    old = snap
    builder.budget_bytes = 0
    assert builder.refresh() == {}
    assert not path_of(tmp_path, "t").exists()
    assert tier.get(meta) is None
    np.testing.assert_allclose(old.split(ids)[1], data[ids[mask]], atol=tol, rtol=tol)
    # a snapshot of another shape is ignored, not misread
    builder.budget_bytes = budget
    builder.refresh()
    other = TableMeta("t", 1001, 4, dtype, block_rows)
    assert TierReader(tmp_path).get(other) is None


def test_doorkeeper_admits_blocks_seen_within_its_window():
    from embed.admission import Doorkeeper

    door = Doorkeeper(window=1000)
    first = np.arange(50)
    assert not door.observe("t", first).any()
    assert door.observe("t", first).all()  # seen before: admit
    assert not door.observe("other", first[:5]).any()  # another table's ids are other blocks
    for i in range(3):  # two windows of other ids: forgotten
        door.observe("t", np.arange(10_000 + 1000 * i, 11_000 + 1000 * i))
    assert door.observe("t", first).mean() < 0.3  # (hash collisions may remember a few)


def test_full_cache_takes_only_misses_seen_before(store, lfu_server):
    data = table(20_000, 64)
    store.write_table(TableMeta("big", 20_000, 64), [data])
    cache = connect(lfu_server.url)
    cache.config_set("maxmemory", str(int(cache.info("memory")["used_memory"]) + 2**21))
    reader = ReadThrough(cache, store)
    reader.admission.check_s = 0.0
    rng = np.random.default_rng(2)
    while not reader.admission.full:  # fill the cache
        reader.lookup("big", rng.integers(0, 20_000, 500))
    once = np.arange(19_000, 19_400)
    got = reader.lookup("big", once)
    np.testing.assert_array_equal(got, data[once])  # served either way
    assert reader.admission.refused >= 300  # first sight: not written
    reader.lookup("big", once)  # second sight: written back
    assert sum(v is not None for v in cache.mget([layout.block_key(store.meta("big"), b)
                                                   for b in once.tolist()])) >= 300


def test_tier_builder_covers_a_large_cache_over_several_bounded_refreshes(
        redis_url, store, lfu_server, tmp_path):
    from embed.tier import TierBuilder, TierReader

    data = table(2000)
    meta = TableMeta("t", 2000, 8)
    store.write_table(meta, [data])
    cache = connect(lfu_server.url)
    reader = ReadThrough(cache, store)
    hot = np.arange(0, 2000, 20)  # 100 hot rows among 2,000 cached ones
    reader.lookup("t", np.arange(2000))
    for _ in range(30):
        reader.lookup("t", hot)
    stale = tmp_path / ".t.tier.999.tmp"  # left by an agent killed while writing
    stale.write_bytes(b"half")
    builder = TierBuilder(cache, store.meta, tmp_path, 100 * meta.row_bytes, scan_keys=300,
                          batch=100)
    assert not stale.exists()
    counts = [builder.refresh().get("t", 0) for _ in range(12)]
    assert counts[0] < 100 or counts[-1] == 100  # one refresh reads at most ~300 keys
    snap = TierReader(tmp_path, check_s=0.0).get(meta)
    mask, rows = snap.split(hot)
    assert mask.all()  # after the scan went round, exactly the hot rows are held
    np.testing.assert_array_equal(rows, data[hot])


async def test_publisher_counts_readers_on_its_node():
    from types import SimpleNamespace

    from embed.publisher import node_readers

    def pod(phase, tables=None, bad=False, ids=None):
        ann = {}
        if tables:
            ann[ANN_EMBEDDING] = json.dumps({"store": "s", "tables": tables,
                                             **({"idsPerStep": ids} if ids else {})})
        if bad:
            ann[ANN_EMBEDDING] = "{oops"
        return SimpleNamespace(metadata=SimpleNamespace(annotations=ann),
                               status=SimpleNamespace(phase=phase))

    class PodsCore(RecordingCore):
        def __init__(self, pods):
            super().__init__()
            self.pods, self.selectors = pods, []

        async def list_pod_for_all_namespaces(self, field_selector=None):
            self.selectors.append(field_selector)
            return SimpleNamespace(items=self.pods)

    core = PodsCore([pod("Running", ["a", "b"], ids={"a": 4096}), pod("Pending", ["a"], ids=100),
                     pod("Succeeded", ["a"], ids=7), pod("Running"), pod("Running", bad=True)])
    clock = [1000.0]
    pub = CachePublisher("n1", lambda: Snapshot({"a": 100}, {"a": 1000}, 10, 100),
                         min_interval_s=30, clock=lambda: clock[0],
                         readers=lambda c: node_readers(c, "n1"))
    assert await pub.publish_once(core)
    assert core.selectors == ["spec.nodeName=n1"]
    content = decode_cache(core.patches[0][1]["metadata"]["annotations"][ANN_EMBEDDING_CACHE])
    assert content.readers == {"a": 2, "b": 1} and content.rows == {"a": 100, "b": 0}
    assert content.ids == {"a": 4196}  # the readers' declared ids per step; b declares none
    assert content.pods == 2  # the pod reading a and b counts once
    clock[0] += 10
    assert not await pub.publish_once(core) and len(core.selectors) == 1  # no list too soon
    core.pods = core.pods[:1]  # the pending pod went away: the readers changed
    clock[0] += 30
    assert await pub.publish_once(core)
    content = decode_cache(core.patches[-1][1]["metadata"]["annotations"][ANN_EMBEDDING_CACHE])
    assert content.readers == {"a": 1, "b": 1}
