"""The cost cache answers exactly what the policy computes, as bookings come and go."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

import numpy as np
import pytest
from builders import pod, random_book_or_release

from bench.latency.cluster import half_occupancy, synthetic_inventory
from extender.demand import PodDemand, pod_demand
from extender.interference import InterferenceMatrix, default_matrix
from extender.interference.pairmodel import default_pair_model
from extender.interference.profiles import ProfileBook
from extender.placement import ClusterState, assign, fit, make_policy, node_costs, reservation_for
from extender.placement.policies.common import HostView
from extender.placement.policies.fgd import TypicalTasks
from extender.placement.policies.sparse import Sparse
from extender.placement.policies.sparse_mix import DemandMix
from extender.protocol import pod_from_dict
from extender.verbs.costcache import CachedPolicy, CostCache


@pytest.mark.parametrize("policy_name", ["sparse", "fgd", "best-fit"])
def test_cached_costs_equal_the_policy_through_bookings_and_releases(policy_name: str) -> None:
    rng = random.Random(7)
    inv = synthetic_inventory(40, 4)
    state = ClusterState.build(inv, default_matrix(), half_occupancy(inv, 0.3))
    policy = make_policy(policy_name)
    cache = CostCache()
    cached = CachedPolicy(policy, cache)
    names = sorted(inv.nodes)
    shapes = [dict(mem=2048, milli=200, job_class="cnn"), dict(mem=4096, milli=300),
              dict(gpus=1), dict(gpus=2), dict(mem=1024, milli=100, job_class="recommendation")]
    booked: list[str] = []
    for step in range(120):
        demand = pod_demand(pod_from_dict(pod(**rng.choice(shapes))))
        candidates = rng.sample(names, rng.randint(1, len(names)))
        view = state
        if step % 7 == 0:  # own_excluded hands in copies without the pod's own booking
            view = state.copy()
            if booked:
                view.unapply(booked[-1])
        result = fit(view, demand, candidates)
        expected = node_costs(view, demand, result, policy)
        # Equal up to the last bit of a dot product: the interference term's matrix product
        # rounds by the length of the block it is given (so does the policy's own answer,
        # which varies with the candidate list in the same way).
        np.testing.assert_allclose(node_costs(view, demand, result, cached), expected,
                                   rtol=1e-12, atol=1e-12)
        fitting = [result.names[i] for i in np.flatnonzero(result.fits)]
        random_book_or_release(rng, state, demand, fitting, policy, booked)
    if policy_name in ("sparse", "fgd"):
        assert cache.reused_gpus > 4 * cache.computed_nodes  # it did save work


def test_a_new_inventory_starts_afresh() -> None:
    inv = synthetic_inventory(10, 2)
    policy = make_policy("sparse")
    cache = CostCache()
    demand = pod_demand(pod_from_dict(pod(mem=2048, milli=200)))
    for occupancy in (0.2, 0.6):
        state = ClusterState.build(inv, default_matrix(), half_occupancy(inv, occupancy))
        result = fit(state, demand, sorted(inv.nodes))
        np.testing.assert_allclose(
            node_costs(state, demand, result, CachedPolicy(policy, cache)),
            node_costs(state, demand, result, policy), rtol=1e-12, atol=1e-12)


# --- inputs that change without any node's bookings changing --------------------------------

def _fresh(policy, state, demand, candidates):
    """What the policy itself answers now (its own ``costs``, no cache)."""
    return node_costs(state, demand, fit(state, demand, candidates), policy)


def _cached(policy, cache, state, demand, candidates):
    return node_costs(state, demand, fit(state, demand, candidates), CachedPolicy(policy, cache))


def _share(uid: str, milli: int, job_class: str = "cnn"):
    return pod_demand(pod_from_dict(pod(mem=2048, milli=milli, job_class=job_class, uid=uid)))


def _cluster():
    inv = synthetic_inventory(30, 4)
    return inv, ClusterState.build(inv, default_matrix(), half_occupancy(inv, 0.4))


def test_a_relearned_mix_invalidates_the_costs_of_every_shape() -> None:
    inv, state = _cluster()
    names = sorted(inv.nodes)
    # A mix that forgets fast and is re-read with every pod: the fragmentation term moves.
    policy = Sparse(_mix=DemandMix(half_life=2.0, refresh=1))
    cache = CostCache()
    first = _cached(policy, cache, state, _share("a-0", 300), names)
    for i in range(6):  # other shapes in between (own cache entries), no booking changes
        _cached(policy, cache, state, _share(f"b-{i}", 900, "recommendation"), names)
    again = _share("a-1", 300)  # the first shape again: its entry is still stamped current
    got = _cached(policy, cache, state, again, names)
    np.testing.assert_allclose(got, _fresh(policy, state, again, names), rtol=1e-12, atol=1e-12)
    assert not np.allclose(got, first)  # the mix did change the costs: a stale hit would show


def test_set_workload_invalidates_the_cache() -> None:
    inv, state = _cluster()
    names = sorted(inv.nodes)
    for policy in (make_policy("sparse"), make_policy("fgd")):
        cache = CostCache()
        first = _cached(policy, cache, state, _share("c-0", 500), names)
        policy.set_workload(TypicalTasks.of([(0, 1000, 2, None, 0.5),
                                             (0, 700, 1, None, 0.5)]))
        again = _share("c-1", 500)
        got = _cached(policy, cache, state, again, names)
        np.testing.assert_allclose(got, _fresh(policy, state, again, names),
                                   rtol=1e-12, atol=1e-12)
        assert not np.allclose(got, first)


def test_a_new_interference_matrix_invalidates_the_cache() -> None:
    inv, state = _cluster()
    names = sorted(inv.nodes)
    policy = Sparse(adaptive=False)
    cache = CostCache()
    first = _cached(policy, cache, state, _share("d-0", 400), names)
    prior = state.matrix  # live pair estimates replace the matrix object (LivePairs)
    state.matrix = InterferenceMatrix(prior.classes, prior.norm ** 4)
    again = _share("d-1", 400)
    got = _cached(policy, cache, state, again, names)
    np.testing.assert_allclose(got, _fresh(policy, state, again, names), rtol=1e-12, atol=1e-12)
    assert not np.allclose(got, first)


def test_a_pod_with_a_known_profile_bypasses_the_cache() -> None:
    inv, state = _cluster()
    names = sorted(inv.nodes)
    book = state.profiles = ProfileBook(default_pair_model())
    policy = Sparse(adaptive=False)
    cache = CostCache()
    _cached(policy, cache, state, _share("e-0", 400), names)  # no profile: cached
    assert cache.bypassed == 0
    # Residents gain profiles (no booking changes); a pod with its own profile is priced by the
    # learned pair model, which reads them: never from the cache.
    for uid in list(state.reservations)[:20]:
        book.add(uid, (80.0, 30.0, 4000.0))
    mine = _share("e-1", 400)
    book.add(mine.uid, (60.0, 20.0, 3000.0))
    got = _cached(policy, cache, state, mine, names)
    np.testing.assert_allclose(got, _fresh(policy, state, mine, names), rtol=1e-12, atol=1e-12)
    assert cache.bypassed == 1


def test_the_mix_sees_every_pod_when_the_cache_answers() -> None:
    inv, state = _cluster()
    names = sorted(inv.nodes)
    plain, through_cache = Sparse(), Sparse()
    cache = CostCache()
    for i in range(40):
        d = _share(f"f-{i}", 300 if i % 3 else 700)
        _fresh(plain, state, d, names)
        _cached(through_cache, cache, state, d, names)
    assert cache.reused_gpus > 0
    assert plain._mix.popularity() == through_cache._mix.popularity()


async def test_scheduler_filters_price_with_the_current_mix_and_matrix() -> None:
    """Two filters of one shape, the mix and then the matrix changed in between: the costs
    filter keeps for prioritize are what the policy computes now."""
    from builders import gpu_node, inventory

    from extender.ledger.memory import MemoryLedger
    from extender.protocol import decode_extender_args, encode
    from extender.service import Scheduler

    policy = Sparse()
    s = Scheduler(inventory=inventory(*(gpu_node(f"gpu-{i}", 4) for i in range(6))),
                  ledger=MemoryLedger(), matrix=default_matrix(), policy=policy)
    names = [f"gpu-{i}" for i in range(6)]

    async def filtered(uid: str) -> np.ndarray:
        body = pod(mem=2048, milli=300, job_class="cnn", uid=uid)
        args = decode_extender_args(encode({"Pod": body, "NodeNames": names}))
        await s.filter(args)
        entry = s.cycle_costs.take(uid, s.clock())
        passed, costs = entry.passed, entry.costs
        state = s.own_excluded(await s.view(), uid)
        demand = s.pending_demand(uid)
        expected = _fresh(policy, state, demand, passed)
        np.testing.assert_allclose(costs, expected, rtol=1e-12, atol=1e-12)
        return costs

    cache = s.cost_cache
    await filtered("g-0")
    computed = cache.computed_nodes
    policy.set_workload(TypicalTasks.of([(0, 1000, 4, None, 1.0)]))
    await filtered("g-1")
    # the fragmentation and price terms (both read the mix), on every node
    assert cache.computed_nodes == computed + 12
    prior = s.matrix
    s.matrix = s.state.matrix = InterferenceMatrix(prior.classes, prior.norm ** 4)
    await filtered("g-2")
    assert cache.computed_nodes == computed + 18  # the interference term, on every node
    await filtered("g-3")
    assert cache.computed_nodes == computed + 18  # nothing changed since: all reused


def test_new_popularities_over_the_same_tasks_reuse_the_fragmentation_per_task() -> None:
    """The learned mix is re-read every few hundred pods; when only the popularities move,
    the cached per-task fragmentation stays valid and is only re-weighted."""
    inv, state = _cluster()
    names = sorted(inv.nodes)
    policy = Sparse(adaptive=False)
    cache = CostCache()
    rows = [(0, 1000, 1, None, 0.5), (0, 500, 1, None, 0.3), (0, 250, 1, None, 0.2)]
    policy.set_workload(TypicalTasks.of(rows))
    first = _cached(policy, cache, state, _share("h-0", 300), names)
    computed = cache.computed_nodes
    moved = [(*r[:4], w) for r, w in zip(rows, (0.1, 0.1, 0.8), strict=True)]
    policy.set_workload(TypicalTasks.of(moved))
    again = _share("h-1", 300)
    got = _cached(policy, cache, state, again, names)
    np.testing.assert_allclose(got, _fresh(policy, state, again, names), rtol=1e-12, atol=1e-12)
    assert not np.allclose(got, first)  # the popularities do change the costs
    # ... and the fragmentation was not priced again: only the price term, whose value table
    # the popularities make, on every node
    assert cache.computed_nodes == computed + len(names)
    policy.set_workload(TypicalTasks.of(rows[:2]))  # a task gone: its column left out
    got = _cached(policy, cache, state, _share("h-2", 300), names)
    np.testing.assert_allclose(got, _fresh(policy, state, _share("h-2", 300), names),
                               rtol=1e-12, atol=1e-12)
    assert cache.computed_nodes == computed + 2 * len(names)  # only the prices again
    policy.set_workload(TypicalTasks.of([(0, 750, 1, None, 0.4), *rows[:2]]))  # a new task
    got = _cached(policy, cache, state, _share("h-3", 300), names)
    np.testing.assert_allclose(got, _fresh(policy, state, _share("h-3", 300), names),
                               rtol=1e-12, atol=1e-12)
    # its column priced on every node (the others carried), and the prices
    assert cache.computed_nodes == computed + 4 * len(names)
    policy.set_workload(TypicalTasks.of(rows, mem=[1, 2, 3]))  # another measure: afresh
    got = _cached(policy, cache, state, _share("h-4", 300), names)
    np.testing.assert_allclose(got, _fresh(policy, state, _share("h-4", 300), names),
                               rtol=1e-12, atol=1e-12)
    assert cache.computed_nodes == computed + 6 * len(names)


def test_every_node_in_order_reads_the_cache_without_copies_and_stays_exact() -> None:
    """Candidates that are the whole inventory in order take the path without gathers (the
    cached arrays are read as they are): through bookings, releases and a mix re-read with
    every pod the costs stay the policy's, and a caller writing into its answer leaves the
    cache intact."""
    rng = random.Random(11)
    inv, state = _cluster()
    in_order = list(state.node_names)
    policy = Sparse(_mix=DemandMix(half_life=4.0, refresh=3))
    cache = CostCache()
    booked: list[str] = []
    for step in range(40):
        demand = _share(f"e-{step}", rng.choice([200, 300, 700]),
                        rng.choice(["cnn", "recommendation"]))
        got = _cached(policy, cache, state, demand, in_order)
        np.testing.assert_allclose(got, _fresh(policy, state, demand, in_order),
                                   rtol=1e-12, atol=1e-12)
        masks = fit(state, demand, in_order).masks
        assert masks.every
        share, _ = CachedPolicy(policy, cache, note=False).costs(state, demand, masks)
        share += 1e6  # the caller's own array: the next answer must not see it
        np.testing.assert_allclose(_cached(policy, cache, state, demand, in_order), got,
                                   rtol=1e-12, atol=1e-12)
        if booked and rng.random() < 0.3:
            state.unapply(booked.pop(rng.randrange(len(booked))))
        else:
            choice = assign(state, demand, rng.choice(in_order), policy)
            if choice is not None:
                r = reservation_for(demand, choice, state, 0.0, None)
                state.apply(r)
                booked.append(r.pod_uid)
    assert cache.reused_gpus > cache.computed_nodes


def _mix_steps(rng: random.Random, state: ClusterState, names: list[str], steps: int,
               reread: Callable[[], TypicalTasks], demand: Callable[[int], PodDemand]
               ) -> list[np.ndarray]:
    """Costs through the cache, the mix re-read (``reread``) every third step, between random
    bookings and releases; the nodes the cache priced last."""
    policy = Sparse(adaptive=False)
    cache = CostCache()
    booked: list[str] = []
    out = []
    for step in range(steps):
        if step % 3 == 0:
            policy.set_workload(reread())
        d = demand(step)
        candidates = rng.sample(names, rng.randint(5, len(names)))
        out.append(_cached(policy, cache, state, d, candidates))
        result = fit(state, d, candidates)
        fitting = [result.names[i] for i in np.flatnonzero(result.fits)]
        random_book_or_release(rng, state, d, fitting, policy, booked)
    out.append(np.array([cache.computed_nodes]))
    return out


def _reordered_mix_steps(seed: int) -> list[np.ndarray]:
    """Costs through the cache while the mix is re-read in another order (and with other
    popularities) between random bookings and releases."""
    rng = random.Random(seed)
    inv, state = _cluster()
    rows = [(0, 1000, 1, None), (0, 500, 1, None), (0, 250, 1, None), (0, 700, 2, None)]

    def reread() -> TypicalTasks:  # the same tasks, ranked anew
        order = rng.sample(rows, len(rows))
        return TypicalTasks.of([(*r, rng.random() + 0.1) for r in order])

    return _mix_steps(rng, state, sorted(inv.nodes), 30, reread, lambda step: _share(
        f"r-{step}", rng.choice([200, 300, 700]), rng.choice(["cnn", "recommendation"])))


def test_a_mix_reread_that_reorders_its_tasks_carries_the_fragmentation_columns(
        monkeypatch) -> None:
    """Per-task fragmentation made with the old task order, its columns reordered, equals
    the values made afresh with the new order bit for bit (and saves pricing them)."""
    carried = _reordered_mix_steps(5)
    monkeypatch.setattr("extender.placement.policies.sparse._carry_columns",
                        lambda old, new: None)
    afresh = _reordered_mix_steps(5)
    for got, expected in zip(carried[:-1], afresh[:-1], strict=True):
        np.testing.assert_array_equal(got, expected)
    assert carried[-1][0] < afresh[-1][0]  # fewer nodes priced with the carry


def _changing_mix_steps(seed: int) -> list[np.ndarray]:
    """Costs through the cache while the mix is re-read with tasks coming, going and moving
    (and other popularities), between random bookings and releases, some shapes whole-GPU."""
    rng = random.Random(seed)
    inv, state = _cluster()
    names = sorted(inv.nodes)
    rows = [(0, 1000, 1, None), (0, 500, 1, None), (0, 250, 1, None), (0, 700, 2, None),
            (0, 300, 1, frozenset({"A100-40GB"})), (4000, 100, 1, None), (0, 0, 0, None)]
    memory = {r: rng.choice([4096, 16384, 0]) for r in rows}
    n = len(names)  # hosts whose CPU and memory turn some tasks away
    cpu = np.array([rng.choice([2000, 64000]) for _ in range(n)], dtype=np.int64)
    mem = np.array([rng.choice([8192, 65536]) for _ in range(n)], dtype=np.int64)
    state.host = HostView(cpu, cpu.copy(), mem, mem.copy(), np.zeros(n, dtype=np.int64),
                          stamped=True)

    def reread() -> TypicalTasks:  # some tasks in another order, some new, some gone
        chosen = rng.sample(rows, rng.randint(2, len(rows)))
        return TypicalTasks.of([(*r, rng.random() + 0.1) for r in chosen],
                               [memory[r] for r in chosen])

    def demand(step: int) -> PodDemand:
        if step % 4:
            return _share(f"c-{step}", rng.choice([200, 300, 700]),
                          rng.choice(["cnn", "recommendation"]))
        return pod_demand(pod_from_dict(pod(gpus=rng.choice([1, 2]), uid=f"w-{step}")))

    return _mix_steps(rng, state, names, 36, reread, demand)


def test_a_mix_reread_with_new_and_dropped_tasks_carries_the_columns_it_keeps(
        monkeypatch) -> None:
    """Tasks a re-read mix keeps carry their per-task columns; only the new tasks' columns
    are priced (with a model of those tasks alone): bit for bit the values made afresh."""
    carried = _changing_mix_steps(3)
    monkeypatch.setattr("extender.placement.policies.sparse._carry_columns",
                        lambda old, new: None)
    afresh = _changing_mix_steps(3)
    for step, (got, expected) in enumerate(zip(carried[:-1], afresh[:-1], strict=True)):
        np.testing.assert_array_equal(got, expected, err_msg=f"step {step}")
    assert carried[-1][0] < afresh[-1][0]  # fewer nodes priced with the carry


def test_column_map_marks_the_new_tasks() -> None:
    from extender.placement.policies.fgd import FragModel, column_map

    def columns(rows, mem=None, fill=True):
        return FragModel(TypicalTasks.of([(*r, 1.0) for r in rows], mem), fill=fill).columns

    a, b, c = (100, 250, 1, None), (0, 500, 1, frozenset({"V100M16"})), (0, 1000, 2, None)
    assert column_map(columns([a, b]), columns([c, b, a])).tolist() == [-1, 1, 0]
    assert column_map(columns([a, b, c]), columns([c])).tolist() == [2]
    assert column_map(columns([a, b], [1, 2]), columns([b, a], [2, 3])).tolist() == [1, -1]
    assert column_map(columns([a, a]), columns([a])) is None  # ambiguous
    # The fill measure skips a 0 MiB memory test: untested tasks are those of 0 MiB.
    assert column_map(columns([a, b]), columns([a, b], [1, 2])).tolist() == [-1, -1]
    assert column_map(columns([a, b]), columns([b, a], [0, 2])).tolist() == [1, -1]
    assert column_map(columns([a, b], [0, 2]), columns([a])).tolist() == [0]
    # FGD's measure does test 0 MiB (it fails where memory is overbooked): not carried.
    assert column_map(columns([a, b], fill=False),
                      columns([a, b], [0, 0], fill=False)) is None


def test_column_map_reorders_the_same_tasks() -> None:
    from extender.placement.policies.fgd import FragModel, column_map

    def columns(rows, mem=None):
        return FragModel(TypicalTasks.of([(*r, 1.0) for r in rows], mem), fill=True).columns

    a, b, c = (100, 250, 1, None), (0, 500, 1, frozenset({"V100M16"})), (0, 1000, 2, None)
    assert column_map(columns([a, b, c]), columns([c, a, b])).tolist() == [2, 0, 1]
    assert column_map(columns([a, b]), columns([a, c])).tolist() == [0, -1]  # another task
    assert column_map(columns([a, b]), columns([a, b, c])).tolist() == [0, 1, -1]  # one more
    assert column_map(columns([a, a]), columns([a, a])) is None  # ambiguous
    # memory tested in one only: the untested are 0 MiB tasks (the fill measure skips them)
    assert column_map(columns([a, b]), columns([b, a], [1, 2])).tolist() == [-1, -1]
    assert column_map(columns([a, b], [1, 2]), columns([b, a], [2, 1])).tolist() == [1, 0]
    # the same shapes with other host memory are other tasks
    assert column_map(columns([a, b], [1, 2]), columns([b, a], [1, 2])).tolist() == [-1, -1]


def test_terms_over_every_gpu_in_order_equal_the_gathered_ones() -> None:
    """The remainder and node-order terms read the state's arrays as they are when the
    masks are every GPU in order: the same values as through the GPU indexes."""
    import dataclasses

    inv, state = _cluster()
    policy = Sparse(adaptive=False)
    for milli in (200, 300, 700):
        demand = _share(f"o-{milli}", milli)
        masks = fit(state, demand, list(state.node_names)).masks
        assert masks.every
        gathered = dataclasses.replace(masks, every=False)
        for term in policy.cost_terms(state, demand):
            for got, expected in zip(term.compute(state, demand, masks),
                                     term.compute(state, demand, gathered), strict=True):
                if expected is None:
                    assert got is None
                else:
                    np.testing.assert_array_equal(got, expected)


def test_the_price_term_cached_equals_it_fresh_through_bookings_host_changes_and_new_mixes(
) -> None:
    """Sparse's price term alone (every other weight 0), with a host view whose CPU and memory
    move with the bookings (stamps renewed, as the extender's host book does) and a mix re-read
    every few pods (a new value table): the cached costs are the policy's own after every
    random booking and release, and the cache did answer from kept values."""
    rng = random.Random(5)
    inv, state = _cluster()
    n = len(state.node_names)
    cpu = np.array([rng.choice([8000, 16000, 64000]) for _ in range(n)], dtype=np.int64)
    mem = np.array([rng.choice([16384, 65536]) for _ in range(n)], dtype=np.int64)
    state.host = HostView(cpu, cpu.copy(), mem, mem.copy(), np.zeros(n, dtype=np.int64),
                          stamped=True)
    policy = Sparse(interference_weight=0, frag_weight=0, order_weight=0, remainder_weight=0,
                    drain_weight=0, _mix=DemandMix(half_life=8.0, refresh=20))
    cache = CostCache()
    names = sorted(inv.nodes)
    booked: dict[str, tuple[int, int, int]] = {}  # uid -> node, cpu, memory
    priced = 0
    for step in range(90):
        demand = dataclasses.replace(
            _share(f"p-{step}", rng.choice([160, 320, 470])),
            cpu_milli=rng.choice([0, 6000]), host_mem_mib=8192)
        candidates = rng.sample(names, rng.randint(1, len(names)))
        fresh = _fresh(policy, state, demand, candidates)
        np.testing.assert_allclose(_cached(policy, cache, state, demand, candidates), fresh,
                                   rtol=1e-12, atol=1e-12)
        priced += int(np.count_nonzero(fresh[np.isfinite(fresh)]))
        if booked and rng.random() < 0.3:
            uid = rng.choice(sorted(booked))
            node, c, m = booked.pop(uid)
            state.unapply(uid)
            state.host.cpu_left[node] += c
            state.host.mem_left[node] += m
            state.touch(np.array([node]))
            continue
        result = fit(state, demand, candidates)
        fitting = [result.names[i] for i in np.flatnonzero(result.fits)]
        if not fitting:
            continue
        choice = assign(state, demand, rng.choice(fitting), policy)
        r = reservation_for(demand, choice, state, 0.0, None)
        state.apply(r)
        node = state.node_index[choice.node]
        state.host.cpu_left[node] -= demand.cpu_milli
        state.host.mem_left[node] -= demand.host_mem_mib
        state.touch(np.array([node]))
        booked[r.pod_uid] = (node, demand.cpu_milli, demand.host_mem_mib)
    assert priced > 0  # the term did price something
    assert cache.reused_gpus > cache.computed_nodes
    assert any(key[1][0] == "price" for key in cache._entries)


def test_the_interference_term_over_every_gpu_reuses_a_class_survival_only_while_it_holds(
) -> None:
    """A class's survival beside each GPU's residents is kept across its share sizes while the
    state's bookings and matrix stand: the term over every GPU is bit for bit the one made
    without it, after a booking and after a new matrix too."""
    from extender.ledger.rules import Allocation, Reservation
    from extender.placement.fit import gpu_masks

    inv, state = _cluster()
    every = np.arange(len(state.node_names))
    policy, plain = Sparse(), Sparse()

    def both(milli: int, job_class: str) -> None:
        demand = _share(f"s-{milli}-{job_class}", milli, job_class)
        masks = gpu_masks(state, demand, every)
        assert masks.every
        kept = policy._pair_term(state, demand, masks)[0]
        fresh = plain._pair_term(state.copy(), demand, masks)[0]  # another state: not kept
        np.testing.assert_array_equal(kept, fresh)

    for milli in (200, 300, 700):
        both(milli, "cnn")
    both(300, "recommendation")
    assert len(policy._kept["classes"]) == 2
    gpu = state.gpu_uuid[0]
    state.apply(Reservation(pod_uid="new", namespace="ns", name="new", node=state.node_names[0],
                            allocations=(Allocation(gpu, "main", 1024, 500),),
                            job_class="transformer"))
    both(200, "cnn")  # the booking changed the residents of GPU 0
    assert list(policy._kept["classes"]) == ["cnn"]
    prior = state.matrix
    state.matrix = InterferenceMatrix(prior.classes, prior.norm ** 3)
    both(700, "cnn")
