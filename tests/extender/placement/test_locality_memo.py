"""The locality bonus kept per pod shape and node equals a fresh computation, whatever the
caches publish between two calls."""

from __future__ import annotations

import numpy as np
import pytest

from extender.annotations import ANN_EMBEDDING_CACHE
from extender.placement.locality import (
    EmbeddingSpec,
    LocalityIndex,
    LocalityWeights,
    encode_cache,
)
from extender.placement.step_time import NetworkModel

ROW_BYTES = 320
TABLES = [f"t{i:02d}" for i in range(12)]
SIZES = {t: 10_000 * (i + 1) ** 2 for i, t in enumerate(TABLES)}


def readers_of(rng: np.random.Generator, tables: list[str]) -> tuple:
    """What runs on a node: its cache's size, the tables used there, readers and their ids."""
    cap_rows = int(rng.integers(20_000, 400_000))
    used = rng.choice(tables, int(rng.integers(0, 5)), replace=False).tolist()
    readers = {t: int(rng.integers(0, 4)) for t in used}
    ids = {t: r * int(rng.integers(1_000, 50_000)) for t, r in readers.items() if r}
    return cap_rows, used, readers, ids if rng.random() < 0.7 else {}


def annotation(rng: np.random.Generator, running: tuple | None) -> dict[str, str] | None:
    """A cache publication of the rows held for what runs there (None: nothing published)."""
    if running is None:
        return None
    cap_rows, used, readers, ids = running
    # Mostly within the table's share of the room, so that the rows held count.
    rows = {t: int(rng.integers(1, min(SIZES[t], cap_rows // (2 * len(used)) + 2)))
            for t in used}
    # Mostly with the pods reading there (a pod of several tables counts once), as the
    # publisher counts them; else as an older publisher, without.
    pods = max(readers.values(), default=0) + int(rng.integers(0, 2)) \
        if rng.random() < 0.7 else None
    ann = encode_cache(rows, {t: SIZES[t] for t in used}, sum(rows.values()) * ROW_BYTES,
                       cap_rows * ROW_BYTES, 0.0, readers, ids, pods=pods)
    return {ANN_EMBEDDING_CACHE: ann}


def labels(k: int) -> dict[str, str]:
    return {"topology.kubernetes.io/zone": f"z{k % 2}", "topology.sparse.io/rack": f"r{k % 5}"}


def specs(rng: np.random.Generator) -> list[EmbeddingSpec]:
    out = []
    for k in (1, 2, 3):
        ts = tuple(sorted(rng.choice(TABLES, k, replace=False).tolist()))
        ids = {t: int(rng.integers(500, 20_000)) for t in ts}
        out += [EmbeddingSpec("store", ts),
                EmbeddingSpec("store", ts, {t: SIZES[t] // 3 for t in ts}, ids_per_step=ids),
                EmbeddingSpec("store", ts, None, ids_per_step=ids, steps=50_000,
                              step_compute_ms=float(rng.uniform(1, 40)))]
    return out


@pytest.mark.parametrize("store_gbps", [0.0, 0.5])
@pytest.mark.parametrize("score", ["time", "share"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kept_bonus_equals_a_fresh_computation(score: str, seed: int, store_gbps: float
                                               ) -> None:
    """``store_gbps``: with the store's egress known, its readers on every node weigh on
    every node's bonus (0.5 Gb/s: the store binds in most rounds)."""
    rng = np.random.default_rng(seed)
    names = [f"n{i:02d}" for i in range(40)]
    weights = LocalityWeights(score=score, network=NetworkModel(store_gbps=store_gbps))
    ix = LocalityIndex(weights)
    history: list[tuple[str, ...]] = []

    def observe(name: str, ann: dict[str, str] | None, lab: dict[str, str]) -> None:
        ix.observe_node(name, ann, lab)
        history.append(("node", name, ann, lab))

    ix.set_store("store", set(names[:3]))
    history.append(("store", frozenset(names[:3])))
    first = TABLES[:6]  # later rounds bring tables no cache has published yet
    running = {n: readers_of(rng, first) if rng.random() > 0.1 else None for n in names}
    for k, n in enumerate(names[:30]):
        observe(n, annotation(rng, running[n]), labels(k))
    shapes = specs(rng)
    for round_ in range(8):
        for spec in shapes:
            # Mostly the same candidates (then most nodes' figures are kept), now and then
            # another set (other readers' ids per step: all recomputed).
            cand = names if rng.random() < 0.7 else sorted(
                rng.choice(names, int(rng.integers(1, len(names))), replace=False).tolist())
            kept = ix.bonus(spec, cand)
            fresh = LocalityIndex(weights)
            for h in history:
                if h[0] == "store":
                    fresh.set_store("store", set(h[1]))
                elif h[0] == "forget":
                    fresh.forget_node(h[1])
                else:
                    fresh.observe_node(*h[1:])
            # The computation itself, nothing kept, on an index rebuilt from the same events.
            recomputed = fresh.fresh_bonus(spec, fresh.slots_of(cand))
            assert np.array_equal(kept, recomputed), (round_, spec)
            assert np.array_equal(kept, ix.bonus(spec, cand))  # and again, all kept
        # Between rounds: some caches republish, mostly rows only (a cache warming), now and
        # then for other pods (new tables too); a node comes or goes; the store may move.
        for n in rng.choice(names, int(rng.integers(1, 8)), replace=False).tolist():
            if rng.random() < 0.05:
                ix.forget_node(n)
                history.append(("forget", n))
                continue
            if rng.random() < 0.15 or running[n] is None:
                running[n] = readers_of(rng, TABLES)
            observe(n, annotation(rng, running[n]), labels(names.index(n)))
        if rng.random() < 0.2:
            shards = set(rng.choice(names, 3, replace=False).tolist())
            ix.set_store("store", shards)
            history.append(("store", frozenset(shards)))


def test_a_republished_cache_moves_its_node_only() -> None:
    ix = LocalityIndex()
    ix.set_store("store", {"a"})
    rows = {"t": 1_000}
    for n in ("a", "b", "c"):
        ix.observe_node(n, {ANN_EMBEDDING_CACHE: encode_cache(
            rows, {"t": 100_000}, 1_000 * ROW_BYTES, 50_000 * ROW_BYTES, 0.0, {"t": 1},
            {"t": 5_000})}, labels(0))
    spec = EmbeddingSpec("store", ("t",), ids_per_step={"t": 5_000}, steps=10_000,
                         step_compute_ms=5.0)
    before = ix.bonus(spec, ["a", "b", "c"])
    assert before[0] == before[1] == before[2]
    ix.observe_node("b", {ANN_EMBEDDING_CACHE: encode_cache(
        {"t": 40_000}, {"t": 100_000}, 40_000 * ROW_BYTES, 50_000 * ROW_BYTES, 0.0, {"t": 1},
        {"t": 5_000})}, labels(0))
    after = ix.bonus(spec, ["a", "b", "c"])
    assert after[1] > before[1]
    assert after[0] == before[0] and after[2] == before[2]
