"""Redis high availability with real sentinels: the ledger follows a failover, and after one it
re-adopts what the API server says is bound, so an acknowledged booking lost by asynchronous
replication cannot lead to an over-commit."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from builders import bind_args, filter_args, gpu_node, inventory, pod

from bench.redis_server import SentinelGroup
from extender.config import Settings
from extender.interference import default_matrix
from extender.ledger.connect import parse_sentinel_url
from extender.ledger.factory import open_ledger
from extender.ledger.redis import RedisLedger
from extender.placement import make_policy
from extender.service import Scheduler

INV = inventory(gpu_node("n", 2))


@pytest.fixture
def sentinels():
    group = SentinelGroup(replicas=1, sentinels=3)
    yield group
    group.stop()


def test_sentinel_urls() -> None:
    t = parse_sentinel_url("sentinel://a:26379,[::1]:26380/mymaster/2")
    assert t.sentinels == (("a", 26379), ("::1", 26380)) and t.master == "mymaster" and t.db == 2
    for bad in ("sentinel://a:1", "sentinel://a/m", "sentinel://a:1/m/x", "redis://a:1/0"):
        with pytest.raises(ValueError):
            parse_sentinel_url(bad)
    assert Settings(store="sentinel://a/m", nodes=None).validate()  # port missing


def scheduler(ledger: RedisLedger) -> Scheduler:
    return Scheduler(inventory=INV, ledger=ledger, matrix=default_matrix(),
                     policy=make_policy("sparse"))


async def place(s: Scheduler, **kw) -> tuple[str, str]:  # noqa: ANN003
    """Filter and bind, retrying while the store fails over (the scheduler would)."""
    p = pod(**kw)
    args, binding = filter_args(p, ["n"]), bind_args(p, "n")
    for _ in range(100):
        filtered = await s.filter(args)
        if filtered.Error:
            await asyncio.sleep(0.1)
            continue
        if not filtered.NodeNames:
            return p["metadata"]["uid"], "does not fit"
        error = (await s.bind(binding)).Error
        if "unavailable" not in error:
            return p["metadata"]["uid"], error
        await asyncio.sleep(0.1)
    raise AssertionError("the ledger never came back")


async def test_ledger_follows_a_failover_with_a_password_file(sentinels, tmp_path) -> None:
    secret = tmp_path / "redis-password"
    secret.write_text(sentinels.password + "\n")
    ledger = open_ledger(Settings(store=sentinels.url, redis_password_file=secret))
    s = scheduler(ledger)
    try:
        before = [await place(s, mem=1000, milli=100) for _ in range(3)]
        assert all(error == "" for _, error in before)
        sentinels.wait_replicas_synced()
        sentinels.failover()
        # The periodic ping heals without a restart; whether it or the first write is what
        # meets the new master depends on when the old one drops its clients.
        for _ in range(50):  # a ping may land while the old master drops its clients
            if await s.health.check(ledger):
                break
            await asyncio.sleep(0.1)
        assert s.health.ok
        after = [await place(s, mem=1000, milli=100) for _ in range(3)]
        assert all(error == "" for _, error in after)
        # Replicas were in sync, so whether the client noticed the move (a re-read) or simply
        # reconnected to the new master, the view must equal what the new master holds.
        state = await s.view()
        _, held = await ledger.snapshot()
        assert set(held) == {uid for uid, _ in before + after} == set(state.reservations)
    finally:
        await ledger.close()


async def test_booking_lost_in_failover_is_adopted_again_from_the_api(
        sentinels, monkeypatch) -> None:
    monkeypatch.setenv("SPARSE_REDIS_PASSWORD", sentinels.password)
    ledger = open_ledger(Settings(store=sentinels.url))
    assert isinstance(ledger, RedisLedger)
    s = scheduler(ledger)
    api_bound: dict[str, object] = {}  # what the API server says is bound

    async def readopt() -> None:
        for reservation in api_bound.values():
            await s.adopt(reservation)  # what the kube resync does with bound pods

    s.resync_hooks.append(readopt)
    try:
        uid, error = await place(s, gpus=1)
        assert error == ""
        api_bound[uid] = await ledger.get(uid)
        sentinels.wait_replicas_synced()
        replica = next(p for p in sentinels.data_ports if p != sentinels.master_port())
        os.kill(sentinels.procs[replica].pid, signal.SIGSTOP)  # it stops replicating
        lost, error = await place(s, gpus=1)  # acknowledged by the primary only
        assert error == ""
        api_bound[lost] = await ledger.get(lost)
        primary = sentinels.master_port()
        sentinels.procs[primary].kill()  # the primary dies with the only copy
        os.kill(sentinels.procs[replica].pid, signal.SIGCONT)
        for _ in range(300):
            try:
                if sentinels.master_port() == replica:
                    break
            except (OSError, ValueError, IndexError):
                pass
            await asyncio.sleep(0.1)
        assert sentinels.master_port() == replica
        # Both GPUs are held by bound pods: a third whole-GPU pod must not fit anywhere.
        third, error = await place(s, gpus=1)
        assert error != "", "a GPU was booked twice after the failover"
        _, held = await ledger.snapshot()
        assert {uid, lost} <= set(held) and third not in held
    finally:
        await ledger.close()


async def test_a_booking_no_replica_holds_is_not_acknowledged(sentinels, monkeypatch) -> None:
    monkeypatch.setenv("SPARSE_REDIS_PASSWORD", sentinels.password)
    ledger = open_ledger(Settings(store=sentinels.url, redis_min_replicas=1))
    s = scheduler(ledger)
    try:
        assert (await place(s, mem=1000, milli=100))[1] == ""
        sentinels.wait_replicas_synced()
        replica = next(p for p in sentinels.data_ports if p != sentinels.master_port())
        os.kill(sentinels.procs[replica].pid, signal.SIGSTOP)
        try:
            uid, error = await place(s, mem=1000, milli=100)
        finally:
            os.kill(sentinels.procs[replica].pid, signal.SIGCONT)
        assert "replicas" in error  # answered an error: the scheduler retries
        await s.expire()  # upkeep: what the unacknowledged bind booked is dropped
        assert await ledger.get(uid) is None
        assert s.upkeep.reclaimed == 1
    finally:
        await ledger.close()
