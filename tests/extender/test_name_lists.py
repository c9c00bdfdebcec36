"""NodeNames lists decoded once and handed out again while their bytes repeat answer exactly
as lists decoded afresh: repeated, reordered, duplicated and unknown names, nodes added and
removed between calls (the rows kept with a list belong to one node index only)."""

from __future__ import annotations

import json
import random

import pytest
from builders import gpu_node, mixed_inventory, pod, random_bind_or_release

from extender import protocol
from extender.errors import InvalidRequest
from extender.interference import default_matrix
from extender.inventory import annotation_value
from extender.ledger.memory import MemoryLedger
from extender.placement import make_policy
from extender.placement.fit import candidate_rows
from extender.service import Scheduler

SHAPES = [dict(mem=4000, milli=200, job_class="cnn"), dict(mem=12000, milli=500),
          dict(gpus=1), dict(gpus=2), dict(mem=70000, milli=200), dict(gpus=4)]
# "a0" and "bb" sort between the first nodes: adding or removing one moves the later rows.
EXTRA = {"a0": gpu_node("a0", 2), "bb": gpu_node("bb", 8, memory_mib=16384)}


def cluster(verdicts: bool) -> Scheduler:
    s = Scheduler(inventory=mixed_inventory(), ledger=MemoryLedger(),
                  matrix=default_matrix(), policy=make_policy("sparse"))
    if not verdicts:
        s.node_verdicts.fits = lambda *a, **k: None  # fit's own name -> row lookup
    return s


def body(p: dict, names: list[str], field: str = "NodeNames") -> bytes:
    return json.dumps({"Pod": p, "Nodes": None, field: names}).encode()


def name_pool(rng: random.Random) -> list[list[str]]:
    """A few lists to send again and again: reorderings, duplicates, unknown names."""
    every = ["a", "a0", "b", "bb", "c", "d", "e"]
    pool = [["a", "b", "c", "d", "e"], ["e", "d", "c", "b", "a"], every, ["b", "bb", "a0"]]
    pool.append(["a", "b", "a", "c"])  # a duplicate: dropped, the first kept
    pool.append(["c", "zz", "a"])  # an unknown node
    pool += [rng.sample(every, rng.randint(1, len(every))) for _ in range(4)]
    return pool


@pytest.mark.parametrize("verdicts", [True, False])
async def test_answers_equal_the_uncached_path_over_repeats_and_node_changes(
        verdicts: bool) -> None:
    rng = random.Random(11)
    pool = name_pool(rng)
    lists = protocol.NameLists(size=3)  # smaller than the pool: lists are evicted too
    cached, plain = cluster(verdicts), cluster(verdicts)
    bound: list[dict] = []
    present = set()
    stale_rows = 0
    names: list[str] = []
    for step in range(150):
        if rng.random() < 0.12:  # a node joins or leaves: a new state and node index
            name = rng.choice(sorted(EXTRA))
            for s in (cached, plain):
                if name in present:
                    s.remove_node(name)
                else:
                    s.update_node(name, {"sparse.io/gpu-inventory":
                                         annotation_value(EXTRA[name].gpus)})
            present ^= {name}
        p = pod(**rng.choice(SHAPES))
        names = names if step and rng.random() < 0.5 else rng.choice(pool)  # often again
        field = rng.choice(["NodeNames", "NodeNames", "nodenames"])
        raw = body(p, names, field)
        a = protocol.decode_extender_args(raw, lists=lists)
        b = protocol.decode_extender_args(raw)
        assert a.node_names == b.node_names == list(dict.fromkeys(names)), step
        index = cached.state.node_index
        memo = getattr(a.node_names, "rows", None)
        stale_rows += memo is not None and memo[0] is not index
        if all(n in index for n in a.node_names):  # the rows are those of today's index
            assert candidate_rows(index, a.node_names).tolist() == [
                index[n] for n in a.node_names], step
        fa, fb = await cached.filter(a), await plain.filter(b)
        assert protocol.encode(fa) == protocol.encode(fb), step
        if fa.NodeNames:  # prioritize over filter's answer, itself a repeated list
            answer = body(p, fa.NodeNames)
            pa = await cached.prioritize(protocol.decode_extender_args(answer, lists=lists))
            pb = await plain.prioritize(protocol.decode_extender_args(answer))
            assert protocol.encode(pa) == protocol.encode(pb), step
        await random_bind_or_release(rng, (cached, plain), p, fa.NodeNames, bound)
    assert lists.hits > 50 and lists.misses > 10  # both paths ran
    assert stale_rows > 0  # a list came back after its index was replaced


def test_a_hit_needs_the_same_bytes_and_bad_lists_stay_errors() -> None:
    lists = protocol.NameLists(size=2)
    p = pod(gpus=1)
    first = protocol.decode_extender_args(body(p, ["a", "b"]), lists=lists)
    again = protocol.decode_extender_args(body(p, ["a", "b"]), lists=lists)
    assert again.node_names is first.node_names and lists.hits == 1
    spaced = json.dumps({"Pod": p, "NodeNames": ["a", "b"]}, indent=1).encode()
    assert protocol.decode_extender_args(spaced, lists=lists).node_names == ["a", "b"]
    assert lists.hits == 1  # other bytes, the same names: decoded again
    assert protocol.decode_extender_args(body(p, ["b", "a"]), lists=lists).node_names == [
        "b", "a"]
    for bad in ([""], ["a", 3], "a", ["x" * 254]):
        for _ in range(2):  # an invalid list is never kept
            with pytest.raises(InvalidRequest):
                protocol.decode_extender_args(body(p, bad), lists=lists)  # type: ignore[arg-type]
    null = json.dumps({"Pod": p, "NodeNames": None, "nodeNames": ["c"]}).encode()
    assert protocol.decode_extender_args(null, lists=lists).node_names == ["c"]
    with pytest.raises(InvalidRequest, match="neither NodeNames nor Nodes"):
        protocol.decode_extender_args(json.dumps({"Pod": p, "NodeNames": None}).encode(),
                                      lists=lists)


def test_shared_rows_cannot_be_changed_in_place() -> None:
    names = protocol.NameList(["b", "a"])
    index = {"a": 0, "b": 1}
    rows = candidate_rows(index, names)
    assert candidate_rows(index, names) is rows and rows.tolist() == [1, 0]
    with pytest.raises(ValueError):
        rows[0] = 5
    assert candidate_rows({"a": 1, "b": 0}, names).tolist() == [0, 1]  # another index
