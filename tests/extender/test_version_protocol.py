"""A replica never marks another replica's change as applied without applying it.

Confirming a pod that is bound already (a watch event after the bind's own confirm), or a
retried bind of a pod booked already, changes nothing; the version a replica then reads may be
another replica's change, exactly one past its cached view. It must not take that number as
its own change: the other replica's booking would be missing from its view for good."""

from __future__ import annotations

import pytest
from builders import gpu_node, inventory, place_pod, pod

from extender.interference import default_matrix
from extender.ledger.redis import RedisLedger
from extender.placement import make_policy
from extender.service import Scheduler

INV = inventory(gpu_node("n", 2))


def replica(url: str) -> Scheduler:
    return Scheduler(inventory=INV, ledger=RedisLedger.from_url(url, prefix="vp:"),
                     matrix=default_matrix(), policy=make_policy("sparse"))


@pytest.fixture
async def pair(redis_url):
    a, b = replica(redis_url), replica(redis_url)
    yield a, b
    await a.ledger.close()
    await b.ledger.close()


@pytest.mark.parametrize("no_op", ["confirm a bound pod", "adopt a booked pod"])
async def test_a_no_op_never_takes_another_replicas_change_as_its_own(pair, no_op) -> None:
    a, b = pair
    mine = await place_pod(a, pod(mem=1000, milli=100), "n")
    theirs = await place_pod(b, pod(mem=1000, milli=200), "n")
    await a.view()
    await b.release(theirs)  # one change past a's cached view
    if no_op == "confirm a bound pod":
        await a.confirm(mine)  # e.g. the watch saw the pod bound
    else:
        await a.adopt(await a.ledger.get(mine))  # e.g. a resync finds it booked already
    state = await a.view()
    assert theirs not in state.reservations, "a replica skipped another replica's release"
    _, held = await a.ledger.snapshot()
    assert set(state.reservations) == set(held) == {mine}
    assert int(state.milli_used.sum()) == 100
