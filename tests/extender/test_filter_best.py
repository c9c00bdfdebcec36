"""Filter alone (no prioritizeVerb): filter answers the nodes within a tolerance of the best
score, exactly those the two-call path scores best, and never a node that does not fit."""

from __future__ import annotations

import random

import pytest
from builders import bind_pod, filter_args, mixed_inventory, pod, random_bind_or_release

from extender.config import Settings
from extender.http.app import build_scheduler
from extender.interference import default_matrix
from extender.ledger.memory import MemoryLedger
from extender.placement import make_policy
from extender.service import Scheduler
from extender.verbs.filter import best_nodes

NODES = ("a", "b", "c", "d", "e")
SHAPES = [dict(mem=4000, milli=200, job_class="cnn"), dict(mem=12000, milli=500),
          dict(mem=30000, milli=100, job_class="recommendation"), dict(gpus=1),
          dict(gpus=2), dict(mem=2000, milli=300, job_class="transformer"),
          dict(gpus=4), dict(mem=70000, milli=200)]


def cluster(policy: str = "sparse") -> Scheduler:
    return Scheduler(inventory=mixed_inventory(), ledger=MemoryLedger(),
                     matrix=default_matrix(), policy=make_policy(policy))


def best_only(within: float = 0.0, policy: str = "sparse") -> Scheduler:
    s = cluster(policy)
    s.filter_best_within = within
    return s


async def two_call(s: Scheduler, p: dict, names: tuple[str, ...]
                   ) -> tuple[list[str], dict[str, int]]:
    passed = (await s.filter(filter_args(p, names))).NodeNames
    scores = {h.Host: h.Score for h in await s.prioritize(filter_args(p, tuple(passed)))}
    return passed, scores


@pytest.mark.parametrize("policy", ["sparse", "spread"])  # node verdicts kept; not kept
async def test_answers_the_best_scored_nodes_of_the_two_call_path_over_random_steps(
        policy: str) -> None:
    rng = random.Random(11)
    best, both = best_only(policy=policy), cluster(policy)
    bound: list[dict] = []
    narrowed = 0
    for step in range(120):
        p = pod(**rng.choice(SHAPES))
        names = tuple(rng.sample(NODES, rng.randint(1, len(NODES))))
        answer = (await best.filter(filter_args(p, names))).NodeNames
        passed, scores = await two_call(both, p, names)
        assert set(answer) <= set(passed), step  # never a node that does not fit
        if passed:
            top = max(scores.values())
            assert answer == [n for n in passed if scores[n] == top], step
        else:
            assert answer == [], step
        narrowed += len(answer) < len(passed)
        await random_bind_or_release(rng, (best, both), p, answer, bound)
    assert narrowed > 10  # the answer did leave nodes out, not only pass everything


async def test_a_tolerance_keeps_every_node_within_it_and_ten_keeps_all_that_fit() -> None:
    s, both = best_only(3.0), cluster()
    wide = best_only(10.0)
    p = pod(mem=4000, milli=200, job_class="cnn")
    passed, scores = await two_call(both, p, NODES)
    assert (await s.filter(filter_args(p, NODES))).NodeNames == [
        n for n in passed if scores[n] >= max(scores.values()) - 3]
    assert (await wide.filter(filter_args(p, NODES))).NodeNames == passed


async def test_nothing_fits_and_one_fits_answer_as_before() -> None:
    s = best_only()
    huge = await s.filter(filter_args(pod(gpus=16), NODES))
    assert huge.NodeNames == [] and len(huge.FailedNodes) + len(
        huge.FailedAndUnresolvableNodes) == len(NODES)
    assert (await s.filter(filter_args(pod(gpus=8), NODES))).NodeNames == ["c"]


def test_best_nodes_keeps_ties_in_request_order() -> None:
    assert best_nodes(["a", "b", "c", "d"], [7, 10, 9, 10], 0) == ["b", "d"]
    assert best_nodes(["a", "b", "c", "d"], [7, 10, 9, 10], 1) == ["b", "c", "d"]


def test_the_setting_reaches_the_scheduler_and_is_checked() -> None:
    assert build_scheduler(Settings(filter_best_within=1.5)).filter_best_within == 1.5
    assert build_scheduler(Settings()).filter_best_within is None
    assert any("--filter-best-within" in e for e in Settings(filter_best_within=11).validate())
    assert not any("--filter-best-within" in e
                   for e in Settings(filter_best_within=0).validate())


async def test_single_answers_one_of_the_best_scored_nodes_over_random_steps() -> None:
    rng = random.Random(5)
    single, both = best_only(), cluster()
    single.filter_best_single = True
    narrowed = 0
    for step in range(80):
        p = pod(**rng.choice(SHAPES))
        names = tuple(rng.sample(NODES, rng.randint(1, len(NODES))))
        answer = (await single.filter(filter_args(p, names))).NodeNames
        passed, scores = await two_call(both, p, names)
        if not passed:
            assert answer == [], step
            continue
        top = max(scores.values())
        assert len(answer) == 1 and scores[answer[0]] == top, step  # one node, of the top
        narrowed += len(passed) > 1
        if rng.random() < 0.6:
            await bind_pod(single, p, answer[0])
            await bind_pod(both, p, answer[0])
    assert narrowed > 10  # several nodes fitted, one was answered


def test_single_needs_a_tolerance_and_reaches_the_scheduler() -> None:
    assert any("--filter-best-single" in e for e in Settings(filter_best_single=True).validate())
    assert not any("--filter-best-single" in e for e in Settings(
        filter_best_within=0, filter_best_single=True).validate())
    assert build_scheduler(Settings(filter_best_within=0,
                                    filter_best_single=True)).filter_best_single
    assert not build_scheduler(Settings(filter_best_within=0)).filter_best_single
