"""Replica views equal the store, always: three replicas share one real redis-server; random
interleavings of reserve / confirm / release / expire / Redis restart (kept or wiped data);
at quiescence every replica's view == what Redis holds == the bookings the operations made."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from builders import bind_args, filter_args, gpu_node, inventory, pod
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from bench.redis_server import RedisServer
from extender.errors import ReservationConflict
from extender.interference import default_matrix
from extender.ledger.redis import RedisLedger
from extender.ledger.rules import STATE_BOUND, STATE_RESERVED, Reservation
from extender.placement import ClusterState, make_policy
from extender.service import Scheduler
from extender.verbs import bind as bind_verb

INV = inventory(gpu_node("n0", 2), gpu_node("n1", 2))
TTL = 30.0


@pytest.fixture(scope="module")
def views_redis():
    server = RedisServer(appendonly=True)  # restarted with or without its data
    yield server
    server.stop()


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def bookings(reservations: dict[str, Reservation]) -> dict[str, tuple]:
    return {uid: (r.state, r.node, tuple(sorted((a.gpu, a.mem_mib, a.milli)
                                                for a in r.allocations)))
            for uid, r in reservations.items()}


class ReplicaViews(RuleBasedStateMachine):
    server: RedisServer

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = Clock()
        self.replicas: list[Scheduler] = []
        self.model: dict[str, Reservation] = {}  # what the operations booked, as they said
        self.pods = 0

    def run(self, coro):  # noqa: ANN001, ANN201
        return self.loop.run_until_complete(coro)

    @initialize()
    def start(self) -> None:
        self.server.flush()
        self.replicas = [
            Scheduler(inventory=INV, ledger=RedisLedger.from_url(self.server.url),
                      matrix=default_matrix(), policy=make_policy("sparse"), clock=self.clock,
                      reservation_ttl_s=TTL)
            for _ in range(3)]
        for s in self.replicas:
            self.run(s.view())

    # --- operations (each may run alone or a few at once) ---------------------------------

    async def _reserve(self, s: Scheduler, node: str, mem: int, milli: int) -> None:
        self.pods += 1
        p = pod(f"p{self.pods}", mem=mem, milli=milli)
        await s.demand_of(filter_args(p, [node]).pod)
        try:
            reservation, _ = await bind_verb.reserve(s, bind_args(p, node))
        except ReservationConflict:
            return
        self.model[reservation.pod_uid] = reservation

    async def _confirm(self, s: Scheduler, uid: str) -> None:
        confirmed = await s.confirm(uid)
        if uid in self.model:
            assert confirmed is not None
            self.model[uid] = self.model[uid].bound()

    async def _release(self, s: Scheduler, uid: str) -> None:
        await s.release(uid)
        self.model.pop(uid, None)

    def _op(self, data: st.DataObject, uids: list[str]):  # noqa: ANN202
        s = data.draw(st.sampled_from(self.replicas))
        kind = data.draw(st.sampled_from(["reserve", "confirm", "release"] if uids
                                         else ["reserve"]))
        if kind == "reserve":
            return self._reserve(s, data.draw(st.sampled_from(["n0", "n1"])),
                                 data.draw(st.sampled_from([2000, 8000, 20000])),
                                 data.draw(st.sampled_from([100, 300, 600])))
        uid = data.draw(st.sampled_from(uids))
        uids.remove(uid)  # one operation per pod in a concurrent batch
        return (self._confirm if kind == "confirm" else self._release)(s, uid)

    @rule(data=st.data())
    def one(self, data: st.DataObject) -> None:
        self.run(self._op(data, sorted(self.model)))

    @rule(data=st.data(), n=st.integers(2, 5))
    def several_at_once(self, data: st.DataObject, n: int) -> None:
        uids = sorted(self.model)
        ops = [self._op(data, uids) for _ in range(n)]

        async def all_of() -> None:
            await asyncio.gather(*ops)

        self.run(all_of())

    @rule(data=st.data(), seconds=st.sampled_from([5.0, TTL + 10.0]))
    def expire(self, data: st.DataObject, seconds: float) -> None:
        self.clock.now += seconds
        self.run(data.draw(st.sampled_from(self.replicas)).expire())
        for uid, r in list(self.model.items()):
            if r.state == STATE_RESERVED and r.expires_at is not None \
                    and r.expires_at <= self.clock.now:
                del self.model[uid]

    @precondition(lambda self: self.replicas)
    @rule(keep=st.booleans(), data=st.data())
    def restart_redis(self, keep: bool, data: st.DataObject) -> None:
        self.server.restart(keep_data=keep)
        self.run(self._reconnect())
        if not keep:
            # Wiped: the API server still says which pods are bound; a replica re-adopts
            # them (what the kube resync does). Unbound bookings are gone.
            self.model = {u: r for u, r in self.model.items() if r.state == STATE_BOUND}
            s = data.draw(st.sampled_from(self.replicas))
            for r in self.model.values():
                assert self.run(s.adopt(r))

    async def _reconnect(self) -> None:
        for s in self.replicas:
            for _ in range(50):
                try:
                    await s.ledger.version()
                    break
                except Exception:  # noqa: BLE001 - a broken pooled connection, retried
                    await asyncio.sleep(0.02)

    # --- the property ---------------------------------------------------------------------

    @invariant()
    def never_over_committed(self) -> None:
        if not self.replicas:
            return
        _, held = self.run(self.replicas[0].ledger.snapshot())
        state = ClusterState.build(INV, default_matrix(), held.values())
        assert (state.mem_used <= state.mem_cap).all()
        assert (state.milli_used <= state.milli_cap).all()

    def teardown(self) -> None:
        try:
            if self.replicas:
                self.run(self._quiescent_views_equal_the_store())
        finally:
            for s in self.replicas:
                self.run(s.ledger.close())
            self.loop.close()

    async def _quiescent_views_equal_the_store(self) -> None:
        version, held = await self.replicas[0].ledger.snapshot()
        assert bookings(held) == bookings(self.model)
        fresh = ClusterState.build(INV, default_matrix(), held.values(), version)
        for i, s in enumerate(self.replicas):
            view = await s.view()
            assert bookings(view.reservations) == bookings(held), f"replica {i} diverged"
            assert np.array_equal(view.mem_used, fresh.mem_used), f"replica {i} memory"
            assert np.array_equal(view.milli_used, fresh.milli_used), f"replica {i} compute"


def test_replica_views_equal_the_store(views_redis) -> None:
    ReplicaViews.server = views_redis
    machine = ReplicaViews.TestCase
    machine.settings = settings(max_examples=12, stateful_step_count=20, deadline=None,
                                suppress_health_check=list(HealthCheck))
    machine().runTest()
