"""The hold for a waiting gang through the extender's filter and bind (verbs/holdfilter.py)."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import TestClient, TestServer
from builders import bind_request, gpu_node, inventory, pod, post_verb

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


def gpu_pod(name: str, gpus: int, seconds: float | None) -> dict:
    return pod(name, gpus=gpus, predicted_s=seconds)


async def run(client, name: str, gpus: int, seconds: float | None, node: str) -> None:
    p = gpu_pod(name, gpus, seconds)
    out = await post_verb(client, "filter", {"Pod": p, "NodeNames": [node]})
    assert out["NodeNames"] == [node]
    assert await post_verb(client, "bind", bind_request(p, node)) == {"Error": ""}


async def test_a_held_node_takes_only_pods_predicted_to_end_before_the_gang_starts(client):
    NOW[0] = 1000.0
    for i in range(3):  # node a drains in 100 s, node b in 10,000 s
        await run(client, f"a{i}", 1, 100, "a")
        await run(client, f"b{i}", 1, 10_000, "b")
    gang = gpu_pod("gang", 4, 3600)
    out = await post_verb(client, "filter", {"Pod": gang, "NodeNames": ["a", "b"]})
    assert out["NodeNames"] == []
    hold = client.sched.holds.hold
    assert hold.owner == gang["metadata"]["uid"] and hold.start_s == 1100.0
    seen = await (await client.get("/scheduler/inspect")).json()  # where an operator looks
    assert seen["hold"] == {"owner": hold.owner, "node": "a", "gpus": 4, "start_s": 1100.0}
    late = await post_verb(client, "filter",
                           {"Pod": gpu_pod("late", 1, 1000), "NodeNames": ["a", "b"]})
    assert late["NodeNames"] == ["b"]
    assert "held for a waiting gang" in late["FailedNodes"]["a"]
    unknown = await post_verb(client, "filter", {"Pod": gpu_pod("unknown", 1, None),
                                            "NodeNames": ["a", "b"]})
    assert unknown["NodeNames"] == ["b"]
    early = await post_verb(client, "filter", {"Pod": gpu_pod("early", 1, 40),
                                          "NodeNames": ["a", "b"]})  # x2 = 80 s < 100 s
    assert sorted(early["NodeNames"]) == ["a", "b"]
    # the owner not asked about again for the hold's lifetime: the hold lapses
    NOW[0] += HOLD_TTL_S + 1
    late = await post_verb(client, "filter", {"Pod": gpu_pod("late2", 1, 1000),
                                         "NodeNames": ["a", "b"]})
    assert sorted(late["NodeNames"]) == ["a", "b"] and client.sched.holds.hold is None


def gang_request(job: str, gpus: int, seconds: float) -> dict:
    worker = gpu_pod("w", gpus, seconds)
    return {"job": job, "namespace": "ml", "name": job, "replicas": 1, "attempt": 0,
            "pod": {"metadata": worker["metadata"], "spec": worker["spec"]}, "ttlSeconds": 60}


async def test_the_controllers_gangs_hold_and_respect_holds_too(client):
    NOW[0] = 5000.0
    for i in range(3):  # node a drains in 100 s, node b in 10,000 s
        await run(client, f"a{i}", 1, 100, "a")
        await run(client, f"b{i}", 1, 10_000, "b")
    out = await post_verb(client, "gangs/reserve", gang_request("big", 4, 3600))
    assert out["admitted"] is False
    hold = client.sched.holds.hold
    assert hold.owner == "gang/big/0/0" and hold.start_s == 5100.0
    out = await post_verb(client, "gangs/reserve", gang_request("long", 1, 5000))
    assert out["admitted"] and out["slots"][0]["node"] == "b"  # not the held node
    out = await post_verb(client, "gangs/reserve", gang_request("long2", 1, 5000))
    assert out["admitted"] is False and "held for a waiting gang" in out["reason"]
    out = await post_verb(client, "gangs/reserve", gang_request("short", 1, 10))
    assert out["admitted"] and out["slots"][0]["node"] == "a"  # ends before the hold
