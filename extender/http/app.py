"""Application factory: settings -> aiohttp app wired to one Scheduler."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator

from aiohttp import web

from extender.config import Settings
from extender.demandsource import DemandSource, NoPredictions, RedisPredictions
from extender.errors import LedgerUnavailable
from extender.http import handlers
from extender.http.admission import Admission
from extender.http.deadlines import Deadlines
from extender.http.keys import (
    ADMISSION,
    BODY_LIMIT,
    DEADLINES,
    DECODER,
    METRICS,
    READY,
    SCHEDULER,
)
from extender.http.middlewares import make_middleware
from extender.http.offload import BodyDecoder
from extender.interference.matrix import default_matrix, load_matrix
from extender.inventory import Inventory, load_node_conf_file
from extender.ledger.factory import open_ledger, redis_options
from extender.ledger.store import LedgerStore
from extender.metrics import LedgerHealthCollector, Metrics
from extender.placement import Policy, make_policy
from extender.placement.policies import sparse
from extender.service import Scheduler

log = logging.getLogger("sparse.app")


def extender_policy(name: str) -> Policy:
    """The policy as the extender runs it: sparse's share price tables are solved in a worker
    (``extender.pricesolver``), never inside a request, and a re-read mix or a new table is
    taken into use once the caches are priced for it (``extender.verbs.renewal``)."""
    if name == sparse.NAME:
        return sparse.Sparse(price_solve=sparse.DEFERRED, renew=sparse.PREPARED)
    return make_policy(name)


def build_scheduler(settings: Settings) -> Scheduler:
    inventory = load_node_conf_file(settings.nodes) if settings.nodes else Inventory({})
    ledger: LedgerStore = open_ledger(settings)
    predictions_url = settings.predictions or (
        settings.store if settings.store not in ("memory", "sqlite") else None
    )
    demand: DemandSource = (
        RedisPredictions.from_url(predictions_url, redis_options(settings))
        if predictions_url else NoPredictions()
    )
    matrix = load_matrix(settings.interference) if settings.interference else default_matrix()
    return Scheduler(
        inventory=inventory,
        ledger=ledger,
        matrix=matrix,
        policy=extender_policy(settings.policy),
        demand_source=demand,
        reservation_ttl_s=settings.reservation_ttl_s,
        bind_timeout_s=settings.bind_timeout_s,
        trust_request_inventory=settings.trust_request_inventory,
        filter_best_within=settings.filter_best_within,
        filter_best_single=settings.filter_best_single,
    )


def add_routes(app: web.Application, prefix: str) -> None:
    """The scheduling port: the four verbs and the probes."""
    app.router.add_post(f"{prefix}/filter", handlers.filter_)
    app.router.add_post(f"{prefix}/prioritize", handlers.prioritize)
    app.router.add_post(f"{prefix}/bind", handlers.bind)
    app.router.add_post(f"{prefix}/preempt", handlers.preempt)
    app.router.add_post(f"{prefix}/gangs/reserve", handlers.gang_reserve)
    app.router.add_post(f"{prefix}/gangs/release", handlers.gang_release)
    app.router.add_get("/healthz", handlers.healthz)
    app.router.add_get("/readyz", handlers.readyz)


def add_observability_routes(app: web.Application, prefix: str, inspect: bool) -> None:
    """/metrics, and /inspect unless turned off: on the scheduling port, or on --metrics-port."""
    app.router.add_get("/metrics", handlers.metrics)
    if inspect:
        app.router.add_get(f"{prefix}/inspect", handlers.inspect)
        app.router.add_get(f"{prefix}/inspect/{{node}}", handlers.inspect)


def make_metrics_app(settings: Settings, scheduler: Scheduler, metrics: Metrics) -> web.Application:
    app = web.Application(middlewares=[make_middleware(settings.prefix.rstrip("/"))])
    app[SCHEDULER] = scheduler
    app[METRICS] = metrics
    add_observability_routes(app, settings.prefix.rstrip("/"), settings.inspect)
    return app


async def _serve_metrics(settings: Settings, app: web.Application) -> web.AppRunner | None:
    if settings.metrics_port is None:
        return None
    runner = web.AppRunner(make_metrics_app(settings, app[SCHEDULER], app[METRICS]),
                           access_log=None)
    await runner.setup()
    await web.TCPSite(runner, settings.host, settings.metrics_port).start()
    log.info("metrics%s on port %d", " and inspect" if settings.inspect else "",
             settings.metrics_port)
    return runner


async def _expiry_loop(scheduler: Scheduler, interval_s: float) -> None:
    while True:
        await asyncio.sleep(interval_s)
        try:
            await scheduler.expire()
        except Exception:  # Redis blip: try again next round
            log.exception("reservation expiry failed")


LAG_INTERVAL_S = 0.02
async def _stop(task: asyncio.Task) -> None:
    """Cancel a background loop and wait for it to end, cancelling again until it does. A
    cancel that lands inside a Redis call can be swallowed there (Python 3.11 timeouts turn it
    into the call's TimeoutError, which the loop catches and goes on): seen as a pair-estimate
    poll still sleeping after its cancel, holding up shutdown for ever."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.1)
    with contextlib.suppress(asyncio.CancelledError):
        task.result()


FIRST_VIEW_BACKOFF_S = (0.1, 2.0)  # first and largest wait between tries


async def _first_view(scheduler: Scheduler) -> None:
    """The first read of the ledger, tried until the store answers: a replica started while its
    store is down (a failover, a restart) waits not-ready instead of exiting."""
    delay, largest = FIRST_VIEW_BACKOFF_S
    warned_at = None
    loop = asyncio.get_running_loop()
    while True:
        try:
            await scheduler.view()
            return
        except LedgerUnavailable as e:
            if warned_at is None or loop.time() - warned_at >= 10.0:
                log.warning("waiting for the GPU ledger before serving: %s", e)
                warned_at = loop.time()
        await asyncio.sleep(delay)
        delay = min(delay * 2, largest)


async def _lag_loop(metrics: Metrics) -> None:
    """Event-loop lag: how much later than asked a timer fires (work queued ahead of it)."""
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        await asyncio.sleep(LAG_INTERVAL_S)
        metrics.loop_lag.observe(max(loop.time() - started - LAG_INTERVAL_S, 0.0))


def make_app(settings: Settings, scheduler: Scheduler | None = None) -> web.Application:
    prefix = settings.prefix.rstrip("/")
    scheduler = scheduler or build_scheduler(settings)
    metrics = Metrics(lambda: scheduler.state)
    scheduler.observers.append(metrics.observe)
    metrics.registry.register(LedgerHealthCollector(scheduler))
    metrics.watch_cost_reuse(lambda: {
        ("cycle", "hit"): scheduler.cycle_costs.hits,
        ("cycle", "miss"): scheduler.cycle_costs.misses,
        ("shape", "hit"): scheduler.cost_cache.reused_gpus,
        ("shape", "miss"): scheduler.cost_cache.computed_nodes,
        ("node", "hit"): scheduler.node_verdicts.reused,
        ("node", "miss"): scheduler.node_verdicts.computed,
    })
    metrics.watch_price_tables(lambda: {"installed": scheduler.prices.installed,
                                        "dropped": scheduler.prices.dropped,
                                        "failed": scheduler.prices.failed})
    metrics.watch_renewals(lambda: {"renewed": scheduler.renewal.renewed,
                                    "failed": scheduler.renewal.failed})
    metrics.watch_renewal_work(lambda: (scheduler.renewal.steps, scheduler.renewal.step_seconds))
    metrics.watch_locality_waits(lambda: scheduler.locality_waits)
    limit = settings.body_limit_mib * 1024 * 1024
    app = web.Application(
        client_max_size=limit,
        middlewares=[make_middleware(prefix)],
        # Bodies are decompressed by read_body, streamed and bounded (gzip bombs, bad gzip).
        handler_args={"auto_decompress": False},
    )
    app[SCHEDULER] = scheduler
    app[METRICS] = metrics
    app[READY] = asyncio.Event()
    # Bodies held at once over all requests: room for two of the largest, and at least 256 MiB.
    app[ADMISSION] = Admission(settings.max_in_flight, settings.queue_timeout_s,
                               body_budget_bytes=max(2 * limit, 256 * 1024 * 1024))
    app[DECODER] = BodyDecoder(keep_annotations=settings.trust_request_inventory)
    app[DEADLINES] = Deadlines()  # read-only verbs' deadline, one timer for all requests
    app[BODY_LIMIT] = limit
    add_routes(app, prefix)
    if settings.metrics_port is None:
        add_observability_routes(app, prefix, settings.inspect)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        metrics_runner = await _serve_metrics(settings, app)
        kube = None
        if settings.kube_enabled:
            from extender.kube.integration import KubeIntegration

            kube = KubeIntegration(settings, scheduler)
            await kube.start()  # watches Nodes and Pods; rebuilds the ledger before ready
        else:
            await _first_view(scheduler)
        # What start-up built (inventory, rebuilt ledger, clients) lives as long as the process:
        # out of the cyclic collector's sight, a full collection no longer walks it (a 0.2 s
        # pause of the event loop at 5,000 nodes). Reference counting still frees it.
        gc.collect()  # garbage made so far is freed first, not frozen with the rest
        gc.freeze()
        if settings.start_price_worker:
            scheduler.prices.start()  # the worker imports while nothing waits on it
        app[READY].set()
        expiry = asyncio.create_task(_expiry_loop(scheduler, settings.expire_interval_s))
        health = asyncio.create_task(scheduler.health.run(scheduler.ledger))
        lag = asyncio.create_task(_lag_loop(metrics))
        tasks = [expiry, health, lag]
        if scheduler.live_pairs is not None:  # pair estimates read off the scheduling path
            tasks.append(asyncio.create_task(scheduler.live_pairs.poll()))
        follower = getattr(scheduler.ledger, "follower", None)
        if follower is not None:  # the ledger's change log read off the scheduling path
            tasks.append(asyncio.create_task(follower.run()))
        yield
        for task in tasks:
            await _stop(task)
        if kube is not None:
            await kube.stop()
        await scheduler.ledger.close()
        await scheduler.demand_source.close()
        await app[DECODER].close()
        scheduler.prices.close()
        if metrics_runner is not None:
            await metrics_runner.cleanup()

    app.cleanup_ctx.append(lifecycle)
    return app
