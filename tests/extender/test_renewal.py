"""New policy inputs (a re-read mix, a new price table) taken into use with caches priced for
them ahead (``extender.verbs.renewal``): the answers are exactly those of an extender without
caches that adopts the same inputs at the same moment, and the first pods after the swap
price nothing on the request path."""

from __future__ import annotations

import asyncio
import random

import numpy as np
import pytest
from builders import (
    filter_alike,
    filter_args,
    pod,
    random_bind_or_release,
    without_node_verdicts,
)

from bench.latency.cluster import half_occupancy, synthetic_inventory
from extender import protocol
from extender.demand import pod_demand
from extender.interference import default_matrix
from extender.ledger.memory import MemoryLedger
from extender.placement import ClusterState
from extender.placement.policies.fgd import FragModel, TypicalTasks, column_map
from extender.placement.policies.share_price import PriceTable
from extender.placement.policies.sparse import DEFERRED, PREPARED, Sparse
from extender.placement.policies.sparse_mix import DemandMix
from extender.service import Scheduler

INVENTORY = synthetic_inventory(24, 4)
NAMES = sorted(INVENTORY.nodes)
SHAPES = [dict(mem=2048, milli=200, job_class="cnn"),
          dict(mem=2048, milli=200, job_class="recommendation"),
          dict(mem=4096, milli=500, job_class="rnn"), dict(mem=6144, milli=300),
          dict(mem=12288, milli=200, job_class="transformer"), dict(gpus=1)]


def prepared(refresh: int = 5, **kw) -> Sparse:  # type: ignore[no-untyped-def]
    return Sparse(renew=PREPARED, _mix=DemandMix(half_life=4.0, refresh=refresh), **kw)


def scheduler(policy: Sparse, in_idle_time: bool = False) -> Scheduler:
    """``in_idle_time`` False: the renewal runs only when the test asks (``finish``), never
    by itself while the test awaits."""
    s = Scheduler(inventory=INVENTORY, ledger=MemoryLedger(), matrix=default_matrix(),
                  policy=policy)
    s.renewal.in_idle_time = in_idle_time
    return s


def demand(i: int, **shape):  # type: ignore[no-untyped-def]
    return pod_demand(protocol.pod_from_dict(pod(uid=f"d-{i}", **shape)))


async def test_renewed_caches_answer_as_an_extender_without_caches() -> None:
    """Twin extenders see the same pods; one renews its caches ahead and swaps them in, the
    other has no node verdicts and adopts the same inputs at the same moment. Filter answers
    and the costs kept for prioritize are the same, bit for bit, throughout."""
    rng = random.Random(5)
    renewed = scheduler(prepared())
    plain = without_node_verdicts(scheduler(prepared()))
    bound: list[dict] = []
    for step in range(150):
        p = pod(**rng.choice(SHAPES))
        names = rng.sample(NAMES, len(NAMES) if rng.random() < 0.7 else rng.randint(3, 12))
        a = await filter_alike(renewed, plain, p, names, step)
        await random_bind_or_release(rng, (renewed, plain), p, a.NodeNames, bound)
        waiting = plain.policy.pending()
        if waiting is not None and rng.random() < 0.5:  # now, or at the next re-read
            assert renewed.policy.pending() is not None
            renewed.renewal.finish()
            assert plain.policy.adopt(waiting)
            assert renewed.policy.pending() is None
            assert renewed.policy._frag.model.columns == plain.policy._frag.model.columns
    assert renewed.renewal.renewed > 5 and renewed.renewal.failed == 0


async def test_after_a_swap_the_prepared_shapes_price_no_node() -> None:
    s = scheduler(prepared(refresh=10))
    shapes = SHAPES[:4]
    for _ in range(3):  # each shape's verdicts over the whole inventory
        for shape in shapes:
            await s.filter(filter_args(pod(**shape), NAMES))
    pending = s.policy.pending()
    assert pending is not None  # the mix was re-read: its model waits
    model = s.policy._frag.model
    computed = s.node_verdicts.computed
    await s.filter(filter_args(pod(**shapes[0]), NAMES))
    assert s.policy._frag.model is model  # not adopted in a request
    assert s.node_verdicts.computed == computed  # nothing priced: the old model's costs
    s.renewal.finish()
    assert s.policy._frag.model is pending.model and s.renewal.renewed == 1
    computed, cost_nodes = s.node_verdicts.computed, s.cost_cache.computed_nodes
    for shape in shapes:
        await s.filter(filter_args(pod(**shape), NAMES))
    assert s.node_verdicts.computed == computed  # every verdict was priced ahead
    assert s.cost_cache.computed_nodes == cost_nodes


async def test_idle_time_completes_a_renewal_on_the_event_loop() -> None:
    s = scheduler(prepared(refresh=4), in_idle_time=True)
    for i in range(8):
        await s.filter(filter_args(pod(**SHAPES[i % 3]), NAMES))
    assert s.policy.pending() is not None
    for _ in range(2000):  # idle: the slices run one after another, whatever the speed
        if s.renewal.renewed:
            break
        await asyncio.sleep(0.005)
    assert s.renewal.renewed == 1 and s.policy.pending() is None
    assert s.renewal.steps >= 2 and s.renewal.step_seconds > 0  # slices, then the swap


def test_a_prepared_policy_stages_inputs_and_adopts_them_at_the_next_re_read() -> None:
    policy = prepared(refresh=3)
    state = ClusterState.build(INVENTORY, default_matrix(), half_occupancy(INVENTORY, 0.4))
    masks_names = NAMES
    from extender.placement import fit

    first = policy._frag.model
    for i in range(3):
        d = demand(i, mem=2048, milli=200)
        policy.costs(state, d, fit(state, d, masks_names).masks)
    staged = policy.pending()
    assert staged is not None and policy._frag.model is first  # staged, not in use
    terms = policy.cost_terms(state, d, staged)
    assert any(t.epoch == (staged.model.columns,) for t in terms)
    for i in range(3, 6):  # nobody adopted: the next re-read does, and stages the newest
        d = demand(i, mem=4096, milli=300)
        policy.costs(state, d, fit(state, d, masks_names).masks)
    assert policy._frag.model is staged.model
    newest = policy.pending()
    assert newest is not None and newest is not staged
    assert not policy.adopt(staged)  # superseded
    assert policy.adopt(newest) and policy.pending() is None


def test_a_deferred_table_is_adopted_with_the_mix_it_was_solved_for() -> None:
    policy = prepared(refresh=2, price_solve=DEFERRED)
    state = ClusterState.build(INVENTORY, default_matrix(), half_occupancy(INVENTORY, 0.4))
    from extender.placement import fit

    for i in range(2):
        d = demand(i, mem=2048, milli=200)
        policy.costs(state, d, fit(state, d, NAMES).masks)
    staged = policy._next["model"]
    assert policy.pending() is None  # the new mix's table is not solved yet
    job = policy.price_job()
    assert job is not None and job.model is staged  # solved for the mix that waits
    old = policy._value["table"]
    assert policy.install_prices(PriceTable(job, old.value, old.packings))
    assert policy.price_job() is None
    inputs = policy.pending()
    assert inputs is not None and inputs.model is staged and inputs.table.job is job
    assert policy._value["table"] is old  # still the old one until adopted
    assert policy.adopt(inputs) and policy._value["table"] is inputs.table


@pytest.mark.parametrize("fill", [True, False])
def test_aggregates_carried_to_a_re_read_mix_equal_a_full_pass(fill: bool) -> None:
    """A new model's per-node aggregates made from the previous model's (its tasks' columns
    copied, the new tasks' summed, nodes booked since refreshed) equal a pass over every GPU;
    with the fill measure also from a model without memory tests to one with them."""
    state = ClusterState.build(INVENTORY, default_matrix(), half_occupancy(INVENTORY, 0.5))
    old = FragModel(TypicalTasks.of([(2000, 200, 1, None, 0.5), (4000, 500, 1, None, 0.3),
                                     (8000, 1000, 2, None, 0.2)]), fill)
    old.state_aggregates(state)
    rows = [(4000, 500, 1, None, 0.4), (2000, 300, 1, None, 0.3), (2000, 200, 1, None, 0.3)]
    new_tasks = TypicalTasks.of(rows, [0, 8192, 0] if fill else None)
    state.milli_used[:4] += 50  # a booking on the first node since the old memo was made
    state.node_stamp[0] += 1
    new = FragModel(new_tasks, fill)
    assert column_map(old.columns, new.columns) is not None
    new.carry_from(old)
    got = new.state_aggregates(state)
    full = FragModel(new_tasks, fill)
    expected = full.state_aggregates(state)
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_array_equal(a, b)
