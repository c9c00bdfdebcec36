"""Gang admission through the HTTP service: all or nothing, slots honoured by filter and bind."""

from __future__ import annotations

import json

import pytest
from aiohttp.test_utils import TestClient, TestServer
from builders import gpu_node, inventory, pod

from extender.config import Settings
from extender.http.app import make_app
from extender.interference import default_matrix
from extender.ledger.memory import MemoryLedger
from extender.ledger.redis import RedisLedger
from extender.placement import make_policy
from extender.service import Scheduler


@pytest.fixture(params=["memory", "redis"])
async def client(request):
    ledger = (MemoryLedger() if request.param == "memory"
              else RedisLedger.from_url(request.getfixturevalue("redis_url")))
    s = Scheduler(inventory=inventory(gpu_node("a", 2), gpu_node("b", 1)), ledger=ledger,
                  matrix=default_matrix(), policy=make_policy("sparse"))
    app = make_app(Settings(nodes=None, max_body_mib=2), scheduler=s)
    async with TestClient(TestServer(app)) as c:
        c.sched = s
        yield c


async def post(client, path, payload, status=200):
    resp = await client.post(f"/scheduler/{path}", data=json.dumps(payload).encode(),
                             headers={"Content-Type": "application/json"})
    assert resp.status == status, await resp.text()
    return await resp.json()


def gang(replicas, *, gpus=None, mem=None, milli=None, job="j1", attempt=0):
    worker = pod("w", gpus=gpus, mem=mem, milli=milli)
    return {"job": job, "namespace": "ml", "name": "dlrm", "replicas": replicas,
            "attempt": attempt, "pod": {"metadata": worker["metadata"], "spec": worker["spec"]},
            "ttlSeconds": 60}


async def held(client):
    return (await client.sched.ledger.snapshot())[1]


async def test_all_workers_or_none(client):
    out = await post(client, "gangs/reserve", gang(4, gpus=1))
    assert out["admitted"] is False and out["placeable"] == 3 and out["everFits"] is False
    assert "3 of 4 workers fit; worker 3 needs 1 whole GPU(s)" in out["reason"]
    assert await held(client) == {}
    out = await post(client, "gangs/reserve", gang(3, gpus=1))
    assert out["admitted"] is True
    assert sorted(s["node"] for s in out["slots"]) == ["a", "a", "b"]
    assert len({g for s in out["slots"] for g in s["gpus"]}) == 3
    assert set(await held(client)) == {f"gang/j1/0/{i}" for i in range(3)}


async def test_busy_cluster_says_what_is_missing_then_fits(client):
    await post(client, "gangs/reserve", gang(2, mem=30000, milli=600, job="big"))
    out = await post(client, "gangs/reserve", gang(2, mem=20000, milli=500, job="next"))
    assert (out["admitted"], out["placeable"], out["everFits"], out["slots"]) == (
        False, 1, True, [])
    assert "1 of 2 workers fit" in out["reason"] and "MiB" in out["reason"]
    assert not any(u.startswith("gang/next/") for u in await held(client))
    released = await post(client, "gangs/release", {"job": "big"})
    assert len(released["released"]) == 2
    assert (await post(client, "gangs/reserve", gang(2, mem=20000, milli=500, job="next"))
            )["admitted"] is True


async def test_retry_returns_the_same_slots(client):
    first = await post(client, "gangs/reserve", gang(2, gpus=1))
    again = await post(client, "gangs/reserve", gang(2, gpus=1))
    assert again["slots"] == first["slots"]
    assert len(await held(client)) == 2


async def test_worker_binds_into_its_slot(client):
    out = await post(client, "gangs/reserve", gang(3, gpus=1))
    slot = next(s for s in out["slots"] if s["node"] == "b")
    thief = pod("someone-else", gpus=1, uid="uid-x")
    thief["metadata"]["annotations"]["sparse.io/gang-slot"] = slot["slot"]
    answer = await post(client, "filter", {"Pod": thief, "NodeNames": ["a", "b"]})
    assert answer["NodeNames"] == []
    worker = pod(f"dlrm-{slot['index']}", gpus=1, uid="uid-w2")
    worker["metadata"]["annotations"]["sparse.io/gang-slot"] = slot["slot"]
    answer = await post(client, "filter", {"Pod": worker, "NodeNames": ["a", "b"]})
    assert answer["NodeNames"] == ["b"]
    assert "is on node b" in answer["FailedNodes"]["a"]
    assert await post(client, "bind", {"PodName": f"dlrm-{slot['index']}", "PodNamespace": "ml",
                                       "PodUID": "uid-w2", "Node": "b"}) == {"Error": ""}
    ledger = await held(client)
    assert slot["slot"] not in ledger
    assert ledger["uid-w2"].gpus == tuple(slot["gpus"]) and ledger["uid-w2"].state == "bound"
    # a plain pod cannot take the GPU the gang holds
    other = pod("other", gpus=1)
    answer = await post(client, "filter", {"Pod": other, "NodeNames": ["a", "b"]})
    assert answer["NodeNames"] == []


async def test_worker_without_slot_is_refused(client):
    worker = pod("dlrm-0", gpus=1, uid="uid-w0")
    worker["metadata"]["annotations"]["sparse.io/gang-slot"] = "gang/j9/0/0"
    answer = await post(client, "filter", {"Pod": worker, "NodeNames": ["a", "b"]})
    assert answer["NodeNames"] == []
    assert "not reserved" in answer["FailedAndUnresolvableNodes"]["a"]
    out = await post(client, "bind", {"PodName": "dlrm-0", "PodNamespace": "ml",
                                      "PodUID": "uid-w0", "Node": "a"})
    assert "not reserved" in out["Error"]
    assert await held(client) == {}


async def test_unbound_slots_expire(client):
    await post(client, "gangs/reserve", gang(2, gpus=1))
    client.sched.clock = lambda: 1e12
    assert len(await client.sched.expire()) == 2
    assert await held(client) == {}


@pytest.mark.parametrize("payload", [
    {"job": "j", "namespace": "ml", "name": "x", "replicas": 0, "pod": {}},
    {"job": "bad id!", "namespace": "ml", "name": "x", "replicas": 1, "pod": {}},
    {"job": "j", "namespace": "ml", "name": "x", "replicas": 1, "pod": {}},  # no GPU asked
    {"job": "j", "namespace": "ml", "name": "x", "replicas": 1, "pod": {}, "extra": 1},
])
async def test_bad_requests_are_400(client, payload):
    out = await post(client, "gangs/reserve", payload, status=400)
    assert out["error"]
