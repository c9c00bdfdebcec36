"""Sparse's share price tables solved off the request path: the deferred policy never solves
in ``costs``, the adapter (extender.pricesolver) installs what a worker solved, a table for
a mix re-read since is dropped, a failed solve leaves the last table."""

from __future__ import annotations

import os
from concurrent.futures import Executor, Future

import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer
from builders import gpu_node, inventory, pod

from bench.latency.cluster import half_occupancy, synthetic_inventory
from extender.config import Settings
from extender.demand import pod_demand
from extender.http.app import make_app
from extender.interference import default_matrix
from extender.ledger.memory import MemoryLedger
from extender.placement import ClusterState, fit, node_costs
from extender.placement.policies import sparse_inputs as sparse_module
from extender.placement.policies.share_price import value_table
from extender.placement.policies.sparse import DEFERRED, Sparse
from extender.placement.policies.sparse_mix import DemandMix
from extender.pricesolver import WORKER_NICENESS, PriceSolver
from extender.protocol import encode, pod_from_dict
from extender.service import Scheduler
from extender.verbs.costcache import CachedPolicy, CostCache

SIZES = (160, 320, 470, 650, 810)


class HeldPool(Executor):
    """Runs nothing until the test says so: each job waits in ``jobs``."""

    def __init__(self) -> None:
        self.jobs: list[tuple[Future, object, tuple]] = []

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def, override]
        future: Future = Future()
        self.jobs.append((future, fn, args))
        return future

    def run(self) -> None:
        future, fn, args = self.jobs.pop(0)
        try:
            future.set_result(fn(*args))  # type: ignore[operator]
        except Exception as exc:
            future.set_exception(exc)


def _share(uid: str, milli: int):
    return pod_demand(pod_from_dict(pod(mem=2048, milli=milli, job_class="cnn", uid=uid)))


def _cluster():
    inv = synthetic_inventory(30, 4)
    return sorted(inv.nodes), ClusterState.build(inv, default_matrix(), half_occupancy(inv, 0.4))


def _deferred(refresh: int, **weights: float) -> Sparse:
    return Sparse(price_solve=DEFERRED, _mix=DemandMix(half_life=4.0, refresh=refresh),
                  **weights)


def _costs(policy, state, demand, names, cache=None):
    used = policy if cache is None else CachedPolicy(policy, cache)
    return node_costs(state, demand, fit(state, demand, names), used)


def test_the_deferred_policy_never_solves_in_costs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through many re-reads of the mix, cached and not, a deferred policy prices with the
    table it was made with and says that a solve is due; an inline one solves."""
    names, state = _cluster()
    deferred, inline = _deferred(3), Sparse(_mix=DemandMix(half_life=4.0, refresh=3))
    prior = deferred._value["table"]

    def no_solve(job):  # type: ignore[no-untyped-def]
        raise AssertionError("solved in a request")

    monkeypatch.setattr(sparse_module, "solve", no_solve)
    cache = CostCache()
    for i in range(20):
        d = _share(f"d-{i}", SIZES[i % len(SIZES)])
        assert np.isfinite(_costs(deferred, state, d, names, cache if i % 2 else None)).any()
        deferred.cost_terms(state, d)
    assert deferred._value["table"] is prior
    job = deferred.price_job()
    assert job is not None and job.model is deferred._frag.model
    assert deferred.price_job() is job  # one job per mix
    with pytest.raises(AssertionError, match="solved in a request"):
        for i in range(6):
            _costs(inline, state, _share(f"i-{i}", 320), names)


def test_an_installed_table_reprices_the_cached_term_as_an_inline_policy_does() -> None:
    """Until the adapter installs the new mix's table the cache answers what the deferred
    policy computes with the old one; after, the price term alone is priced again and the
    costs are an inline policy's (which solved the same mix from the same warm start)."""
    names, state = _cluster()
    deferred, inline = _deferred(6), Sparse(_mix=DemandMix(half_life=4.0, refresh=6))
    pool = HeldPool()
    solver = PriceSolver(deferred, lambda: pool)
    cache = CostCache()
    for i in range(6):  # the sixth pod re-reads the mix
        d = _share(f"p-{i}", SIZES[i % len(SIZES)])
        _costs(deferred, state, d, names, cache)
        _costs(inline, state, d, names)
        solver.poll()
    assert len(pool.jobs) == 1
    d = _share("p-6", 320)
    old = _costs(deferred, state, d, names, cache)
    np.testing.assert_allclose(old, _costs(deferred, state, d, names), rtol=1e-12, atol=1e-12)
    assert not np.allclose(old, _costs(inline, state, d, names))  # the tables differ
    pool.run()
    solver.poll()
    assert solver.installed == 1 and deferred.price_job() is None
    computed = cache.computed_nodes
    d = _share("p-7", 320)
    got = _costs(deferred, state, d, names, cache)
    assert cache.computed_nodes == computed + len(names)  # the price term, on every node
    np.testing.assert_allclose(got, _costs(inline, state, d, names), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(deferred._value["table"].value, inline._value["table"].value)


def test_a_superseded_solve_is_dropped_and_only_the_newest_mix_is_solved_next() -> None:
    names, state = _cluster()
    policy = _deferred(2, frag_weight=0.0)
    prior = policy._value["table"]
    pool = HeldPool()
    solver = PriceSolver(policy, lambda: pool)
    first = None
    for i in range(12):  # six re-reads while the first solve is held
        _costs(policy, state, _share(f"s-{i}", SIZES[i % len(SIZES)]), names)
        solver.poll()
        first = first or policy.price_job()
    assert len(pool.jobs) == 1 and pool.jobs[0][2][0] is first.tasks  # no pile-up
    newest = policy.price_job()
    assert newest is not first
    pool.run()
    solver.poll()  # the first table is dropped; the newest mix's job starts
    assert solver.dropped == 1 and solver.installed == 0
    assert policy._value["table"] is prior
    assert len(pool.jobs) == 1 and pool.jobs[0][2][0] is newest.tasks
    assert pool.jobs[0][2][1] == prior.packings  # warm-started from the table in use
    pool.run()
    solver.poll()
    assert solver.installed == 1 and policy._value["table"].job is newest


def test_a_failing_solve_leaves_the_last_table_and_is_not_retried(
        caplog: pytest.LogCaptureFixture) -> None:
    names, state = _cluster()
    policy = _deferred(3)
    prior = policy._value["table"]
    calls = []

    def broken(tasks, start):  # type: ignore[no-untyped-def]
        calls.append(tasks)
        raise ValueError("LP failed")

    pool = HeldPool()
    solver = PriceSolver(policy, lambda: pool, solver=broken)
    for i in range(3):
        _costs(policy, state, _share(f"f-{i}", 470), names)
        solver.poll()
    pool.run()
    before = _costs(policy, state, _share("f-3", 320), names)
    solver.poll()
    solver.poll()
    assert solver.failed == 1 and len(calls) == 1 and not pool.jobs  # not tried again
    assert "LP failed" in caplog.text
    assert policy._value["table"] is prior
    np.testing.assert_array_equal(_costs(policy, state, _share("f-3", 320), names), before)
    _costs(policy, state, _share("f-4", 320), names)  # the next re-read: a new job
    _costs(policy, state, _share("f-5", 320), names)
    solver.poll()
    assert len(pool.jobs) == 1


async def test_the_extender_solves_after_filter_and_prices_with_the_new_table() -> None:
    """Filters over HTTP through a re-read with a worker that has not answered, then with
    one that fails: every filter answers 200 with nodes, the table changes only when a solve
    succeeds, and /metrics counts the tables."""
    policy = _deferred(3)
    s = Scheduler(inventory=inventory(*(gpu_node(f"gpu-{i}", 4) for i in range(6))),
                  ledger=MemoryLedger(), matrix=default_matrix(), policy=policy)
    pool = HeldPool()
    s.prices = PriceSolver(policy, lambda: pool)
    names = [f"gpu-{i}" for i in range(6)]
    prior = policy._value["table"]
    client = TestClient(TestServer(make_app(Settings(), scheduler=s)))
    await client.start_server()

    async def filtered(uid: str) -> None:
        body = pod(mem=2048, milli=300, job_class="cnn", uid=uid)
        resp = await client.post("/scheduler/filter",
                                 data=encode({"Pod": body, "NodeNames": names}))
        assert resp.status == 200
        answer = await resp.json()
        assert not answer.get("Error") and answer["NodeNames"]

    for i in range(3):
        await filtered(f"g-{i}")
    assert len(pool.jobs) == 1 and policy._value["table"] is prior
    pool.run()
    await filtered("g-3")  # installed after this filter
    assert policy._value["table"] is not prior and policy.price_job() is None
    s.prices.solver = _raise
    for i in range(4, 7):
        await filtered(f"g-{i}")
    table = policy._value["table"]
    pool.run()
    await filtered("g-7")
    assert s.prices.failed == 1 and policy._value["table"] is table
    text = await (await client.get("/metrics")).text()
    await client.close()
    assert 'sparse_extender_price_tables_total{result="installed"} 1.0' in text
    assert 'sparse_extender_price_tables_total{result="failed"} 1.0' in text
    assert "sparse_extender_cache_renewal_steps_total " in text  # how much idle work
    assert "sparse_extender_cache_renewal_cpu_seconds_total " in text


def test_a_poll_never_raises_and_does_nothing_once_closed(
        caplog: pytest.LogCaptureFixture) -> None:
    """The adapter runs after every verb: a policy that fails to name its job is logged, not
    raised; after close, a late wake-up starts no worker."""
    names, state = _cluster()
    policy = _deferred(2)
    pool = HeldPool()
    solver = PriceSolver(policy, lambda: pool)
    for i in range(2):
        _costs(policy, state, _share(f"c-{i}", 320), names)
    solver.close()
    solver.poll()
    assert not pool.jobs
    solver = PriceSolver(policy, lambda: pool)

    def broken() -> None:
        raise KeyError("no job")

    policy_job = policy.price_job
    object.__setattr__(policy, "price_job", broken)
    solver.poll()
    assert "no job" in caplog.text and not pool.jobs
    object.__setattr__(policy, "price_job", policy_job)
    solver.poll()
    assert len(pool.jobs) == 1


def _raise(tasks, start):  # type: ignore[no-untyped-def]
    raise RuntimeError("worker failed")


def test_a_worker_process_solves_what_the_policy_would() -> None:
    """The real worker (a spawned process, at a lower priority): the job pickles there and
    the table back."""
    names, state = _cluster()
    policy = _deferred(2)
    solver = PriceSolver(policy)
    try:
        for i in range(2):
            _costs(policy, state, _share(f"w-{i}", SIZES[i]), names)
        job = policy.price_job()
        solver.poll()
        solver._running[1].result(timeout=120)  # type: ignore[index]
        solver.poll()
        assert solver.installed == 1
        own = os.getpriority(os.PRIO_PROCESS, 0)  # the worker yields to the event loop
        assert [os.getpriority(os.PRIO_PROCESS, pid) for pid in solver.worker_pids()] == [
            min(own + WORKER_NICENESS, 19)]
        expected, _ = value_table(job.tasks, job.start)
        np.testing.assert_array_equal(policy._value["table"].value, expected)
        workers = solver.worker_pids()
    finally:
        solver.close()
    for pid in workers:  # close waited for the worker: it has exited and was reaped
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


async def test_serve_starts_the_worker_before_ready_and_lazy_otherwise() -> None:
    """``start_price_worker`` (what ``serve`` sets) starts the worker with the app, before it
    answers ready; without it nothing starts until the first solve."""
    for eager in (True, False):
        policy = _deferred(1000)
        s = Scheduler(inventory=inventory(gpu_node("gpu-0", 4)), ledger=MemoryLedger(),
                      matrix=default_matrix(), policy=policy)
        pool = HeldPool()
        s.prices = PriceSolver(policy, lambda pool=pool: pool)
        client = TestClient(TestServer(make_app(Settings(start_price_worker=eager),
                                                scheduler=s)))
        await client.start_server()
        assert (await client.get("/readyz")).status == 200
        await client.close()
        assert [fn.__name__ for _, fn, _ in pool.jobs] == (["_warm"] if eager else [])


_OWNER = """
import sys
from extender.placement.policies.sparse import DEFERRED, Sparse
from extender.pricesolver import PriceSolver
solver = PriceSolver(Sparse(price_solve=DEFERRED))
solver.start()
solver._warming.result(timeout=120)
print(*solver.worker_pids(), flush=True)
sys.stdin.read()
"""


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan that exited waits for whoever reaps it)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_a_worker_ends_when_its_extender_is_killed() -> None:
    """A SIGKILLed extender never shuts its pool down; its idle worker must not live on."""
    import signal
    import subprocess
    import sys
    import time

    owner = subprocess.Popen([sys.executable, "-c", _OWNER], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        workers = [int(p) for p in owner.stdout.readline().split()]  # type: ignore[union-attr]
        assert len(workers) == 1
        assert _running(workers[0])  # alive while its parent is
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    deadline = time.monotonic() + 60  # a liveness bound, generous for a loaded machine
    while time.monotonic() < deadline:
        if not _running(workers[0]):
            return
        time.sleep(0.2)
    os.kill(workers[0], signal.SIGKILL)
    pytest.fail("the worker outlived its killed parent")
