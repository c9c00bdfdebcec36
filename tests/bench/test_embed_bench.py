"""The cache benchmarks' pure parts: Belady's MIN against brute force, Zipf ids, and the
locality replay's model (hit ratio of a partially cached Zipf table)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.embed.belady import belady_hits, next_use
from bench.embed.zipf import ZipfIds
from bench.sim.locality import fetched_hit, step_rows, zipf_mass
from extender.placement.cache_warmup import warm_curve


def brute_min(trace: list[int], capacity: int) -> int:
    cache: set[int] = set()
    hits = 0
    for i, key in enumerate(trace):
        if key in cache:
            hits += 1
            continue
        if len(cache) < capacity:
            cache.add(key)
            continue

        def nxt(x: int, i: int = i) -> int:
            return next((j for j in range(i + 1, len(trace)) if trace[j] == x), 10**9)

        far = max(cache | {key}, key=nxt)
        if far != key:
            cache.remove(far)
            cache.add(key)
    return hits


def test_next_use_and_belady_match_brute_force():
    assert next_use(np.array([5, 1, 5, 5, 1])).tolist() == [2, 4, 3, 5, 5]
    rng = np.random.default_rng(0)
    for _ in range(100):
        trace = rng.integers(0, 8, 40)
        cap = int(rng.integers(1, 6))
        assert belady_hits(trace, cap).sum() == brute_min(trace.tolist(), cap)


def test_zipf_ids_are_skewed_and_spread():
    z = ZipfIds(100_000, 1.05, seed=1)
    ids = z.sample(200_000, np.random.default_rng(0))
    assert ids.min() >= 0 and ids.max() < 100_000
    _, counts = np.unique(ids, return_counts=True)
    top = np.sort(counts)[::-1]
    assert top[:1000].sum() / len(ids) == pytest.approx(z.top_share(1000), abs=0.02)
    assert z.ids_of(np.arange(10)).tolist() != list(range(10))  # hot rows not clustered


def test_zipf_mass_and_warmup():
    n = 1_000_000
    exact = np.cumsum(np.arange(1, n + 1, dtype=float) ** -1.05)
    assert zipf_mass(10_000, n, 1.05) == pytest.approx(exact[9999] / exact[-1], abs=0.005)
    assert zipf_mass(0, n, 1.05) == 0 and zipf_mass(2 * n, n, 1.05) == 1
    curve = warm_curve(n, 1.05, step_rows(n, 1.05, 50_000)[0])
    draws = curve.draws
    warm = curve.mean_hit(200_000, 0.0, 200_000, draws, 1000)
    cold = curve.mean_hit(0, 0.0, 200_000, draws, 1000)
    assert warm == pytest.approx(fetched_hit(200_000, n, 1.05, 50_000), rel=2e-3)
    assert 0 < cold < warm


def test_hits_count_the_rows_a_step_fetches_not_its_draws():
    # A step's ids are deduplicated before the fetch: a hot row drawn often is fetched once, so
    # the cached top rows serve less of the fetched rows than of the draws.
    n, alpha, unique = 1_000_000, 1.05, 50_000
    draws, _, _ = step_rows(n, alpha, unique)
    p = np.arange(1, n + 1, dtype=float) ** -alpha
    p /= p.sum()
    present = -np.expm1(draws * np.log1p(-p))  # P(row k among the step's ids)
    assert present.sum() == pytest.approx(unique, rel=0.01)
    for c in (10_000, 100_000, 500_000):
        exact = present[:c].sum() / present.sum()
        assert fetched_hit(c, n, alpha, unique) == pytest.approx(exact, abs=0.01)
        assert 1 - fetched_hit(c, n, alpha, unique) > 2 * (1 - zipf_mass(c, n, alpha))
    assert fetched_hit(0, n, alpha, unique) == 0
    assert fetched_hit(n, n, alpha, unique) == pytest.approx(1.0)


def test_zipf_ranks_invert_the_id_bijection():
    z = ZipfIds(10_007, 1.05, seed=3)
    ranks = np.arange(10_007)
    assert (z.ranks_of(z.ids_of(ranks)) == ranks).all()


@pytest.mark.redis
def test_redis_replay_with_the_clients_admission_is_bounded_by_belady():
    from bench.embed.hitratio import make_trace, replay

    trace, bounds, _ = make_trace(100_000, 60, 1024, 1.05, seed=1)
    cap = 5000
    opt = belady_hits(trace, cap).mean()
    got = replay(trace, bounds, cap, "allkeys-lfu", 100_000)
    assert 0 < got["hits"] / len(trace) <= opt
    assert got["held"] <= cap * 1.1
