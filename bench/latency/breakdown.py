"""python -m bench.latency.breakdown: where one filter + prioritize pair's CPU goes.

The requests and servers of ``bench.latency.cpu`` (the real extender app over a half-booked
in-memory ledger, the null server), in this one process through aiohttp's test client. The
functions of the request path are wrapped with a thread-CPU timer (about a microsecond each
per call, counted in the figures) and each one's CPU per pod is printed, inclusive, as a tree:
the HTTP handler (body read, decode, the verbs and their steps, the answer's encoding), the
rest being aiohttp's server and the test client, which the null server pays too. The null
server is timed the same way around its handler. Then the same pods once more without the
wrappers, the two servers taking turns, for the plain totals. ``--cprofile`` adds cProfile's
top functions by own time (its overhead inflates small Python calls).
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import pstats
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from bench.latency.cluster import request_bodies, synthetic_inventory
from bench.latency.cpu import WARM_UP, _cycle, cpu_per_pod
from bench.latency.servers import extender_app, null_app
from extender.cli import use_fast_event_loop

clock = time.thread_time


class Timings:
    """Inclusive CPU seconds per named step, and each step's parent (the step it ran in)."""

    def __init__(self) -> None:
        self.total: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.parent: dict[str, str | None] = {}
        self._stack: list[str] = []
        self.on = False

    def enter(self, name: str) -> float:
        if self.on:
            self.parent.setdefault(name, self._stack[-1] if self._stack else None)
        self._stack.append(name)
        return clock()

    def leave(self, name: str, started: float) -> None:
        spent = clock() - started
        self._stack.pop()
        if self.on:
            self.total[name] = self.total.get(name, 0.0) + spent
            self.calls[name] = self.calls.get(name, 0) + 1

    def children(self, name: str | None) -> list[str]:
        return [k for k, p in self.parent.items() if p == name and k in self.total]


def _wrap(timings: Timings, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    if asyncio.iscoroutinefunction(fn):
        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            started = timings.enter(name)
            try:
                return await fn(*args, **kwargs)
            finally:
                timings.leave(name, started)
        return timed_async

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = timings.enter(name)
        try:
            return fn(*args, **kwargs)
        finally:
            timings.leave(name, started)
    return timed


# (module or class, attribute, step name): the request path's steps, patched where they are
# looked up (a module's global name, or a class attribute).
def _steps() -> list[tuple[Any, str, str]]:
    from extender import service
    from extender.http import handlers, offload
    from extender.placement.policies import sparse
    from extender.verbs import costcache, nodecache, prioritize
    from extender.verbs import filter as filter_verb
    from extender.verbs.costcache import CycleEntry

    return [
        (handlers, "read_body", "read body"),
        (offload.BodyDecoder, "decode", "decode (typed, names checked)"),
        (service.Scheduler, "filter", "filter verb"),
        (service.Scheduler, "demand_of", "pod demand"),
        (service.Scheduler, "view", "ledger view"),
        (nodecache.NodeVerdicts, "fits", "fit verdicts (name -> row, fits, reasons)"),
        (nodecache.NodeVerdicts, "costs", "cost verdicts (cost cache, refills)"),
        (nodecache, "shape_key", "shape key"),
        (nodecache.NodeVerdicts, "_reasons", "failing nodes' reasons"),
        (nodecache.NodeVerdicts, "_fill_fits", "refill of stale nodes' fits"),
        (nodecache.NodeVerdicts, "_terms", "policy's cost terms"),
        (nodecache.NodeVerdicts, "_fill_costs", "refill of stale nodes' costs"),
        (nodecache.NodeVerdicts, "_every_masks", "masks of every node (kept)"),
        (nodecache, "node_costs_and_choices", "node costs and picks"),
        (costcache.CostCache, "costs", "cost cache: the terms' values"),
        (costcache.CostCache, "_filled", "cost cache entry brought up to date"),
        (costcache, "add_terms", "terms added"),
        (sparse.Sparse, "_frag_raw", "sparse: fragmentation per task (raw)"),
        (sparse.Sparse, "_solve_prices", "sparse: share price table solved (inline)"),
        (sparse.Sparse, "_remainder_term", "sparse: remainder term"),
        (filter_verb, "parse_embedding", "embedding annotation"),
        (filter_verb.protocol, "filter_result", "filter answer built"),
        (CycleEntry, "of", "cycle entry kept"),
        (service.Scheduler, "prioritize", "prioritize verb"),
        (prioritize, "cycle_costs", "filter's costs taken"),
        (prioritize, "with_locality", "locality term"),
        (prioritize, "scores_from_costs", "scores 0-10"),
        (prioritize, "host_priorities", "HostPriority list"),
        (handlers, "_json", "answer encoded"),
        (offload, "decode_verb", "msgspec decode + checks"),
    ]


@contextmanager
def instrumented(timings: Timings, apps: dict[str, web.Application]) -> Iterator[None]:
    saved = []
    for owner, attr, name in _steps():
        if attr not in vars(owner):  # a step the code no longer has: not timed
            continue
        fn = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
        kind = type(fn) if isinstance(fn, classmethod | staticmethod) else None
        wrapped = _wrap(timings, name, fn.__func__ if kind is not None else fn)
        saved.append((owner, attr, fn))
        setattr(owner, attr, kind(wrapped) if kind is not None else wrapped)
    for kind, app in apps.items():
        @web.middleware
        async def outer(request: web.Request, handler: Any, kind: str = kind) -> Any:
            started = timings.enter(f"{kind}: server handler")
            try:
                return await handler(request)
            finally:
                timings.leave(f"{kind}: server handler", started)
        app.middlewares.insert(0, outer)
    try:
        yield
    finally:
        for owner, attr, fn in saved:
            setattr(owner, attr, fn)


async def _timed_run(apps: dict[str, web.Application], bodies: list[bytes], timings: Timings,
                     profile: cProfile.Profile | None) -> dict[str, float]:
    clients = {kind: TestClient(TestServer(app)) for kind, app in apps.items()}
    spent = dict.fromkeys(apps, 0.0)
    try:
        for client in clients.values():
            await client.start_server()
        for body in bodies[:WARM_UP]:
            for client in clients.values():
                await _cycle(client, body)
        timings.on = True
        for body in bodies[WARM_UP:]:
            for kind, client in clients.items():
                started = clock()
                if profile is not None and kind == "extender":
                    profile.enable()
                await _cycle(client, body)
                if profile is not None and kind == "extender":
                    profile.disable()
                spent[kind] += clock() - started
        timings.on = False
    finally:
        for client in clients.values():
            await client.close()
    return spent


def _print_tree(timings: Timings, pods: int, name: str | None, depth: int) -> None:
    for child in timings.children(name):
        us = 1e6 * timings.total[child] / pods
        calls = timings.calls[child] / pods
        click.echo(f"{'  ' * depth}{child:<{52 - 2 * depth}} {us:8.1f} us/pod"
                   f"  ({calls:.2f} calls/pod)")
        _print_tree(timings, pods, child, depth + 1)


@click.command()
@click.option("--nodes", default=500, show_default=True)
@click.option("--gpus", default=8, show_default=True)
@click.option("--candidates", default=500, show_default=True)
@click.option("--requests", "count", default=1000, show_default=True)
@click.option("--cprofile", "with_cprofile", is_flag=True,
              help="Also print cProfile's top functions (extender only) by own time.")
def main(nodes: int, gpus: int, candidates: int, count: int, with_cprofile: bool) -> None:
    """CPU per filter + prioritize pair, step by step, extender against the null server."""
    use_fast_event_loop()
    inventory = synthetic_inventory(nodes, gpus)
    bodies = request_bodies(inventory, count + WARM_UP, min(candidates, nodes), False)
    apps = {"extender": extender_app(nodes, gpus), "null": null_app()}
    timings = Timings()
    profile = cProfile.Profile() if with_cprofile else None
    with instrumented(timings, apps):
        spent = asyncio.run(_timed_run(apps, bodies, timings, profile))
    click.echo(f"{nodes} nodes, {candidates} NodeNames, {count} pods (instrumented):")
    for kind in apps:
        total = 1e6 * spent[kind] / count
        handler = 1e6 * timings.total.get(f"{kind}: server handler", 0.0) / count
        click.echo(f"{kind}: {total:.1f} us/pod in all; aiohttp server and test client"
                   f" {total - handler:.1f}")
        for root in timings.children(None):
            if root.startswith(f"{kind}:"):
                click.echo(f"  {root:<50} {1e6 * timings.total[root] / count:8.1f} us/pod")
                _print_tree(timings, count, root, 2)
    plain = asyncio.run(cpu_per_pod({"extender": extender_app(nodes, gpus), "null": null_app()},
                                    bodies))
    click.echo(f"plain (no wrappers): extender {plain['extender']:.3f} ms CPU/pod, null"
               f" {plain['null']:.3f} ms, ratio {plain['extender'] / plain['null']:.2f}x,"
               f" above null {plain['extender'] - plain['null']:.3f} ms")
    if profile is not None:
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(30)
        click.echo(out.getvalue())


if __name__ == "__main__":
    main()
