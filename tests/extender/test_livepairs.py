"""Pair estimates from running jobs: the update rule, the worker's attribution, the Redis
round trip, and the extender placing differently once the estimates moved."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from builders import gpu_node, inventory

from extender.demand import ContainerRequest, PodDemand
from extender.interference import default_matrix
from extender.interference.observed import (
    PAIRS_KEY,
    PairEstimate,
    blend,
    parse_pairs,
    update,
)
from extender.ledger.memory import MemoryLedger
from extender.ledger.rules import Allocation, Reservation
from extender.livepairs import LivePairs
from extender.pairworker import JobSample, observations, store
from extender.placement import fit, make_policy, node_costs
from extender.service import Scheduler


def test_estimate_moves_toward_observations_and_blend_weights_by_count():
    est = update(None, 0.3, 1.0)
    assert est == PairEstimate(0.3, 1, 1.0)
    est = update(est, 0.5, 2.0, alpha=0.5)
    assert est.norm == pytest.approx(0.4) and est.n == 2
    prior = default_matrix()
    before = prior.pair("recommendation", "cnn-small")
    after = blend(prior, {("recommendation", "cnn-small"): PairEstimate(0.1, 3, 0.0)})
    assert after.pair("recommendation", "cnn-small") == pytest.approx(0.5 * before + 0.05)
    assert after.pair("cnn-small", "recommendation") == prior.pair("cnn-small", "recommendation")
    # unknown classes and garbage are ignored, never fatal
    assert parse_pairs({b"x": b"{", b"a|b": b'{"norm": 7, "n": 1}'}) == {}
    assert blend(prior, {("nope", "cnn"): PairEstimate(0.1, 9, 0)}).norm.tolist() == \
        prior.norm.tolist()


def test_worker_attributes_slowdown_to_co_runners_and_learns_solo_times():
    samples = [
        JobSample("ns", "rec", "recommendation", "gpu-1", step_s=0.2, solo_s=0.1),
        JobSample("ns", "cnn", "cnn", "gpu-1", step_s=0.5, solo_s=None),
        JobSample("ns", "big", "cnn", "gpu-2", step_s=0.4, solo_s=0.4),
        JobSample("ns", "three-a", "recommendation", "gpu-3", step_s=0.4, solo_s=0.1),
        JobSample("ns", "three-b", "rl", "gpu-3", step_s=1.0, solo_s=1.0),
        JobSample("ns", "three-c", "gan", "gpu-3", step_s=1.0, solo_s=1.0),
    ]
    pairs, alone = observations(samples, solo_known={"ns/cnn": 0.25})
    got = {(a, b): round(n, 4) for a, b, n in pairs}
    assert got[("recommendation", "cnn")] == 0.5
    assert got[("cnn", "recommendation")] == 0.5  # solo time learned earlier
    assert got[("recommendation", "rl")] == got[("recommendation", "gan")] == 0.5  # 0.25**.5
    assert alone == {"ns/big": 0.4}


async def test_store_and_live_refresh_round_trip(redis_url):
    client = aioredis.Redis.from_url(redis_url)
    live = LivePairs(client, default_matrix())
    assert await live.refresh() is None  # nothing learned yet
    n = await store(client, [("recommendation", "cnn-small", 0.1)] * 3, {"ns/a": 0.2}, 5.0)
    assert n == 1
    raw = parse_pairs(await client.hgetall(PAIRS_KEY))
    assert raw[("recommendation", "cnn-small")].n == 3
    matrix = await live.refresh()
    assert matrix is not None and live.pairs == 1
    assert matrix.pair("recommendation", "cnn-small") < default_matrix().pair(
        "recommendation", "cnn-small")
    assert await live.refresh() is None  # one GET, no re-read while the version stands
    await client.aclose()


def _share(uid: str, job_class: str) -> PodDemand:
    c = ContainerRequest("main", 0, 300, 4000)
    return PodDemand(uid=uid, namespace="ns", name=uid, containers=(c,), whole_gpus=0,
                     share_milli=300, share_mem_mib=4000, job_class=job_class,
                     share_containers=(c,))


async def test_placement_changes_when_observed_pairs_move(redis_url):
    """Node a runs a small CNN, node b an RL job. The Gavel prior says a recommendation job
    suffers less next to the CNN; observations say it suffers badly there. The next
    recommendation pod goes to b once the extender has read the estimates."""
    client = aioredis.Redis.from_url(redis_url)
    sched = Scheduler(inventory=inventory(gpu_node("a", 1), gpu_node("b", 1)),
                      ledger=MemoryLedger(), matrix=default_matrix(),
                      policy=make_policy("sparse"),
                      live_pairs=LivePairs(client, default_matrix()))
    for uid, node, cls in (("cnn", "a", "cnn-small"), ("rl", "b", "rl")):
        await sched.ledger.reserve(Reservation(uid, "ns", uid, node, (
            Allocation(f"GPU-{node}-0", "main", 4000, 300),), job_class=cls),
            sched.state.capacities([f"GPU-{node}-0"]))

    async def choice() -> str:
        state = await sched.view()
        demand = _share("new", "recommendation")
        result = fit(state, demand, ["a", "b"], explain=False)
        costs = node_costs(state, demand, result, sched.policy)
        return result.names[int(costs.argmin())]

    assert await choice() == "a"
    await store(client, [("recommendation", "cnn-small", 0.2)] * 6, {}, 1.0)
    assert await choice() == "b"
    await client.aclose()


async def test_solo_profile_annotation_steers_placement_through_the_pair_model():
    """Both nodes run a pod of the same class; only their solo profiles (annotations) differ.
    The new pod goes next to the quiet one; a malformed profile is a clear demand error."""
    import msgspec
    from builders import pod

    from extender.errors import InvalidDemand
    from extender.protocol import Pod

    sched = Scheduler(inventory=inventory(gpu_node("a", 1), gpu_node("b", 1)),
                      ledger=MemoryLedger(), matrix=default_matrix(),
                      policy=make_policy("sparse"))
    assert sched.profiles is not None

    def annotated(name: str, profile: str) -> Pod:
        raw = pod(name, mem=4000, milli=300, job_class="cnn")
        raw["metadata"]["annotations"]["sparse.io/solo-profile"] = profile
        return msgspec.convert(raw, Pod)

    for name, node, profile in (("busy", "a", "98,60,20000"), ("quiet", "b", "5,1,1500")):
        p = annotated(name, profile)
        await sched.demand_of(p)
        gpu = f"GPU-{node}-0"
        await sched.ledger.reserve(Reservation(p.metadata.uid, "ml", name, node, (
            Allocation(gpu, "main", 4000, 300),), job_class="cnn"), sched.state.capacities([gpu]))
    new = annotated("new", "60,10,2000")
    demand = await sched.demand_of(new)
    state = await sched.view()
    result = fit(state, demand, ["a", "b"], explain=False)
    assert result.names[int(node_costs(state, demand, result, sched.policy).argmin())] == "b"
    with pytest.raises(InvalidDemand, match="solo-profile"):
        await sched.demand_of(annotated("bad", "lots"))
    await sched.release(new.metadata.uid)
    assert sched.profiles.id_of(new.metadata.uid) == -1


async def test_a_prometheus_still_starting_gives_a_clear_error_not_a_json_trace():
    """Prometheus answers 503 in plain text while it replays its WAL: the worker's query names
    the status (the worker logs it and tries again) instead of failing to decode JSON."""
    import aiohttp
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    from extender.pairworker import query

    async def starting(_: web.Request) -> web.Response:
        return web.Response(status=503, text="Service Unavailable")

    app = web.Application()
    app.router.add_get("/api/v1/query", starting)
    async with TestServer(app) as server, aiohttp.ClientSession() as session:
        with pytest.raises(RuntimeError, match="HTTP 503.*Service Unavailable"):
            await query(session, str(server.make_url("/")), "sparse_job_step_seconds")
