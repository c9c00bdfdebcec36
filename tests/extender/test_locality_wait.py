"""An embedding reader waiting for a warm node through filter (verbs/localitywait.py) and the
rule it shares with the replay (placement/delay.py)."""

from __future__ import annotations

import datetime as dt
import json
import math

import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer
from builders import filter_args, gpu_node, inventory, place_pod, pod, post_verb
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.annotations import (
    ANN_EMBEDDING,
    ANN_EMBEDDING_CACHE,
    DEFAULT_RACK_LABEL,
)
from extender.config import Settings
from extender.http.app import make_app
from extender.interference import default_matrix
from extender.ledger.memory import MemoryLedger
from extender.placement import make_policy
from extender.placement.delay import Wait, room_in, warm_wait
from extender.placement.locality import LocalityIndex, LocalityWeights, encode_cache
from extender.protocol import epoch_seconds
from extender.service import Scheduler
from extender.verbs.localitywait import ReaderWaits

ZONE = "topology.kubernetes.io/zone"
ROW = 512.0
NOW = [1000.0]


def scheduler(max_wait_s: float = 600.0) -> Scheduler:
    """Node ``warm`` (2 GPUs) caches table ``a``; ``cold`` and ``other`` do not; the store's
    shards are in warm's rack."""
    s = Scheduler(inventory=inventory(gpu_node("warm", 2), gpu_node("cold", 2),
                                      gpu_node("other", 2)),
                  ledger=MemoryLedger(), matrix=default_matrix(), policy=make_policy("sparse"),
                  clock=lambda: NOW[0],
                  locality=LocalityIndex(LocalityWeights(max_wait_s=max_wait_s)))
    cap = int(2e6 * ROW)
    ann = encode_cache({"a": 1_000_000}, {"a": 50_000_000}, int(1e6 * ROW), cap, 0.0,
                       readers={}, row_bytes=ROW)
    s.update_nodes([("warm", {ANN_EMBEDDING_CACHE: ann}, {ZONE: "z1", DEFAULT_RACK_LABEL: "r1"}),
                    ("cold", None, {ZONE: "z2", DEFAULT_RACK_LABEL: "r9"}),
                    ("other", None, {ZONE: "z2", DEFAULT_RACK_LABEL: "r9"})])
    s.locality.set_store("s", {"warm"})
    return s


def reader(steps: int = 1_000_000, whole: bool = False, max_wait: float | None = None) -> dict:
    """A fetch-bound reader of ``a``: a GPU share, or one whole GPU; ``max_wait``: its own
    bound on waiting."""
    p = pod(gpus=1, job_class="recommendation") if whole else pod(
        milli=500, mem=4096, job_class="recommendation")
    decl = {"store": "s", "tables": ["a"], "hotRows": {"a": 10_000_000},
            "idsPerStep": {"a": 200_000}, "steps": steps, "stepComputeMs": 1.0}
    if max_wait is not None:
        decl["maxWaitSeconds"] = max_wait
    p["metadata"]["annotations"][ANN_EMBEDDING] = json.dumps(decl)
    return p


def filler(seconds: float | None) -> dict:
    """A whole-GPU pod, predicted to end in ``seconds`` (None: no prediction)."""
    return pod(gpus=1, predicted_s=seconds)


async def fill_warm(s: Scheduler, seconds: float | None) -> None:
    for _ in range(2):
        await place_pod(s, filler(seconds), "warm")


NAMES = ["warm", "cold", "other"]


async def test_a_reader_waits_for_the_warm_node_about_to_free_then_takes_it():
    NOW[0] = 1000.0
    s = scheduler()
    await fill_warm(s, 60)
    p = reader()
    out = await s.filter(filter_args(p, NAMES))
    assert out.NodeNames == [] and out.FailedNodes == {}
    why = out.FailedAndUnresolvableNodes  # unresolvable: no preemption for a choice to wait
    assert set(why) == set(NAMES)
    assert why["cold"].startswith("waiting for node warm") and "room predicted in 60 s" in why[
        "cold"]
    assert s.locality_waits == 1
    NOW[0] += 30  # still waiting, the count kept from the first filter
    out = await s.filter(filter_args(p, NAMES))
    assert out.NodeNames == [] and "waited 30 s" in out.FailedAndUnresolvableNodes["cold"]
    for uid in list(s.state.reservations):  # the fillers end: warm has room, the pod takes it
        await s.release(uid)
    NOW[0] += 30
    out = await s.filter(filter_args(p, NAMES))
    assert "warm" in out.NodeNames
    got = {h.Host: h.Score for h in await s.prioritize(filter_args(p, out.NodeNames))}
    assert got["warm"] == max(got.values())
    await place_pod(s, p, "warm")
    assert len(s.reader_waits) == 0


async def test_a_reader_never_waits_past_the_operators_bound():
    NOW[0] = 2000.0
    s = scheduler(max_wait_s=100.0)
    p = reader()
    assert "warm" in (await s.filter(filter_args(p, NAMES))).NodeNames  # its first chance
    NOW[0] += 80  # not bound (another pod won the race); warm fills for 60 s
    await fill_warm(s, 60)
    out = await s.filter(filter_args(p, NAMES))  # 80 s since its first chance + 60 > 100
    assert sorted(out.NodeNames) == ["cold", "other"]
    late = reader()  # a reader new to the extender waits
    assert (await s.filter(filter_args(late, NAMES))).NodeNames == []
    NOW[0] += 61  # the fillers overran their prediction: no room to predict, it starts
    assert sorted((await s.filter(filter_args(late, NAMES))).NodeNames) == ["cold", "other"]


@pytest.mark.parametrize("case", ["off", "no prediction", "too far", "short job", "whole GPU",
                                  "not a candidate", "no embeddings", "the pod never waits",
                                  "the pod's bound is shorter"])
async def test_a_reader_starts_at_once_where_waiting_cannot_pay(case):
    NOW[0] = 3000.0
    s = scheduler(max_wait_s=0.0 if case == "off" else 600.0)
    await fill_warm(s, None if case == "no prediction" else 1000 if case == "too far" else 60)
    p = (reader(steps=100) if case == "short job" else reader(whole=True) if case == "whole GPU"
         else pod(milli=500, mem=4096) if case == "no embeddings"
         else reader(max_wait=0) if case == "the pod never waits"
         else reader(max_wait=30) if case == "the pod's bound is shorter" else reader())
    names = ["cold", "other"] if case == "not a candidate" else NAMES
    out = await s.filter(filter_args(p, names))
    assert sorted(out.NodeNames) == ["cold", "other"]
    assert s.locality_waits == 0


async def test_the_wait_counts_on_the_metrics_page():
    NOW[0] = 4000.0
    s = scheduler()
    await fill_warm(s, 60)
    app = make_app(Settings(nodes=None, max_body_mib=2), scheduler=s)
    async with TestClient(TestServer(app)) as client:
        out = await post_verb(client, "filter", {"Pod": reader(), "NodeNames": NAMES})
        assert out["NodeNames"] == []
        text = await (await client.get("/metrics")).text()
        seen = await (await client.get("/scheduler/inspect")).json()
    assert "sparse_locality_waits_total 1.0" in text
    assert 'verb="wait"' not in text  # counted there, not among filter's rejections
    (waiting,) = seen["locality_waiting"]  # where an operator looks
    assert waiting["node"] == "warm" and waiting["room_in_s"] == 60.0 and waiting["saves_s"] > 60


# --- the rule itself ------------------------------------------------------------------------

def test_room_comes_as_the_pods_predicted_ends_free_compute_and_memory():
    from extender.demand import ContainerRequest, PodDemand
    from extender.ledger.rules import Allocation, Reservation
    from extender.placement import ClusterState

    state = ClusterState.build(inventory(gpu_node("n", 2, memory_mib=32768)), default_matrix())

    def book(uid, gpu, milli, mem):
        state.apply(Reservation(pod_uid=uid, namespace="ml", name=uid, node="n",
                                allocations=(Allocation(f"GPU-n-{gpu}", "c", mem, milli),)))

    book("a", 0, 600, 8000)  # GPU 0: 400 milli left
    book("b", 0, 300, 8000)  # then 100
    book("c", 1, 1000, 32768)  # GPU 1: full

    def share(milli, mem):
        return PodDemand(uid="p", namespace="ml", name="p",
                         containers=(ContainerRequest("c", 0, milli, mem),), whole_gpus=0,
                         share_milli=milli, share_mem_mib=mem)

    whole = PodDemand(uid="w", namespace="ml", name="w", containers=(ContainerRequest("c", 1),),
                      whole_gpus=1, share_milli=0, share_mem_mib=0)
    ends = {"a": 1300.0, "b": 1100.0, "c": 1200.0}
    assert room_in(state, 0, share(100, 1000), 1000.0, ends) == 0.0  # fits now
    assert room_in(state, 0, share(300, 1000), 1000.0, ends) == 100.0  # b ends
    assert room_in(state, 0, share(600, 1000), 1000.0, ends) == 200.0  # c frees GPU 1 first
    assert room_in(state, 0, whole, 1000.0, ends) == 200.0
    assert room_in(state, 0, share(600, 1000), 1000.0, {"a": 1300.0}) == 300.0
    assert room_in(state, 0, share(600, 1000), 1000.0, {}) == math.inf  # nothing predicted
    assert room_in(state, 0, share(300, 1000), 1150.0, ends) == 0.0  # b overran its end


def test_warm_wait_takes_the_first_near_node_that_saves_more_than_the_whole_wait():
    bonus = {"here": 0.1, "n1": 0.1005, "n2": 0.3, "n3": 0.5}

    def of(names):
        return np.array([bonus[n] for n in names])

    # n1 saves 0.0005 x 10,000 s = 5 s < 20 s to come; n2 saves 2,000 s > 10 + 40
    got = warm_wait(of, "here", {"n1": 20.0, "n2": 40.0, "n3": 10.0}, 10.0, False, 10_000.0)
    assert got == Wait("n2", 40.0, pytest.approx(2000.0), 10.0)
    assert warm_wait(of, "here", {"n2": 40.0}, 10.0, True, 10_000.0) is None  # due
    assert warm_wait(of, "n2", {"n2": 40.0}, 10.0, False, 10_000.0) is None  # it is here
    assert warm_wait(of, None, {"n2": 40.0}, 10.0, False, 10_000.0) is None  # nothing fits
    assert warm_wait(of, "here", {"n2": 0.0}, 10.0, False, 10_000.0) is None  # room now
    assert warm_wait(of, "here", {"n2": 9_995.0}, 10.0, False, 10_000.0) is None
    assert "waiting for node n2" in got.reason()


def test_reader_waits_are_kept_and_bounded():
    tries = ReaderWaits(kept=10)
    assert tries.first("a", 5.0) == 5.0 and tries.first("a", 9.0) == 5.0
    for i in range(20):
        tries.first(f"p{i}", float(i))
    assert len(tries) <= 10 and tries.first("p19", 99.0) == 19.0
    tries.forget("p19")
    assert tries.first("p19", 99.0) == 99.0
    wait = Wait("n", 30.0, 500.0, 0.0)
    tries.waits("p19", "ml/p19", wait, 100.0)
    assert [w["node"] for w in tries.waiting(110.0, 600.0)] == ["n"]
    assert tries.waiting(800.0, 600.0) == []  # not asked about since: gone or placed elsewhere
    tries.waits("p19", "ml/p19", None, 120.0)  # asked again: it starts now
    assert tries.waiting(120.0, 600.0) == []


async def test_only_the_warm_nodes_saving_most_are_walked(monkeypatch):
    from extender.verbs import localitywait

    NOW[0] = 5000.0
    names = [f"w{i:02d}" for i in range(24)]
    s = Scheduler(inventory=inventory(*(gpu_node(n, 1) for n in [*names, "cold"])),
                  ledger=MemoryLedger(), matrix=default_matrix(), policy=make_policy("sparse"),
                  clock=lambda: NOW[0], locality=LocalityIndex(LocalityWeights(max_wait_s=600)))
    cap = int(2e6 * ROW)
    s.update_nodes([(n, {ANN_EMBEDDING_CACHE: encode_cache(
        {"a": 10_000 * (i + 1)}, {"a": 50_000_000}, int(1e4 * (i + 1) * ROW), cap, 0.0,
        readers={}, row_bytes=ROW)}, {ZONE: "z1", DEFAULT_RACK_LABEL: "r1"})
        for i, n in enumerate(names)])
    for n in names:
        await place_pod(s, filler(60), n)
    walked = []
    real = localitywait.room_in

    def counting(state, node, *rest):
        walked.append(state.node_names[node])
        return real(state, node, *rest)

    monkeypatch.setattr(localitywait, "room_in", counting)
    out = await s.filter(filter_args(reader(), [*names, "cold"]))
    assert out.NodeNames == [] and "waiting for node w23" in out.FailedAndUnresolvableNodes["cold"]
    assert sorted(walked) == names[-localitywait.MOST_WARM_NODES:]  # the most rows cached


async def test_the_wait_counts_from_the_first_filter_even_one_that_found_no_room():
    NOW[0] = 6000.0
    s = scheduler(max_wait_s=100.0)
    for name, seconds in (("warm", 110), ("cold", None), ("other", None)):  # all full
        for _ in range(2):
            await place_pod(s, filler(seconds), name)
    p = reader()
    assert (await s.filter(filter_args(p, NAMES))).NodeNames == []  # nowhere to go yet
    for uid in [u for u, r in s.state.reservations.items() if r.node == "cold"]:
        await s.release(uid)
    NOW[0] += 80  # cold freed; warm's room in 30 s: 80 + 30 > 100 since the first filter
    assert (await s.filter(filter_args(p, NAMES))).NodeNames == ["cold"]
    late = reader()  # a reader first asked about now would wait the 30 s
    assert (await s.filter(filter_args(late, NAMES))).NodeNames == []


def stamped(p: dict, epoch: float) -> dict:
    p["metadata"]["creationTimestamp"] = dt.datetime.fromtimestamp(epoch, dt.UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    return p


async def test_every_replica_and_a_restarted_one_count_the_wait_from_the_pods_creation():
    created = 1_800_000_000.0
    p = stamped(reader(), created)
    NOW[0] = created + 30
    first, restarted = scheduler(max_wait_s=100.0), scheduler(max_wait_s=100.0)
    for s in (first, restarted):
        await fill_warm(s, 60)
    out = await first.filter(filter_args(p, NAMES))  # asked 30 s after its creation
    assert out.NodeNames == [] and "waited 30 s" in out.FailedAndUnresolvableNodes["cold"]
    NOW[0] = created + 45  # 45 s waited + room in 45 s <= 100
    out = await restarted.filter(filter_args(p, NAMES))  # never asked about it before
    assert out.NodeNames == [] and "waited 45 s" in out.FailedAndUnresolvableNodes["cold"]
    NOW[0] = created + 50  # warm refilled for 60 s more: 50 + 60 > 100 on either replica
    for s in (first, restarted):
        for uid in list(s.state.reservations):
            await s.release(uid)
        await fill_warm(s, 60)
        assert sorted((await s.filter(filter_args(p, NAMES))).NodeNames) == ["cold", "other"]
    old = stamped(reader(), created - 100)  # created past the bound: never waits, anywhere
    assert sorted((await first.filter(filter_args(old, NAMES))).NodeNames) == ["cold", "other"]


@pytest.mark.parametrize("stamp", ["ahead", "garbage", "absent"])
async def test_without_a_usable_creation_time_the_wait_counts_from_the_first_filter(stamp):
    NOW[0] = 1_800_000_000.0
    s = scheduler(max_wait_s=100.0)
    await fill_warm(s, 60)
    p = reader()
    if stamp == "ahead":  # the API server's clock ahead of ours
        stamped(p, NOW[0] + 3_600)
    elif stamp == "garbage":
        p["metadata"]["creationTimestamp"] = "yesterday"
    else:
        del p["metadata"]["creationTimestamp"]
    assert (await s.filter(filter_args(p, NAMES))).NodeNames == []
    NOW[0] += 30
    out = await s.filter(filter_args(p, NAMES))
    assert out.NodeNames == [] and "waited 30 s" in out.FailedAndUnresolvableNodes["cold"]


def test_creation_times_are_read_as_the_api_server_writes_them():
    assert epoch_seconds("2026-11-30T10:00:00Z") == dt.datetime(2026, 11, 30, 10,
                                                                tzinfo=dt.UTC).timestamp()
    assert epoch_seconds("2026-11-30T10:00:00") == epoch_seconds("2026-11-30T10:00:00+00:00")
    assert epoch_seconds("2026-11-30T12:00:00+02:00") == epoch_seconds("2026-11-30T10:00:00Z")
    assert epoch_seconds(None) is None and epoch_seconds("") is None
    assert epoch_seconds("soon") is None
    tries = ReaderWaits()
    assert tries.first("a", 50.0, created=20.0) == 20.0  # created 30 s before we saw it
    assert tries.first("b", 50.0, created=80.0) == 50.0  # a creation clock ahead of ours


# --- the predicted room against the fit it predicts ----------------------------------------

bookings_st = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 1000), st.integers(1, 32768),
                                 st.one_of(st.none(), st.floats(0.0, 500.0))), max_size=12)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bookings=bookings_st, milli=st.integers(1, 1000), mem=st.integers(1, 32768),
       whole=st.integers(0, 2), gpus=st.integers(1, 4))
def test_the_predicted_room_is_when_fit_first_takes_the_pod(bookings, milli, mem, whole, gpus):
    """``room_in`` says t: with the pods predicted to end by now + t gone the pod fits, with
    only those ending before it does not (inf: not even with every predicted pod gone)."""
    from extender.demand import ContainerRequest, PodDemand
    from extender.ledger.rules import Allocation, Reservation
    from extender.placement import ClusterState, fit

    now = 1000.0
    state = ClusterState.build(inventory(gpu_node("n", gpus, memory_mib=32768)),
                               default_matrix())
    ends: dict[str, float] = {}
    for k, (gpu, m, b, left) in enumerate(bookings):
        gpu %= gpus
        free_milli = int(state.milli_cap[gpu] - state.milli_used[gpu])
        free_mem = int(state.mem_cap[gpu] - state.mem_used[gpu])
        if m > free_milli or b > free_mem:
            continue
        uid = f"p{k}"
        state.apply(Reservation(pod_uid=uid, namespace="ml", name=uid, node="n",
                                allocations=(Allocation(f"GPU-n-{gpu}", "c", b, m),)))
        if left is not None:
            ends[uid] = now + left
    demand = (PodDemand(uid="w", namespace="ml", name="w",
                        containers=(ContainerRequest("c", whole),), whole_gpus=whole,
                        share_milli=0, share_mem_mib=0) if whole else
              PodDemand(uid="s", namespace="ml", name="s",
                        containers=(ContainerRequest("c", 0, milli, mem),), whole_gpus=0,
                        share_milli=milli, share_mem_mib=mem))

    def fits_without(gone: set[str]) -> bool:
        s = state.copy()
        for uid in gone:
            s.unapply(uid)
        return bool(fit(s, demand, ["n"], explain=False).fits[0])

    t = room_in(state, 0, demand, now, ends)
    if math.isinf(t):
        assert not fits_without(set(ends))
        return
    assert fits_without({u for u, e in ends.items() if e <= now + t})
    if t > 0:
        assert not fits_without({u for u, e in ends.items() if e < now + t})


async def test_a_wait_is_a_normal_event_posted_once_while_it_waits_for_the_same_node():
    import asyncio

    from kubernetes_asyncio import client

    from extender.kube.events import EventRecorder
    from extender.outcome import Outcome

    recorder = EventRecorder(client.ApiClient())
    posted: list[tuple[str, str, str]] = []

    async def create(outcome, kind, reason, message):  # type: ignore[no-untyped-def]
        posted.append((kind, reason, message))

    recorder._create = create  # type: ignore[method-assign]
    for waited in (0.0, 5.0, 10.0):  # the scheduler retries: the figures move, the node not
        wait = Wait("warm", 60.0 - waited, 500.0, waited)
        recorder.observe(Outcome("wait", "ml", "p", "u", False, wait.event()))
    recorder.observe(Outcome("wait", "ml", "p", "u", False, Wait("other", 5, 50, 10).event()))
    recorder.observe(Outcome("filter", "ml", "q", "v", False, "no GPU fits"))
    await asyncio.sleep(0)
    assert [(k, r) for k, r, _ in posted] == [("Normal", "WaitingForCachedNode"),
                                            ("Normal", "WaitingForCachedNode"),
                                            ("Warning", "FailedGPUPlacement")]
    assert "node warm" in posted[0][2] and "node other" in posted[1][2]
