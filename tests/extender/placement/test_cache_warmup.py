"""The node cache over time (``cache_warmup``) and the locality term that scores it."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from extender.annotations import ANN_EMBEDDING, ANN_EMBEDDING_CACHE
from extender.placement.cache_model import served_share
from extender.placement.cache_warmup import warm_curve
from extender.placement.locality import (
    EmbeddingSpec,
    InvalidEmbedding,
    LocalityIndex,
    encode_cache,
    parse_embedding,
)


def test_fill_on_miss_matches_a_sampled_zipf_stream():
    """Independent Zipf draws through an unbounded fill-on-miss cache: the rows held and the
    hit ratio of each step's distinct rows are the model's."""
    n, alpha, draws, room = 50_000, 1.05, 1000, 5_000
    p = np.arange(1, n + 1, dtype=float) ** -alpha
    p /= p.sum()
    rng = np.random.default_rng(0)
    curve = warm_curve(n, alpha, draws)
    seen = np.zeros(n, dtype=bool)
    got, want = [], []
    for step in range(120):
        ids = np.unique(rng.choice(n, draws, p=p))
        got.append((seen[ids] & (ids < room)).mean())  # LFU keeps the top `room` ranks
        want.append(float(curve.hit(0.0, step * draws, room)))
        seen[ids] = True
    assert np.mean(np.abs(np.array(got) - want)) < 0.03
    assert seen[:room].sum() == pytest.approx(curve.held(0.0, 120 * draws, room), rel=0.03)


def test_warm_up_ends_at_the_steady_share_and_keeps_warm_rows():
    n, alpha, draws = 1e8, 1.05, 150_000.0
    curve = warm_curve(n, alpha, draws)
    rooms = np.array([1e5, 1e6, 1e7])
    warm = curve.hit(0.0, 1e30, rooms)
    np.testing.assert_allclose(warm, served_share(rooms, n, alpha, draws), rtol=2e-3)
    assert curve.hit(0.0, 0.0, 1e7) == 0 and curve.held(0.0, 0.0, 1e7) == 0
    # The warm rows published serve at once; the rest of the room fills as the job reads.
    assert curve.hit(1e6, 0.0, 1e7) == pytest.approx(warm[1], rel=2e-3)
    assert curve.held(1e6, 0.0, 1e7) == pytest.approx(1e6)
    # The mean over a job's steps is the mean of the step-by-step curve.
    s = np.linspace(0, 500, 20001)
    h = curve.hit(0.0, s * draws, 1e7)
    assert curve.mean_hit(0.0, 0.0, 1e7, draws, 500) == pytest.approx(h.mean(), rel=2e-3)
    # Long runs amortise the warm-up; short ones do not.
    short, long_ = (float(curve.mean_hit(0.0, 0.0, 1e7, draws, k)) for k in (100, 10**6))
    assert short < 0.8 * warm[2] and long_ > 0.99 * warm[2]
    assert 100 < curve.warm_steps(1e7, draws) < 10**5


def test_steps_are_declared_with_the_tables():
    spec = parse_embedding({ANN_EMBEDDING: json.dumps(
        {"store": "s", "tables": ["a"], "idsPerStep": 1000, "steps": 5000})})
    assert spec.steps == 5000
    assert parse_embedding({ANN_EMBEDDING: '{"store": "s", "tables": ["a"]}'}).steps is None
    for bad in (0, -3, 1.5, "10", True):
        with pytest.raises(InvalidEmbedding, match="steps"):
            parse_embedding({ANN_EMBEDDING: json.dumps(
                {"store": "s", "tables": ["a"], "steps": bad})})


def _index() -> LocalityIndex:
    row_bytes = 576
    cap = 16 * 2**30 // row_bytes
    ix = LocalityIndex()
    warm = encode_cache({"a": 5_000_000, "b": 10}, {"a": 10**8, "b": 10**8},
                        5_000_010 * row_bytes, cap * row_bytes, 0.0, {})
    cold = encode_cache({"b": 10}, {"b": 10**8}, 10 * row_bytes, cap * row_bytes, 0.0, {})
    ix.observe_node("warm", {ANN_EMBEDDING_CACHE: warm}, {})
    ix.observe_node("cold", {ANN_EMBEDDING_CACHE: cold}, {})
    return ix


def test_the_term_scores_the_warm_up_a_warm_cache_saves_over_the_declared_steps():
    ix = _index()
    slots = ix.slots_of(["warm", "cold"])

    def served(steps):
        spec = EmbeddingSpec("s", ("a",), {"a": 10**8}, ids_per_step={"a": 150_000},
                             steps=steps)
        return ix.expected(spec, slots)[0]

    short, long_ = served(200), served(10**6)
    assert short[0] > short[1] + 0.15  # a short job gains the warm rows it would refill
    assert 0 <= long_[0] - long_[1] < 0.02  # a long one refills them in a sliver of its run
    assert short[1] < long_[1]  # the cold node's mean share grows with the run
    assert long_[0] == pytest.approx(long_[1], abs=0.02)
    # Without steps, the old rule (midpoint of now and warm) still scores.
    spec = EmbeddingSpec("s", ("a",), {"a": 10**8}, ids_per_step={"a": 150_000})
    before = ix.expected(spec, slots)[0]
    assert before[0] > before[1]


def test_one_table_lookups_are_the_vectorised_ones():
    curve = warm_curve(3e8, 1.05, 120_000.0)
    rng = np.random.default_rng(1)
    for _ in range(50):
        base, room = sorted(rng.uniform(0, 4e7, 2))
        exposure, rate = rng.uniform(0, 1e11), rng.uniform(0, 3e5)
        steps = float(rng.integers(0, 10**6))
        assert curve.held_at(base, exposure, room) == pytest.approx(
            float(curve.held(base, exposure, room)), rel=1e-9)
        assert curve.mean_hit_at(base, exposure, room, rate, steps) == pytest.approx(
            float(curve.mean_hit(base, exposure, room, rate, steps)), rel=1e-6, abs=1e-9)


def test_one_table_lookups_are_the_vectorised_ones_at_the_edges():
    """Below one row, beyond the table, base above room, no exposure yet, past the grid's top
    exposure, and a job that reads nothing (no steps or no ids): each branch of both paths."""
    curve = warm_curve(3e8, 1.05, 120_000.0)
    top = float(curve.e[-1])
    for base, room, exposure, rate, steps in itertools.product(
            [0.0, 0.5, 3.7, 2e7, 5e8], [0.0, 0.5, 10.0, 2e7, 9e8], [0.0, 0.3, 5e3, top, 2 * top],
            [0.0, 1e5], [0.0, 1e6]):
        assert curve.held_at(base, exposure, room) == pytest.approx(
            float(curve.held(base, exposure, room)), rel=1e-9, abs=1e-9)
        assert curve.mean_hit_at(base, exposure, room, rate, steps) == pytest.approx(
            float(curve.mean_hit(base, exposure, room, rate, steps)), rel=1e-6, abs=1e-9)
