"""Filter's per-shape, per-node verdicts (fit and cost) answer what fit and node_costs answer,
and are recomputed exactly where a node changed: a booking, a release, a new inventory."""

from __future__ import annotations

import random

from builders import (
    bind_pod,
    filter_alike,
    filter_args,
    gpu_node,
    mixed_inventory,
    pod,
    random_bind_or_release,
    without_node_verdicts,
)

from extender import protocol
from extender.interference import default_matrix
from extender.inventory import annotation_value
from extender.ledger.memory import MemoryLedger
from extender.placement import make_policy
from extender.service import Scheduler

NODES = ("a", "b", "c", "d", "e")


def cluster() -> Scheduler:
    return Scheduler(inventory=mixed_inventory(), ledger=MemoryLedger(),
                     matrix=default_matrix(), policy=make_policy("sparse"))


SHAPES = [dict(mem=4000, milli=200, job_class="cnn"), dict(mem=12000, milli=500),
          dict(mem=30000, milli=100, job_class="recommendation"), dict(gpus=1),
          dict(gpus=2), dict(mem=2000, milli=300, job_class="transformer"),
          dict(gpus=4), dict(mem=70000, milli=200)]


async def test_same_answers_and_costs_as_without_the_cache_over_bookings_and_releases(
) -> None:
    rng = random.Random(7)
    cached, plain = cluster(), without_node_verdicts(cluster())
    bound: list[dict] = []
    for step in range(120):
        p = pod(**rng.choice(SHAPES))
        names = tuple(rng.sample(NODES, rng.randint(1, len(NODES))))
        a = await filter_alike(cached, plain, p, names, step)
        await random_bind_or_release(rng, (cached, plain), p, a.NodeNames, bound)
    assert cached.node_verdicts.reused > 0  # the cache did answer, and alike


async def test_only_the_booked_node_is_computed_again() -> None:
    s = cluster()
    first = pod(mem=4000, milli=200, job_class="cnn")
    assert len((await s.filter(filter_args(first, NODES))).NodeNames) == len(NODES)
    await bind_pod(s, first, "a")
    before = s.node_verdicts.computed
    again = pod(mem=4000, milli=200, job_class="cnn")
    assert len((await s.filter(filter_args(again, NODES))).NodeNames) == len(NODES)
    assert s.node_verdicts.computed - before == 2  # node a: its fit, then its cost


async def test_a_new_job_class_of_the_same_request_starts_from_its_fits() -> None:
    s = cluster()
    assert (await s.filter(filter_args(pod(mem=4000, milli=200, job_class="cnn"), NODES))
            ).NodeNames
    before = s.node_verdicts.computed
    other = pod(mem=4000, milli=200, job_class="recommendation")
    assert len((await s.filter(filter_args(other, NODES))).NodeNames) == len(NODES)
    assert s.node_verdicts.computed - before == len(NODES)  # its costs; the fits were there


async def test_shapes_that_share_fits_answer_as_without_the_cache() -> None:
    """Job classes over the same requests, one of them limited to a GPU model (other fits),
    through bookings and releases: a shape's fits taken from another shape are its own."""
    rng = random.Random(11)
    cached, plain = cluster(), without_node_verdicts(cluster())
    requests = [dict(mem=4000, milli=200), dict(mem=4000, milli=200, models="A100-80GB"),
                dict(mem=12000, milli=500), dict(gpus=1), dict(gpus=1, models="A100-80GB")]
    classes = ["cnn", "recommendation", "transformer", "rnn"]
    bound: list[dict] = []
    for step in range(150):
        p = pod(**rng.choice(requests), job_class=rng.choice(classes))
        names = tuple(rng.sample(NODES, rng.randint(2, len(NODES))))
        a = await filter_alike(cached, plain, p, names, step)
        await random_bind_or_release(rng, (cached, plain), p, a.NodeNames, bound)
    assert cached.node_verdicts.reused > 0


async def test_a_full_node_stops_passing_and_passes_again_once_released() -> None:
    s = cluster()
    whole = pod(gpus=1)
    assert "d" in (await s.filter(filter_args(whole, ("d", "e")))).NodeNames
    await bind_pod(s, whole, "d")  # d has one GPU: now full for this shape
    second = pod(gpus=1)
    answer = await s.filter(filter_args(second, ("d", "e")))
    assert answer.NodeNames == ["e"]
    assert "free GPUs" in answer.FailedNodes["d"]
    await s.release(whole["metadata"]["uid"])
    assert (await s.filter(filter_args(pod(gpus=1), ("d", "e")))).NodeNames == ["d", "e"]


async def test_a_node_whose_gpus_change_is_judged_on_its_new_gpus() -> None:
    s = cluster()
    big = dict(mem=60000, milli=100)
    assert (await s.filter(filter_args(pod(**big), ("a", "e")))).NodeNames == []
    grown = gpu_node("e", 2, model="A100-80GB", memory_mib=81920)
    assert s.update_node("e", {"sparse.io/gpu-inventory": annotation_value(grown.gpus)})
    answer = await s.filter(filter_args(pod(**big), ("a", "e")))
    assert answer.NodeNames == ["e"]
    assert "GPU size" in answer.FailedAndUnresolvableNodes["a"]


async def test_reasons_are_kept_while_the_failing_nodes_stay_as_they_were(monkeypatch) -> None:
    import extender.verbs.nodecache as nodecache

    explained: list[list[str]] = []
    real_misfits = nodecache.misfits

    def counting_misfits(state, demand, nodes, masks, bad):  # type: ignore[no-untyped-def]
        explained.append([state.node_names[nodes[j]] for j in bad])
        return real_misfits(state, demand, nodes, masks, bad)

    monkeypatch.setattr(nodecache, "misfits", counting_misfits)
    s = cluster()

    async def place(p: dict, node: str) -> None:
        assert node in (await s.filter(filter_args(p, NODES))).NodeNames
        await bind_pod(s, p, node)

    whole = pod(gpus=1)
    await place(whole, "d")  # d's one GPU taken: d fails for whole-GPU pods
    explained.clear()
    first = await s.filter(filter_args(pod(gpus=1), NODES))
    second = await s.filter(filter_args(pod(gpus=1), NODES))
    assert first.FailedNodes == second.FailedNodes and "d" in first.FailedNodes
    assert explained == [["d"]]  # asked once; the second answer's words were kept
    second.FailedNodes.clear()  # an answer's dicts are its own
    await place(pod(gpus=1), "a")  # a passing node changed: d's words stand
    assert "d" in (await s.filter(filter_args(pod(gpus=1), NODES))).FailedNodes
    assert explained == [["d"]]
    await s.release(whole["metadata"]["uid"])  # the failing node changed: asked again
    third = await s.filter(filter_args(pod(gpus=1), NODES))
    assert "d" not in third.FailedNodes and "d" in third.NodeNames
    await place(pod(gpus=1), "d")
    assert "d" in (await s.filter(filter_args(pod(gpus=1), NODES))).FailedNodes
    assert explained == [["d"], ["d"]]


def test_the_fit_verdicts_stamps_are_read_again_only_while_no_stamp_moved() -> None:
    from extender.demand import pod_demand
    from extender.ledger.rules import Allocation, Reservation

    s = cluster()
    state = s.state
    demand = pod_demand(protocol.pod_from_dict(pod(mem=4000, milli=200)))
    v = s.node_verdicts.fits(s.policy, state, demand, list(NODES))
    assert v is not None
    assert v.current(state).tolist() == state.node_stamp[v.nodes].tolist()
    assert v.current(state.copy()) is None  # another state object
    gpu = state.gpu_uuid[state.gpus_of(state.node_index["b"])[0]]
    state.apply(Reservation(pod_uid="x", namespace="ns", name="x", node="b",
                            allocations=(Allocation(gpu, "main", 1000, 100),)))
    assert v.current(state) is None  # a node's stamp moved since


async def test_a_refill_takes_the_other_nodes_booked_since_with_it() -> None:
    """kube-scheduler's window moves with every pod: a node booked outside this request's
    candidates is priced with the stale candidate, once, and answers alike later."""
    s, plain = cluster(), without_node_verdicts(cluster())
    shape = dict(mem=4000, milli=200, job_class="cnn")
    first, second = pod(**shape), pod(**shape)
    for p in (first, second):
        await filter_alike(s, plain, p, NODES, 0)
    for p, node in ((first, "a"), (second, "b")):
        for sched in (s, plain):
            await bind_pod(sched, p, node)
    before = s.node_verdicts.computed
    await filter_alike(s, plain, pod(**shape), ("a", "c"), 1)
    assert s.node_verdicts.computed - before == 4  # a and b: fit, then cost
    before = s.node_verdicts.computed
    await filter_alike(s, plain, pod(**shape), ("b", "e"), 2)
    assert s.node_verdicts.computed == before  # b was priced with a


async def test_a_failing_node_is_explained_once_whichever_window_it_shows_in(monkeypatch
                                                                             ) -> None:
    """kube-scheduler's window moves with every pod: the failing candidates change while each
    failing node stays as it was; its misfit is read again only once it changed, and the
    words are fit's."""
    import extender.verbs.nodecache as nodecache

    explained: list[str] = []
    real_misfits = nodecache.misfits

    def counting_misfits(state, demand, nodes, masks, bad):  # type: ignore[no-untyped-def]
        explained.extend(state.node_names[nodes[j]] for j in bad)
        return real_misfits(state, demand, nodes, masks, bad)

    monkeypatch.setattr(nodecache, "misfits", counting_misfits)
    s, plain = cluster(), without_node_verdicts(cluster())
    for step, (shape, node) in enumerate([(dict(gpus=1), "d"), (dict(gpus=2), "b")]):
        p = pod(**shape)
        await filter_alike(s, plain, p, NODES, step)
        for sched in (s, plain):
            await bind_pod(sched, p, node)
    explained.clear()
    for step, window in enumerate([("a", "b", "d"), ("b", "c"), ("d", "e"), ("e", "b", "d")]):
        answer = await filter_alike(s, plain, pod(gpus=1), window, step)
        assert set(answer.FailedNodes) == {"b", "d"} & set(window)
    assert sorted(explained) == ["b", "d"]
