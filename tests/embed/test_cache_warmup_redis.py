"""The cache warm-up model (``extender.placement.cache_warmup``) against the real node cache: a
redis-server with the DaemonSet's LFU settings and a ``maxmemory``, filled on miss by the
client's read-through code (``embed.cache.ReadThrough``, doorkeeper included), fed Zipf ids
step by step. The hit ratio of each step's distinct rows follows the model's curve for the
exposure (ids read so far) and the room (rows the memory holds)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.embed.warmup import load_table, replay_warmup
from embed.store import EmbeddingStore
from extender.placement.cache_warmup import warm_curve

pytestmark = [pytest.mark.redis, pytest.mark.slow]

ROWS, ALPHA, IDS_PER_STEP, STEPS = 100_000, 1.05, 2048, 240


def replay(store: EmbeddingStore, room: int | None) -> tuple[np.ndarray, np.ndarray]:
    return replay_warmup(store, ROWS, room, IDS_PER_STEP, STEPS, ALPHA)


@pytest.fixture
def store(redis_url):
    s = EmbeddingStore.from_url(redis_url)
    load_table(s, ROWS)
    return s


def test_warm_up_follows_the_model(store):
    """Unbounded (nothing evicted): the fill-on-miss warm-up is the model's, step by step."""
    measured, held = replay(store, None)
    curve = warm_curve(ROWS, ALPHA, IDS_PER_STEP)
    exposure = np.arange(STEPS) * IDS_PER_STEP  # ids read before each step
    model = curve.hit(0.0, exposure, ROWS)
    # Within a few points a step (one step's hit ratio is a sample of ~1,000 rows), and the
    # same warm-up: early, middle and late thirds on average.
    assert np.abs(measured - model).mean() < 0.03, (measured[::40], model[::40])
    for part in np.array_split(np.arange(STEPS), 3):
        assert measured[part].mean() == pytest.approx(model[part].mean(), abs=0.03)
    # The rows held are the distinct rows read.
    assert held == pytest.approx(curve.held(0.0, exposure + IDS_PER_STEP, ROWS), rel=0.03)


@pytest.mark.parametrize("room", [5_000, 20_000])
def test_bounded_cache_fills_then_settles_below_ideal_lfu(store, room):
    """Bounded by maxmemory: the cache fills as the model says until the room is full; then
    Redis' sampled LFU (with the client's doorkeeper) settles a little below the ideal LFU
    the model assumes (the top ``room`` rows held): 85-100 % of its hit ratio here (the
    microbenchmark in bench/embed measures it against Belady's optimum)."""
    measured, held = replay(store, room)
    curve = warm_curve(ROWS, ALPHA, IDS_PER_STEP)
    cap = int(held[-1])  # the rows the memory actually holds
    assert 0.8 * room <= cap <= 1.05 * room
    model = curve.hit(0.0, np.arange(STEPS) * IDS_PER_STEP, cap)
    filling = held < 0.9 * cap
    assert filling[:2].all()
    assert np.abs(measured[filling] - model[filling]).mean() < 0.05
    late = np.arange(STEPS)[-STEPS // 3:]
    ratio = measured[late].mean() / model[late].mean()
    assert 0.85 <= ratio <= 1.02, ratio
