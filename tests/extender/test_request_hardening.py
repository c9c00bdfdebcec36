"""Hostile and failing requests: every one gets a protocol answer (4xx with a message, or 200
with the verb's Error), never a 5xx or a dropped connection, and never a change to the ledger
or the GPU inventory it should not make."""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib

import pytest
from aiohttp.test_utils import TestClient, TestServer
from builders import free_port, gpu_node, inventory, node_object, pod

from extender.config import Settings
from extender.errors import InvalidDemand, InvalidInventory, InvalidRequest, LedgerUnavailable
from extender.http.app import build_scheduler, make_app
from extender.http.keys import DECODER
from extender.interference import default_matrix
from extender.inventory import Gpu, annotation_value, node_from_annotations
from extender.ledger.memory import MemoryLedger
from extender.placement import make_policy
from extender.protocol import MAX_NODES_PER_REQUEST
from extender.quantity import parse_int_quantity
from extender.service import Scheduler

VERBS = ("filter", "prioritize", "bind", "preempt")


def scheduler(*nodes, ledger=None, trust=False):
    return Scheduler(inventory=inventory(*nodes), ledger=ledger or MemoryLedger(),
                     matrix=default_matrix(), policy=make_policy("sparse"),
                     trust_request_inventory=trust)


@pytest.fixture
async def client():
    s = scheduler(gpu_node("gpu-a", 4), gpu_node("gpu-b", 2, "V100M16", 16384))
    app = make_app(Settings(nodes=None, max_body_mib=2), scheduler=s)
    async with TestClient(TestServer(app)) as c:
        c.sched = s
        yield c


async def post(client, verb, payload, status=200, headers=None):
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    resp = await client.post(f"/scheduler/{verb}", data=body,
                             headers={"Content-Type": "application/json", **(headers or {})})
    assert resp.status == status, await resp.text()
    return await resp.json()


async def ledger_of(client):
    return (await client.sched.ledger.snapshot())[1]


def bind_args(p, node="gpu-a"):
    return {"PodName": p["metadata"]["name"], "PodNamespace": "ml",
            "PodUID": p["metadata"]["uid"], "Node": node}


# --- quantity overflow ------------------------------------------------------------------


@pytest.mark.parametrize("value", ["1e1000000", "9e999999", "1e-1000000", "1E400", "1e30Ei"])
def test_quantity_out_of_decimal_range_is_invalid_demand(value):
    with pytest.raises(InvalidDemand):
        parse_int_quantity(value, "nvidia.com/gpu")


async def test_quantity_overflow_answers_every_verb(client):
    p = pod("huge", gpus=1)
    p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1e1000000"
    out = await post(client, "filter", {"Pod": p, "NodeNames": ["gpu-a"]})
    assert out["FailedAndUnresolvableNodes"]["gpu-a"].startswith("invalid GPU request")
    scores = await post(client, "prioritize", {"Pod": p, "NodeNames": ["gpu-a"]})
    assert scores == [{"Host": "gpu-a", "Score": 0}]
    out = await post(client, "preempt", {"Pod": p, "NodeNameToMetaVictims": {
        "gpu-a": {"Pods": [], "NumPDBViolations": 0}}})
    assert out == {"NodeNameToMetaVictims": {}}
    assert await ledger_of(client) == {}


# --- deep nesting -----------------------------------------------------------------------


@pytest.mark.parametrize("where", ["unknown", "victims"])
async def test_deep_nesting_is_400_on_every_verb(client, where):
    deep = "[" * 3000 + "]" * 3000
    if where == "unknown":
        body = ('{"Pod": {"metadata": {"name": "p", "uid": "u"}, "x": DEEP}, "NodeNames": [],'
                ' "PodName": "p", "PodUID": "u", "Node": "gpu-a", "y": DEEP}')
    else:
        body = ('{"Pod": {"metadata": {"name": "p", "uid": "u"}}, "NodeNames": [],'
                ' "NodeNameToVictims": {"gpu-a": {"Pods": [{"x": DEEP}]}}}')
    body = body.replace("DEEP", deep)
    for verb in VERBS:
        if where == "victims" and verb != "preempt":
            continue
        out = await post(client, verb, body.encode(), status=400)
        assert "nested too deeply" in out["error"]
    assert await ledger_of(client) == {}


# --- NaN / Infinity in an inventory annotation ------------------------------------------


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_in_inventory_annotation_are_invalid(number):
    raw = '[{"uuid":"G1","index":0,"model":"X","memory_mib":NUMBER}]'.replace("NUMBER", number)
    with pytest.raises(InvalidInventory):
        node_from_annotations("n1", {"sparse.io/gpu-inventory": raw})


@pytest.mark.parametrize("trust", [False, True])
async def test_nan_inventory_in_request_nodes_is_ignored_not_500(trust):
    s = scheduler(gpu_node("n0", 1), trust=trust)
    async with TestClient(TestServer(make_app(Settings(), scheduler=s))) as c:
        raw = '[{"uuid":"G1","index":0,"model":"X","memory_mib":NaN}]'
        node = {"metadata": {"name": "n1", "annotations": {"sparse.io/gpu-inventory": raw}}}
        out = await post(c, "filter", {"Pod": pod(mem=100, milli=10),
                                       "Nodes": {"items": [node]}})
        assert out["Nodes"]["items"] == []
        assert "n1" in out["FailedAndUnresolvableNodes"]
        assert set(s.inventory.nodes) == {"n0"}


# --- Content-Encoding -------------------------------------------------------------------


async def raw_exchange(port: int, requests: list[bytes]) -> list[tuple[int, bytes]]:
    """Send HTTP/1.1 requests one after the other on ONE connection; the answers, or an
    exception when the server dropped the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answers = []
    try:
        for request in requests:
            writer.write(request)
            await writer.drain()
            status_line = await reader.readline()
            if not status_line:
                raise ConnectionError("connection dropped without an answer")
            headers = {}
            while (line := await reader.readline()) not in (b"\r\n", b""):
                k, _, v = line.decode().partition(":")
                headers[k.strip().lower()] = v.strip()
            body = await reader.readexactly(int(headers.get("content-length", 0)))
            answers.append((int(status_line.split()[1]), body))
    finally:
        writer.close()
    return answers


def http_post(path: str, body: bytes, encoding: str | None = None) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: x", "Content-Type: application/json",
            f"Content-Length: {len(body)}"]
    if encoding:
        head.append(f"Content-Encoding: {encoding}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def test_bad_gzip_is_400_and_keeps_the_connection(client):
    port = client.server.port
    good = json.dumps({"PodName": "x", "PodNamespace": "ml", "PodUID": "u",
                       "Node": "gpu-a"}).encode()
    answers = await raw_exchange(port, [
        http_post("/scheduler/bind", b"{}", "gzip"),
        http_post("/scheduler/bind", gzip.compress(good)[:-5], "gzip"),  # truncated
        http_post("/scheduler/bind", good, "br"),
        http_post("/scheduler/bind", gzip.compress(good), "gzip"),
        http_post("/scheduler/bind", zlib.compress(good), "deflate"),
    ])
    assert [status for status, _ in answers] == [400, 400, 415, 200, 200]
    assert b"gzip" in answers[0][1]
    assert json.loads(answers[3][1])["Error"].startswith("no GPU demand known")
    assert await ledger_of(client) == {}


async def test_gzip_bomb_stops_at_the_decompressed_limit(client):
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = b"\0" * (1 << 20)
    bomb = b"".join(compressor.compress(zeros) for _ in range(32)) + compressor.flush()
    assert len(bomb) < 50_000  # 32 MiB once inflated; the limit is 2 MiB
    out = await post(client, "filter", bomb, status=413, headers={"Content-Encoding": "gzip"})
    assert "decompressed" in out["error"]
    assert (await client.get("/healthz")).status == 200


async def test_slow_body_is_408_and_frees_its_slot(client, monkeypatch):
    monkeypatch.setattr("extender.http.body.READ_TIMEOUT_S", 0.2)
    reader, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
    writer.write(http_post("/scheduler/filter", b"{}")[:-1].replace(
        b"Content-Length: 2", b"Content-Length: 200"))
    await writer.drain()
    status_line = await reader.readline()  # answered although the body never completes
    writer.close()
    assert status_line.split()[1] == b"408"
    out = await post(client, "filter", {"Pod": pod(mem=1, milli=1), "NodeNames": ["gpu-a"]})
    assert out["NodeNames"] == ["gpu-a"]


# --- big requests: bounded, and decoded off the event loop -------------------------------


def test_default_body_limit_follows_the_mode():
    assert Settings().body_limit_mib == 8
    assert Settings(node_cache_capable=False).body_limit_mib == 128
    assert Settings(max_body_mib=3).body_limit_mib == 3


async def test_body_over_the_names_mode_limit_is_413():
    app = make_app(Settings(), scheduler=scheduler(gpu_node("a", 1)))
    async with TestClient(TestServer(app)) as c:
        names = ["a"] * (9 * 1024 * 1024 // 4)
        await post(c, "filter", {"Pod": pod(mem=1, milli=1), "NodeNames": names}, status=413)


async def test_too_many_names_is_400_and_repeated_names_are_answered_once(client):
    p = pod(mem=100, milli=10)
    out = await post(client, "filter", {"Pod": p, "NodeNames": ["n"] * 10})
    assert out["FailedAndUnresolvableNodes"] == {
        "n": "node has no GPU inventory known to sparse"}
    out = await post(client, "filter",
                     {"Pod": p, "NodeNames": ["gpu-a", "gpu-b", "gpu-a"] * 1000})
    assert out["NodeNames"] == ["gpu-a", "gpu-b"]
    names = [f"n{i}" for i in range(MAX_NODES_PER_REQUEST + 1)]
    out = await post(client, "prioritize", {"Pod": p, "NodeNames": names}, status=400)
    assert "at most" in out["error"]


@pytest.mark.parametrize("field", ["name", "uid", "namespace", "container", "annotations"])
async def test_oversized_pod_fields_are_400(client, field):
    p = pod("p", mem=100, milli=10)
    if field == "container":
        p["spec"]["containers"][0]["name"] = "c" * 300
    elif field == "annotations":
        p["metadata"]["annotations"] = {f"k{i}": "v" * 1024 for i in range(300)}
    else:
        p["metadata"][field] = "x" * 300
    for verb in ("filter", "prioritize"):
        out = await post(client, verb, {"Pod": p, "NodeNames": ["gpu-a"]}, status=400)
        assert any(w in out["error"] for w in ("Kubernetes allows", "exceed", "longer than"))
    out = await post(client, "bind", {"PodName": "p", "PodNamespace": "ml", "PodUID": "u" * 200,
                                      "Node": "gpu-a"}, status=400)
    assert "longer than" in out["error"]


async def test_big_bodies_are_decoded_in_the_worker_process():
    nodes = [gpu_node(f"n{i}", 2) for i in range(40)]
    s = scheduler(*nodes)
    app = make_app(Settings(node_cache_capable=False), scheduler=s)
    async with TestClient(TestServer(app)) as c:
        decoder = app[DECODER]
        decoder.inline_bytes = 10_000  # every body below is "big"
        items = [node_object(n) for n in nodes]
        payload = {"Pod": pod("w", mem=1000, milli=100), "Nodes": {"items": items}}
        out = await post(c, "filter", payload)
        assert decoder._proc is not None and decoder._proc.returncode is None
        assert out["Nodes"]["items"] == items  # echoed byte for byte from this process
        # prioritize with the very body filter had: filter's decoding, no second trip
        exchanged = decoder.reused
        scores = await post(c, "prioritize", payload)
        assert decoder.reused == exchanged + 1 and len(scores) == len(nodes)
        out = await post(c, "filter", b'{"Pod": {"metadata": {}}, "NodeNames": []}' + b" " * 20000,
                         status=400)
        assert "Pod.metadata.name" in out["error"]
        p = pod("w2", mem=1000, milli=100)
        await post(c, "filter", {"Pod": p, "NodeNames": ["n1"]})
        big_bind = json.dumps(bind_args(p, "n1")).encode() + b" " * 20000
        assert await post(c, "bind", big_bind) == {"Error": ""}
        assert (await c.get("/healthz")).status == 200
    assert decoder._proc is None  # stopped with the app


async def test_prioritize_reuses_filters_decoding_only_for_the_same_body():
    from extender.http.offload import BodyDecoder

    decoder = BodyDecoder()
    body = json.dumps({"Pod": pod("r", mem=1000, milli=100), "NodeNames": ["n1", "n2"]})
    filtered = await decoder.decode("filter", bytearray(body.encode()))
    assert await decoder.decode("prioritize", body.encode()) is filtered
    other = json.dumps({"Pod": pod("r", mem=1000, milli=100), "NodeNames": ["n2"]})
    fresh = await decoder.decode("prioritize", other.encode())
    assert fresh is not filtered and fresh.node_names == ["n2"]
    assert decoder.reused == 1
    with pytest.raises(InvalidRequest):  # a malformed body is never answered from the cache
        await decoder.decode("prioritize", body.encode()[:-1])


def test_node_spans_are_exact_whatever_the_separators():
    from extender.http.decode_worker import _spans
    from extender.protocol import decode_verb

    items = [json.dumps(node_object(gpu_node(f"n{i}", 2))) for i in range(5)]
    pod_json = json.dumps(pod("s", mem=1000, milli=100))
    for sep in (",", " , ", ",\n\t", "\r\n,\r\n"):
        body = f'{{"Pod": {pod_json}, "Nodes": {{"items": [ {sep.join(items)} ]}}}}'.encode()
        spans = _spans(body, decode_verb("filter", body))
        assert [body[a:b].decode() for a, b in spans] == items


# --- trust model: a request never rewrites the inventory unless the operator opts in -----


def forged_node(name: str) -> dict:
    fake = gpu_node(name, gpus=[Gpu("GPU-forged", 0, "H100", 16 * 1024 * 1024)])
    return node_object(fake)


async def test_forged_inventory_in_a_request_is_ignored():
    s = scheduler(gpu_node("n1", 8))
    async with TestClient(TestServer(make_app(Settings(), scheduler=s))) as c:
        small = pod("small", mem=1000, milli=100)
        await post(c, "filter", {"Pod": small, "NodeNames": ["n1"]})
        assert await post(c, "bind", bind_args(small, "n1")) == {"Error": ""}
        before = s.inventory
        huge = pod("huge", mem=1024 * 1024, milli=100)  # 1 TiB
        out = await post(c, "filter", {"Pod": huge, "Nodes": {"items": [forged_node("n1")]}})
        assert out["Nodes"]["items"] == []
        assert s.inventory is before and s.inventory.gpu_count() == 8
        out = await post(c, "bind", bind_args(huge, "n1"))
        assert "no longer fits" in out["Error"]
        (booked,) = (await s.ledger.snapshot())[1].values()
        assert booked.name == "small" and booked.gpus[0].startswith("GPU-n1-")


async def test_request_inventory_is_used_when_the_operator_opts_in():
    s = scheduler(trust=True)
    app = make_app(Settings(trust_request_inventory=True), scheduler=s)
    async with TestClient(TestServer(app)) as c:
        node = node_object(gpu_node("n1", 2))
        out = await post(c, "filter", {"Pod": pod(mem=100, milli=10), "Nodes": {"items": [node]}})
        assert [n["metadata"]["name"] for n in out["Nodes"]["items"]] == ["n1"]
        assert s.inventory.gpu_count() == 2


def test_trust_flag_reaches_the_scheduler(repo_root):
    conf = repo_root / "examples" / "node-conf.yaml"
    assert not build_scheduler(Settings(nodes=conf)).trust_request_inventory
    assert build_scheduler(Settings(nodes=conf, trust_request_inventory=True)
                           ).trust_request_inventory


# --- store errors and overload: 200 with the verb's Error, never 500 ---------------------


class FailingLedger(MemoryLedger):
    """A ledger whose chosen operations fail like an unreachable Redis; ``after_write`` makes
    reserve and confirm fail after their write landed (the answer lost on the way back)."""

    def __init__(self) -> None:
        super().__init__()
        self.failing: set[str] = set()
        self.after_write = False

    def _maybe_fail(self, op: str) -> None:
        if op in self.failing:  # what the Redis adapter raises
            raise LedgerUnavailable("GPU ledger unavailable: ConnectionError: Error 111"
                                    f" connecting to 127.0.0.1:6379 ({op})")

    async def version(self):
        self._maybe_fail("version")
        return await super().version()

    async def changes(self, since):  # how a view follows the ledger: the same read fails
        self._maybe_fail("version")
        return await super().changes(since)

    async def reserve_change(self, reservation, capacities):
        if self.after_write and "reserve" in self.failing:
            await super().reserve_change(reservation, capacities)
        self._maybe_fail("reserve")
        return await super().reserve_change(reservation, capacities)

    async def confirm_change(self, pod_uid, booked=None):
        if self.after_write and "confirm" in self.failing:
            await super().confirm_change(pod_uid, booked)
        self._maybe_fail("confirm")
        return await super().confirm_change(pod_uid, booked)

    async def get(self, pod_uid):
        self._maybe_fail("get")
        return await super().get(pod_uid)

    async def release_change(self, pod_uid, only_if=None):
        self._maybe_fail("release")
        return await super().release_change(pod_uid, only_if)


@pytest.fixture
async def flaky():
    ledger = FailingLedger()
    s = scheduler(gpu_node("gpu-a", 4), ledger=ledger)
    async with TestClient(TestServer(make_app(Settings(), scheduler=s))) as c:
        c.sched, c.ledger = s, ledger
        yield c


async def test_store_down_answers_200_with_error_on_every_verb(flaky):
    p = pod("p", mem=1000, milli=100)
    flaky.ledger.failing = {"version", "get", "reserve", "confirm", "release"}
    out = await post(flaky, "filter", {"Pod": p, "NodeNames": ["gpu-a"]})
    assert "ConnectionError" in out["Error"] and out["NodeNames"] is None
    assert await post(flaky, "prioritize", {"Pod": p, "NodeNames": ["gpu-a"]}) == []
    out = await post(flaky, "bind", bind_args(p))
    assert out["Error"]
    out = await post(flaky, "preempt", {"Pod": p, "NodeNameToMetaVictims": {
        "gpu-a": {"Pods": [], "NumPDBViolations": 0}}})
    assert out == {"NodeNameToMetaVictims": {}}
    flaky.ledger.failing = set()  # the store is back: the same replica heals
    out = await post(flaky, "filter", {"Pod": p, "NodeNames": ["gpu-a"]})
    assert out["NodeNames"] == ["gpu-a"] and out["Error"] == ""
    assert await post(flaky, "bind", bind_args(p)) == {"Error": ""}
    metrics = await (await flaky.get("/metrics")).text()
    assert "sparse_ledger_outages_total 1.0" in metrics
    assert 'code="500"' not in metrics


@pytest.mark.parametrize("failing", [{"reserve"}, {"confirm"}, {"confirm", "release"}])
async def test_bind_that_answers_an_error_leaves_no_booking(flaky, failing):
    p = pod("p", mem=1000, milli=100)
    await post(flaky, "filter", {"Pod": p, "NodeNames": ["gpu-a"]})
    flaky.ledger.failing = set(failing)
    flaky.ledger.after_write = True  # the write lands, its answer is lost
    out = await post(flaky, "bind", bind_args(p))
    assert "ledger unavailable" in out["Error"]
    flaky.ledger.failing = set()
    await flaky.sched.expire()  # the upkeep round drops what the failed bind booked
    assert (await flaky.sched.ledger.snapshot())[1] == {}
    assert await post(flaky, "bind", bind_args(p)) == {"Error": ""}  # the retry books once
    assert len((await flaky.sched.ledger.snapshot())[1]) == 1


async def test_repeated_bind_of_a_bound_pod_never_frees_its_gpus(flaky):
    p = pod("p", mem=1000, milli=100)
    await post(flaky, "filter", {"Pod": p, "NodeNames": ["gpu-a"]})
    assert await post(flaky, "bind", bind_args(p)) == {"Error": ""}
    flaky.ledger.failing = {"confirm"}
    out = await post(flaky, "bind", bind_args(p))
    assert out == {"Error": ""}  # bound already: the truth, nothing is touched
    flaky.ledger.failing = set()
    (r,) = (await flaky.sched.ledger.snapshot())[1].values()
    assert r.state == "bound"


@pytest.mark.redis
async def test_stopped_redis_answers_200_with_error(redis_server):
    from extender.ledger.redis import RedisLedger

    server = type(redis_server)()  # a redis-server of its own: this test stops it
    s = scheduler(gpu_node("gpu-a", 2), ledger=RedisLedger.from_url(server.url))
    async with TestClient(TestServer(make_app(Settings(), scheduler=s))) as c:
        server.stop()
        p = pod("p", mem=1000, milli=100)
        for verb, payload in (("filter", {"Pod": p, "NodeNames": ["gpu-a"]}),
                              ("prioritize", {"Pod": p, "NodeNames": ["gpu-a"]}),
                              ("bind", bind_args(p)),
                              ("preempt", {"Pod": p, "NodeNameToMetaVictims": {}})):
            resp = await c.post(f"/scheduler/{verb}", data=json.dumps(payload))
            assert resp.status == 200, (verb, await resp.text())


async def test_frozen_demand_store_is_cut_short_for_read_only_verbs(monkeypatch):
    class FrozenPredictions:
        async def get(self, pod_uid):
            await asyncio.Event().wait()  # never answers, like a SIGSTOPped redis-server

        async def close(self):
            return None

    monkeypatch.setattr("extender.http.handlers.READ_ONLY_DEADLINE_S", 0.05)
    s = scheduler(gpu_node("gpu-a", 2))
    s.demand_source = FrozenPredictions()
    async with TestClient(TestServer(make_app(Settings(), scheduler=s))) as c:
        p = pod("p", mem=100, milli=10)
        p["metadata"]["annotations"]["sparse.io/model"] = "{}"  # a pod whose demand is read
        out = await post(c, "filter", {"Pod": p, "NodeNames": ["gpu-a"]})
        assert "TimeoutError" in out["Error"]
        assert await post(c, "prioritize", {"Pod": p, "NodeNames": ["gpu-a"]}) == []
        out = await post(c, "preempt", {"Pod": p, "NodeNameToMetaVictims": {}})
        assert out == {"NodeNameToMetaVictims": {}}


async def test_overloaded_replica_answers_error_after_waiting():
    s = scheduler(gpu_node("gpu-a", 2))
    gate = asyncio.Event()
    entered = asyncio.Event()
    original = s.filter

    async def slow_filter(args):
        entered.set()
        await gate.wait()
        return await original(args)

    s.filter = slow_filter  # type: ignore[method-assign]
    app = make_app(Settings(max_in_flight=1, queue_timeout_s=0.05), scheduler=s)
    async with TestClient(TestServer(app)) as c:
        p = pod("p", mem=100, milli=10)
        first = asyncio.create_task(post(c, "filter", {"Pod": p, "NodeNames": ["gpu-a"]}))
        await entered.wait()
        out = await post(c, "filter", {"Pod": p, "NodeNames": ["gpu-a"]})
        assert "overloaded" in out["Error"]
        out = await post(c, "bind", bind_args(p))
        assert "overloaded" in out["Error"]
        assert await post(c, "prioritize", {"Pod": p, "NodeNames": ["gpu-a"]}) == []
        assert (await c.get("/healthz")).status == 200  # probes are never queued
        gate.set()
        assert (await first)["NodeNames"] == ["gpu-a"]
        assert (await s.ledger.snapshot())[1] == {}


async def test_body_memory_budget_turns_requests_away_and_never_leaks(client):
    from extender.http.keys import ADMISSION

    bodies = client.server.app[ADMISSION].bodies
    p = pod("p", mem=100, milli=10)
    for payload, headers, status in (
            ({"Pod": p, "NodeNames": ["gpu-a"]}, None, 200),
            (b"{bad", None, 400),
            (b" " * (3 * 1024 * 1024), None, 413),
            (gzip.compress(b" " * (3 * 1024 * 1024)), {"Content-Encoding": "gzip"}, 413)):
        await post(client, "filter", payload, status=status, headers=headers)
    assert bodies.used == 0  # every request gave its bytes back
    bodies.used = bodies.total - 10  # as if other requests held nearly all of it
    out = await post(client, "filter", {"Pod": p, "NodeNames": ["gpu-a"]})
    assert "overloaded" in out["Error"]
    out = await post(client, "bind", bind_args(p))
    assert "overloaded" in out["Error"]
    bodies.used = 0
    out = await post(client, "filter", {"Pod": p, "NodeNames": ["gpu-a"]})
    assert out["NodeNames"] == ["gpu-a"] and bodies.used == 0
    assert (await client.sched.ledger.snapshot())[1] == {}


# --- metrics port and /inspect ----------------------------------------------------------


async def test_metrics_port_moves_metrics_and_inspect_off_the_scheduling_port():
    port = free_port()
    app = make_app(Settings(metrics_port=port), scheduler=scheduler(gpu_node("a", 1)))
    async with TestClient(TestServer(app)) as c:
        assert (await c.get("/metrics")).status == 404
        assert (await c.get("/scheduler/inspect")).status == 404
        assert (await c.get("/healthz")).status == 200
        assert (await c.get("/readyz")).status == 200
        out = await post(c, "filter", {"Pod": pod(mem=1, milli=1), "NodeNames": ["a"]})
        assert out["NodeNames"] == ["a"]
        async with c.session.get(f"http://127.0.0.1:{port}/metrics") as resp:
            assert resp.status == 200
            assert 'verb="filter"' in await resp.text()
        async with c.session.get(f"http://127.0.0.1:{port}/scheduler/inspect") as resp:
            assert resp.status == 200 and (await resp.json())["nodes"][0]["name"] == "a"
        async with c.session.post(f"http://127.0.0.1:{port}/scheduler/filter", data=b"{}") as r:
            assert r.status == 404


async def test_inspect_can_be_turned_off():
    app = make_app(Settings(inspect=False), scheduler=scheduler(gpu_node("a", 1)))
    async with TestClient(TestServer(app)) as c:
        assert (await c.get("/scheduler/inspect")).status == 404
        assert (await c.get("/metrics")).status == 200


# --- short reasons ----------------------------------------------------------------------


def fit_error_message(total: int, failed: dict[str, str], unresolvable: dict[str, str]) -> str:
    """kube-scheduler's FitError message: each distinct reason once, with its node count."""
    counts: dict[str, int] = {}
    for reason in {**failed, **unresolvable}.values():
        counts[reason] = counts.get(reason, 0) + 1
    reasons = sorted(f"{n} {r}" for r, n in counts.items())
    return f"0/{total} nodes are available: {', '.join(reasons)}."


async def test_pending_share_message_is_short_and_names_the_closest_node():
    nodes = [gpu_node(f"node-{i}", 4, "V100M32", 32768) for i in range(24)]
    s = scheduler(*nodes)
    async with TestClient(TestServer(make_app(Settings(), scheduler=s))) as c:
        names = [n.name for n in nodes]
        # Fill every GPU, leaving node-7 the most memory free.
        for i, n in enumerate(nodes):
            for g in range(4):
                used = 32768 - (6144 if n.name == "node-7" and g == 0 else 1024 + 100 * i)
                p = pod(f"fill-{i}-{g}", mem=used, milli=100)
                await post(c, "filter", {"Pod": p, "NodeNames": [n.name]})
                assert await post(c, "bind", bind_args(p, n.name)) == {"Error": ""}
        messages = []
        for k in range(130):
            p = pod(f"pending-{k}", mem=8192, milli=100)
            out = await post(c, "filter", {"Pod": p, "NodeNames": names + ["cpu-0"]})
            assert out["NodeNames"] == []
            assert set(out["FailedNodes"]) | set(out["FailedAndUnresolvableNodes"]) == {
                *names, "cpu-0"}
            messages.append(fit_error_message(25, out["FailedNodes"],
                                              out["FailedAndUnresolvableNodes"]))
        assert len(set(messages)) == 1
        message = messages[0]
        assert len(message) < 1024, message
        assert ("GPU memory: needs 8192 MiB, at most 6144 MiB free on a GPU"
                " (24 nodes; closest: node-7)") in message
        # Compute-bound and whole-GPU misfits are grouped the same way.
        out = await post(c, "filter", {"Pod": pod("whole", gpus=2), "NodeNames": names})
        assert len(set(out["FailedNodes"].values())) == 1
        assert next(iter(out["FailedNodes"].values())).startswith(
            "free GPUs: needs 2 free whole GPU(s), at most 0 free on a node (24 nodes;")


def test_inventory_annotation_value_round_trip_still_valid():
    gpus = gpu_node("x", 2).gpus
    node = node_from_annotations("x", {"sparse.io/gpu-inventory": annotation_value(gpus)})
    assert node is not None and node.gpus == gpus


def test_new_serve_options_are_validated(repo_root):
    from click.testing import CliRunner

    from extender.cli import main

    conf = str(repo_root / "examples" / "node-conf.yaml")
    runner = CliRunner()
    result = runner.invoke(main, ["serve", "--nodes", conf, "--metrics-port", "8888"])
    assert result.exit_code == 2 and "--metrics-port" in result.output
    result = runner.invoke(main, ["serve", "--nodes", conf, "--queue-timeout", "9"])
    assert result.exit_code == 2 and "httpTimeout" in result.output
    result = runner.invoke(main, ["serve", "--nodes", conf, "--max-in-flight", "0"])
    assert result.exit_code == 2 and "--max-in-flight" in result.output
    help_text = runner.invoke(main, ["serve", "--help"]).output
    for option in ("--trust-request-inventory", "--metrics-port", "--no-inspect",
                   "--no-node-cache-capable", "--max-in-flight", "--queue-timeout"):
        assert option in help_text
