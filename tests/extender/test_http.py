"""The HTTP service end to end in-process: golden payloads, errors, ledger effects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from builders import bind_request, gpu_node, inventory, node_object, pod

from extender.config import Settings
from extender.http.app import make_app
from extender.interference import default_matrix
from extender.ledger.memory import MemoryLedger
from extender.placement import make_policy
from extender.service import Scheduler

WIRE = Path(__file__).parent / "fixtures" / "wire"


def scheduler(*nodes):
    return Scheduler(inventory=inventory(*nodes), ledger=MemoryLedger(),
                     matrix=default_matrix(), policy=make_policy("sparse"))


@pytest.fixture
async def client():
    s = scheduler(gpu_node("gpu-a", 4), gpu_node("gpu-b", 2, "V100M16", 16384))
    app = make_app(Settings(nodes=None, max_body_mib=2), scheduler=s)
    async with TestClient(TestServer(app)) as c:
        c.sched = s
        yield c


async def post(client, verb, payload, status=200):
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    resp = await client.post(f"/scheduler/{verb}", data=body,
                             headers={"Content-Type": "application/json"})
    assert resp.status == status, await resp.text()
    return await resp.json()


async def ledger_of(client):
    return (await client.sched.ledger.snapshot())[1]


async def test_golden_filter_prioritize_bind(client):
    out = await post(client, "filter", (WIRE / "filter_nodenames.json").read_bytes())
    assert out["NodeNames"] == ["gpu-a", "gpu-b"]
    assert out["FailedAndUnresolvableNodes"] == {
        "cpu-1": "node has no GPU inventory known to sparse"}
    assert out["Error"] == ""
    scores = await post(client, "prioritize", (WIRE / "filter_nodenames.json").read_bytes())
    assert [s["Host"] for s in scores] == ["gpu-a", "gpu-b", "cpu-1"]
    assert all(isinstance(s["Score"], int) and 0 <= s["Score"] <= 10 for s in scores)
    assert scores[2]["Score"] == 0
    out = await post(client, "bind", json.loads((WIRE / "bind.json").read_text()))
    assert out == {"Error": ""}
    (r,) = (await ledger_of(client)).values()
    assert r.node == "gpu-a" and r.state == "bound"
    assert [(a.mem_mib, a.milli) for a in r.allocations] == [(8192, 300)]
    again = await post(client, "bind", json.loads((WIRE / "bind.json").read_text()))
    assert again == {"Error": ""} and len(await ledger_of(client)) == 1


async def test_lowercase_filter(client):
    out = await post(client, "filter", (WIRE / "filter_lowercase.json").read_bytes())
    assert out["NodeNames"] == ["gpu-a", "gpu-b"]


async def test_full_nodes_teach_inventory_and_are_echoed():
    s = scheduler()  # no inventory file: learns from Node annotations (operator opted in)
    s.trust_request_inventory = True
    app = make_app(Settings(nodes=None), scheduler=s)
    async with TestClient(TestServer(app)) as c:
        payload = json.loads((WIRE / "filter_nodes.json").read_text())
        out = await post(c, "filter", payload)
        assert [n["metadata"]["name"] for n in out["Nodes"]["items"]] == ["gpu-a", "gpu-b"]
        assert out["Nodes"]["items"][0] == payload["Nodes"]["items"][0]
        assert out["NodeNames"] is None
        assert s.inventory.gpu_count() == 6


async def test_bind_rechecks_and_answers_error(client):
    big = pod("big", mem=16000, milli=900)
    await post(client, "filter", {"Pod": big, "NodeNames": ["gpu-b"]})
    other = pod("other", mem=16000, milli=900)
    await post(client, "filter", {"Pod": other, "NodeNames": ["gpu-b"]})
    assert await post(client, "bind", bind_request(big, "gpu-b")) == {"Error": ""}
    assert await post(client, "bind", bind_request(other, "gpu-b")) == {"Error": ""}
    third = pod("third", mem=16000, milli=900)
    await post(client, "filter", {"Pod": third, "NodeNames": ["gpu-b"]})
    out = await post(client, "bind", bind_request(third, "gpu-b"))
    assert "no longer fits" in out["Error"]
    assert len(await ledger_of(client)) == 2


async def test_bind_without_filter_is_an_error(client):
    out = await post(client, "bind", {"PodName": "x", "PodNamespace": "ml", "PodUID": "u",
                                      "Node": "gpu-a"})
    assert "no GPU demand known" in out["Error"]


async def test_unplaceable_and_invalid_pods(client):
    out = await post(client, "filter", {"Pod": pod(mem=100, milli=10, models="H100"),
                                        "NodeNames": ["gpu-a", "gpu-b"]})
    assert out["NodeNames"] == []
    assert out["FailedAndUnresolvableNodes"]["gpu-a"] == "GPU model: no GPU of model H100 (2 nodes)"
    out = await post(client, "filter", {"Pod": pod(mem=100, milli=5000), "NodeNames": ["gpu-a"]})
    assert out["FailedAndUnresolvableNodes"]["gpu-a"].startswith("invalid GPU request")


async def test_pod_without_gpu_passes_through(client):
    p = pod()
    out = await post(client, "filter", {"Pod": p, "NodeNames": ["gpu-a", "cpu-1"]})
    assert out["NodeNames"] == ["gpu-a", "cpu-1"]


@pytest.mark.parametrize("body", [b"not json", b"{}", b'{"Pod": {"metadata": {}}}',
                                  b'{"Pod": []}', b"[" * 5000])
async def test_malformed_requests_get_400_and_leave_ledger(client, body):
    for verb in ("filter", "prioritize", "bind", "preempt"):
        out = await post(client, verb, body, status=400)
        assert out["error"]
    assert await ledger_of(client) == {}


async def test_oversized_body_is_413(client):
    await post(client, "filter", b" " * (3 * 1024 * 1024), status=413)


async def test_preempt_keeps_nodes_where_victims_free_enough(client):
    victim = pod("victim", mem=16000, milli=500)
    await post(client, "filter", {"Pod": victim, "NodeNames": ["gpu-b"]})
    uid = victim["metadata"]["uid"]
    for other in ("o1",):
        o = pod(other, mem=16000, milli=500)
        await post(client, "filter", {"Pod": o, "NodeNames": ["gpu-b"]})
        await post(client, "bind", bind_request(o, "gpu-b"))
    await post(client, "bind", bind_request(victim, "gpu-b"))
    preemptor = pod("pre", mem=16000, milli=500)
    out = await post(client, "preempt", {"Pod": preemptor, "NodeNameToMetaVictims": {
        "gpu-b": {"Pods": [{"UID": uid}], "NumPDBViolations": 0},
        "gpu-a": {"Pods": [], "NumPDBViolations": 0}}})
    assert out["NodeNameToMetaVictims"]["gpu-b"]["Pods"] == [{"UID": uid}]
    assert "gpu-a" in out["NodeNameToMetaVictims"]  # fits there without victims
    out = await post(client, "preempt", {"Pod": preemptor, "NodeNameToMetaVictims": {
        "gpu-b": {"Pods": [], "NumPDBViolations": 0}}})
    assert out["NodeNameToMetaVictims"] == {}
    assert len(await ledger_of(client)) == 2  # preempt is a what-if only


async def test_health_ready_metrics_inspect(client):
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/readyz")).status == 200
    p = pod("m", mem=1024, milli=100, job_class="cnn")
    await post(client, "filter", {"Pod": p, "NodeNames": ["gpu-a"]})
    await post(client, "bind", bind_request(p, "gpu-a"))
    text = await (await client.get("/metrics")).text()
    assert 'sparse_extender_requests_total{code="200",verb="filter"} 1.0' in text
    assert "sparse_extender_request_duration_seconds_bucket" in text
    assert 'sparse_gpu_memory_reserved_bytes{gpu="GPU-gpu-a-0"' in text
    assert 'sparse_ledger_reservations{state="bound"} 1.0' in text
    view = await (await client.get("/scheduler/inspect/gpu-a")).json()
    pods = [p for g in view["nodes"][0]["gpus"] for p in g["pods"]]
    assert pods[0]["pod"] == "ml/m" and pods[0]["memory_mib"] == 1024
    assert (await client.get("/scheduler/inspect/nope")).status == 404


async def test_custom_prefix():
    app = make_app(Settings(prefix="/gpu/v1/"), scheduler=scheduler(gpu_node("a", 1)))
    async with TestClient(TestServer(app)) as c:
        resp = await c.post("/gpu/v1/filter", data=json.dumps(
            {"Pod": pod(mem=10, milli=1), "NodeNames": ["a"]}))
        assert resp.status == 200 and (await resp.json())["NodeNames"] == ["a"]


def test_full_node_payload_of_5000_nodes_fits_the_default_body_limit():
    size = len(json.dumps(node_object(gpu_node("n-00000", 8))))
    assert size * 5000 < Settings(node_cache_capable=False).body_limit_mib * 1024 * 1024


def test_node_updates_rebuild_once_and_relist_restores_annotated_nodes():
    from extender.inventory import annotation_value

    s = scheduler(gpu_node("file-node", 1))
    base = s.inventory
    metas = [(f"n{i}", {"sparse.io/gpu-inventory": annotation_value(gpu_node(f"n{i}", 2).gpus)},
              None) for i in range(50)]
    assert s.update_nodes(metas) == 50
    assert s.inventory.gpu_count() == 101
    assert s.update_nodes(metas) == 0  # unchanged annotations: nothing to do
    # A re-list starts from the file inventory and must bring every annotated node back.
    assert s.update_nodes(metas, base=base) == 50
    assert s.inventory.gpu_count() == 101
    # A node claiming another node's GPU is ignored, the rest still applies.
    thief = ("thief", {"sparse.io/gpu-inventory": annotation_value(gpu_node("n0", 1).gpus)},
             None)
    s.update_nodes([thief])
    assert "thief" not in s.inventory.nodes and s.inventory.gpu_count() == 101
