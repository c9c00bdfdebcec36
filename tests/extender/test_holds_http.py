"""The hold for a waiting gang through the extender's filter and bind (verbs/holdfilter.py)."""

from __future__ import annotations

import json

import pytest
from aiohttp.test_utils import TestClient, TestServer
from builders import gpu_node, inventory, pod

from extender.annotations import ANN_PREDICTED_SECONDS
from extender.config import Settings
from extender.http.app import make_app
from extender.interference import default_matrix
from extender.ledger.memory import MemoryLedger
from extender.placement import make_policy
from extender.service import Scheduler
from extender.verbs.holdfilter import HOLD_TTL_S

NOW = [1000.0]


@pytest.fixture
async def client():
    s = Scheduler(inventory=inventory(gpu_node("a", 4), gpu_node("b", 4)), ledger=MemoryLedger(),
                  matrix=default_matrix(), policy=make_policy("sparse"),
                  clock=lambda: NOW[0])
    app = make_app(Settings(nodes=None, max_body_mib=2), scheduler=s)
    async with TestClient(TestServer(app)) as c:
        c.sched = s
        yield c


async def post(client, verb, payload):
    resp = await client.post(f"/scheduler/{verb}", data=json.dumps(payload).encode(),
                             headers={"Content-Type": "application/json"})
    assert resp.status == 200, await resp.text()
    return await resp.json()


def gpu_pod(name: str, gpus: int, seconds: float | None) -> dict:
    p = pod(name, gpus=gpus)
    if seconds is not None:
        p["metadata"]["annotations"][ANN_PREDICTED_SECONDS] = str(seconds)
    return p


async def run(client, name: str, gpus: int, seconds: float | None, node: str) -> None:
    p = gpu_pod(name, gpus, seconds)
    out = await post(client, "filter", {"Pod": p, "NodeNames": [node]})
    assert out["NodeNames"] == [node]
    out = await post(client, "bind", {"PodName": name, "PodNamespace": "ml",
                                      "PodUID": p["metadata"]["uid"], "Node": node})
    assert out == {"Error": ""}


async def test_a_held_node_takes_only_pods_predicted_to_end_before_the_gang_starts(client):
    NOW[0] = 1000.0
    for i in range(3):  # node a drains in 100 s, node b in 10,000 s
        await run(client, f"a{i}", 1, 100, "a")
        await run(client, f"b{i}", 1, 10_000, "b")
    gang = gpu_pod("gang", 4, 3600)
    out = await post(client, "filter", {"Pod": gang, "NodeNames": ["a", "b"]})
    assert out["NodeNames"] == []
    hold = client.sched.holds.hold
    assert hold.owner == gang["metadata"]["uid"] and hold.start_s == 1100.0
    late = await post(client, "filter", {"Pod": gpu_pod("late", 1, 1000), "NodeNames": ["a", "b"]})
    assert late["NodeNames"] == ["b"]
    assert "held for a waiting gang" in late["FailedNodes"]["a"]
    unknown = await post(client, "filter", {"Pod": gpu_pod("unknown", 1, None),
                                            "NodeNames": ["a", "b"]})
    assert unknown["NodeNames"] == ["b"]
    early = await post(client, "filter", {"Pod": gpu_pod("early", 1, 40),
                                          "NodeNames": ["a", "b"]})  # x2 = 80 s < 100 s
    assert sorted(early["NodeNames"]) == ["a", "b"]
    # the owner not asked about again for the hold's lifetime: the hold lapses
    NOW[0] += HOLD_TTL_S + 1
    late = await post(client, "filter", {"Pod": gpu_pod("late2", 1, 1000),
                                         "NodeNames": ["a", "b"]})
    assert sorted(late["NodeNames"]) == ["a", "b"] and client.sched.holds.hold is None
