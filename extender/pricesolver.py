"""The sparse policy's share price tables, solved off the request path.

The policy (``price_solve="deferred"``) never solves a value table inside ``costs``: when its
learned mix is re-read it keeps pricing with the last table and says which solve the new mix
needs (``price_job``). This adapter runs that solve in a worker process and hands the table
back (``install_prices``) on the thread that serves requests, between two of them, so a
request sees one table or the other, never a mix of both. A thread would not do: the solve
is mostly Python (the LP's wrapper and a knapsack) and holds the GIL, so requests would wait
behind it all the same (bench/README.md has the figures).

One solve runs at a time. When it ends the policy is asked again for its job, which is always
the newest mix's: mixes re-read while a solve ran never queue up (no pile-up), and the running
solve's table, if its mix was re-read since, is dropped by the policy. A solve that fails is
logged and not retried: the policy keeps its table until the next re-read brings another job.
The worker process starts with ``start`` (``serve`` calls it before the extender answers
ready: its spawn and imports take about a second of CPU, which would otherwise fall inside the
first burst) or else with the first job; one that dies is replaced on the next job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import BrokenExecutor, Executor, Future, ProcessPoolExecutor
from typing import Protocol

from extender.placement.policies.share_price import Packing, PriceJob, PriceTable, value_table
from extender.placement.policies.sparse import DEFERRED

log = logging.getLogger("sparse.prices")

Solver = Callable[..., tuple[object, tuple[Packing, ...]]]


class DeferredPrices(Protocol):
    price_solve: str

    def price_job(self) -> PriceJob | None: ...

    def install_prices(self, table: PriceTable) -> bool: ...


WORKER_NICENESS = 10  # a solve yields the CPU to the event loop's process when cores are short


def _warm() -> None:
    """Run first in a new worker: its imports (NumPy, SciPy) done before the first job."""


PARENT_CHECK_S = 1.0  # how often a worker looks whether the extender is still there


def _exit_with(parent: int) -> None:
    """End the worker once its parent is gone. A killed extender (SIGKILL, a crash) never
    shuts its pool down, and an idle worker blocked on its queue would then live on, holding
    ~100 MB, outside a container that would have reaped it."""
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_S)
    os._exit(0)


def _worker_init(parent: int) -> None:
    """The worker's initializer: a lower CPU priority (the old table prices while it solves,
    so a late table costs little and a slower event loop costs every request), and a watch
    that ends it with its parent."""
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICENESS)
    threading.Thread(target=_exit_with, args=(parent,), name="parent-watch", daemon=True).start()


def worker_pool() -> Executor:
    """One worker process, started fresh (spawn: nothing of the event loop's process is
    inherited), at a lower CPU priority, ending with this process."""
    return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_worker_init, initargs=(os.getpid(),))


class PriceSolver:
    """Runs a deferred policy's price solves on ``make_executor()``'s workers.

    ``poll()`` is cheap (identity checks) and is called on the serving thread after each verb
    that may have re-read the mix; a finished solve also wakes it on the event loop it was
    started from. ``solver(tasks, start)`` returns ``(value, packings)``; it must be a
    module-level function for a process pool."""

    def __init__(self, policy: DeferredPrices,
                 make_executor: Callable[[], Executor] = worker_pool,
                 solver: Solver = value_table) -> None:
        self.policy = policy
        self.make_executor = make_executor
        self.solver = solver
        self._executor: Executor | None = None
        self._running: tuple[PriceJob, Future] | None = None
        self._failed: PriceJob | None = None  # not tried again
        self._loop: asyncio.AbstractEventLoop | None = None
        self._warming: Future | None = None
        self._closed = False
        self.installed = 0  # tables put in use
        self.dropped = 0  # tables solved for a mix re-read since
        self.failed = 0

    @property
    def active(self) -> bool:
        """Whether the policy leaves its solves to this adapter."""
        return getattr(self.policy, "price_solve", None) == DEFERRED

    def start(self) -> None:
        """Start the worker now, not with the first job (benchmarks: its start-up is no
        pod's work)."""
        if self.active:
            try:
                self._warming = self._pool().submit(_warm)
            except Exception:  # no worker now: the first job tries again
                log.exception("price solver worker did not start")

    def poll(self) -> None:
        """Take a finished solve's table, then start the solve the policy needs now. Never
        raises: it runs after every verb, whose answer must not turn into an error."""
        if self._closed or not self.active:
            return
        try:
            self._poll()
        except Exception:
            log.exception("share price solver failed, the last table stays in use")

    def _poll(self) -> None:
        running = self._running
        if running is not None and running[1].done():
            self._running = None
            self._finish(*running)
        if self._running is not None:  # the newest job is asked for when it ends
            return
        job = self.policy.price_job()
        if job is not None and job is not self._failed:
            self._submit(job)

    def _finish(self, job: PriceJob, future: Future) -> None:
        try:
            value, packings = future.result()
        except Exception as exc:  # the old table stays; a new mix brings a new job
            self._fail(job)
            log.error("share price table not solved, the last one stays in use: %r", exc)
            if isinstance(exc, BrokenExecutor):
                self._reset()  # the worker died: a new one for the next job
            return
        if self.policy.install_prices(PriceTable(job, value, packings)):  # type: ignore[arg-type]
            self.installed += 1
        else:
            self.dropped += 1

    def _fail(self, job: PriceJob) -> None:
        """The job is not tried again: the old table stays until a new mix's job."""
        self.failed += 1
        self._failed = job

    def _submit(self, job: PriceJob) -> None:
        try:
            future = self._pool().submit(self.solver, job.tasks, job.start)
        except Exception:
            self._fail(job)
            log.exception("share price solve not started, the last table stays in use")
            self._reset()
            return
        self._running = (job, future)
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None  # no event loop: the caller polls
        future.add_done_callback(self._wake)

    def _wake(self, _future: Future) -> None:
        """On the worker's side: poll again on the event loop, which owns the policy."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop is closing
                loop.call_soon_threadsafe(self.poll)

    def _pool(self) -> Executor:
        if self._executor is None:
            self._executor = self.make_executor()
        return self._executor

    def _reset(self, wait: bool = False) -> None:
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=wait, cancel_futures=True)

    @property
    def starting(self) -> bool:
        """Whether the worker ``start`` began is still importing."""
        return self._warming is not None and not self._warming.done()

    def worker_pids(self) -> list[int]:
        """The worker processes' ids (for CPU accounting); none for other executors."""
        processes = getattr(self._executor, "_processes", None) or {}
        return list(processes)

    def close(self) -> None:
        """Stop the worker and wait until it has exited (at most the running solve); polls
        after this do nothing (a solve's wake-up included). Not waiting leaves the pool's
        manager thread closing its wake-up pipe while the interpreter's exit hook writes to
        it (Python 3.11): a clean shutdown then printed an ``OSError: [Errno 9]`` traceback
        now and then."""
        self._closed = True
        self._running = None
        self._reset(wait=True)
