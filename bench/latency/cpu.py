"""python -m bench.latency.cpu: CPU time per filter + prioritize pod, in-process.

The real extender app and the null server (``bench.latency.servers``), each behind aiohttp's
test client on loopback in this one process, one scheduling cycle (filter, then prioritize)
at a time. What is reported is process CPU time per pod (client and server together), which
moves far less with the machine's load than wall-clock latency; the two servers take turns
pod by pod so that whatever else runs on the machine weighs on both alike. The null server's
figure is the floor any aiohttp extender pays; the difference is the extender's own work.
Bodies over a MiB (full Node objects) are decoded in the extender's decode worker process,
and the sparse policy's share price tables are solved in its price worker process: their CPU
time is read from /proc and counted with the extender's.

With ``--bind`` each pod is then bound (the extender's bind verb, ledger only, not counted) to
the node it scored best, as in a real burst: the next pod's filter finds that node changed and
prices it again, work a run without binds never does. The binds' own CPU per pod is printed
apart, with how many took filter's per-GPU pick instead of re-planning.
"""

from __future__ import annotations

import asyncio
import time

import click
import msgspec
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from bench.latency.cluster import request_bodies, synthetic_inventory
from bench.latency.servers import extender_app, null_app
from bench.procstat import cpu_seconds
from extender.cli import use_fast_event_loop
from extender.http.keys import DECODER, SCHEDULER
from extender.placement.policies.sparse import DEFERRED, PRICE_SOLVES
from extender.protocol import ExtenderArgs, FilterResult, HostPriority

WARM_UP = 100  # pods per server before measuring (fills the extender's shape cache)
HEADERS = {"Content-Type": "application/json"}


TWO_CALL = ("filter", "prioritize")


async def _cycle(client: TestClient, body: bytes, verbs: tuple[str, ...] = TWO_CALL) -> bytes:
    """One scheduling cycle; the last verb's answer."""
    answer = b""
    for verb in verbs:
        resp = await client.post(f"/scheduler/{verb}", data=body, headers=HEADERS)
        answer = await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{verb} -> HTTP {resp.status}")
    return answer


async def _bind_best(client: TestClient, body: bytes, answer: bytes) -> None:
    """Bind the pod of ``body`` to the first best node of the cycle's ``answer`` (a
    HostPriorityList, or a filter answer's NodeNames)."""
    pod = msgspec.json.decode(body)["Pod"]["metadata"]
    reply = msgspec.json.decode(answer)
    if isinstance(reply, list):
        if not reply:
            return
        node = max(reply, key=lambda h: h["Score"])["Host"]
    elif reply.get("NodeNames"):
        node = reply["NodeNames"][0]
    else:
        return
    args = {"PodName": pod["name"], "PodNamespace": pod["namespace"], "PodUID": pod["uid"],
            "Node": node}
    resp = await client.post("/scheduler/bind", data=msgspec.json.encode(args), headers=HEADERS)
    await resp.read()


def price_worker_cpu_s(app: web.Application) -> float:
    """CPU seconds of the app's share price worker (the policy's value tables are solved
    there); 0 when it has none."""
    prices = getattr(app.get(SCHEDULER), "prices", None)
    return sum(cpu_seconds(pid) for pid in (prices.worker_pids() if prices is not None else ()))


def helper_cpu_s(app: web.Application) -> float:
    """CPU seconds of the app's helper processes, from /proc: the decode worker (big bodies
    are decoded there) and the share price worker, out of this process's own CPU time; 0
    when it has none."""
    total = price_worker_cpu_s(app)
    decoder = app.get(DECODER)
    proc = getattr(decoder, "_proc", None)
    if proc is not None and proc.returncode is None:
        total += cpu_seconds(proc.pid)
    return total


async def cpu_per_pod(apps: dict[str, web.Application], bodies: list[bytes],
                      verbs: tuple[str, ...] = TWO_CALL, bind: bool = False,
                      rotate: bool = False) -> dict[str, float]:
    """CPU ms per pod for each app over ``bodies[WARM_UP:]``, the apps taking turns; the
    decode worker's CPU counts with its app. ``verbs``: the calls of one scheduling cycle;
    ``bind``: the extender binds each pod after its cycle (not counted); ``rotate``: the
    app that goes first changes pod by pod (the first to serve a pod meets colder CPU
    caches than the next, which serves the same bytes through the same aiohttp code: tens
    of microseconds a pod), else the order of ``apps`` every time."""
    clients = {kind: TestClient(TestServer(app)) for kind, app in apps.items()}
    spent = dict.fromkeys(apps, 0.0)
    spent["bind"] = 0.0  # the extender's binds, apart
    spent["prices"] = 0.0  # the price worker's part of the extender's
    try:
        for client in clients.values():
            await client.start_server()
        for body in bodies[:WARM_UP]:
            for kind, client in clients.items():
                answer = await _cycle(client, body, verbs)
                if bind and kind == "extender":
                    await _bind_best(client, body, answer)
        for app in apps.values():  # a helper's start-up is not a pod's work
            prices = getattr(app.get(SCHEDULER), "prices", None)
            while prices is not None and prices.starting:
                await asyncio.sleep(0.05)
        helpers = {kind: helper_cpu_s(app) for kind, app in apps.items()}
        prices = price_worker_cpu_s(apps["extender"]) if "extender" in apps else 0.0
        order = list(clients.items())
        for i, body in enumerate(bodies[WARM_UP:]):
            shift = i % len(order) if rotate else 0
            for kind, client in order[shift:] + order[:shift]:
                started = time.process_time()
                answer = await _cycle(client, body, verbs)
                spent[kind] += time.process_time() - started
                if bind and kind == "extender":
                    started = time.process_time()
                    await _bind_best(client, body, answer)
                    spent["bind"] += time.process_time() - started
        for kind, app in apps.items():  # clock ticks: summed over the run, not per pod
            spent[kind] += helper_cpu_s(app) - helpers[kind]
        if "extender" in apps:
            spent["prices"] = price_worker_cpu_s(apps["extender"]) - prices
    finally:
        for client in clients.values():
            await client.close()
    return {kind: 1000 * s / max(len(bodies) - WARM_UP, 1) for kind, s in spent.items()}


def answer_without_placement(app: web.Application) -> None:
    """Filter passes every candidate, prioritize scores each 0: what is left is the HTTP
    layer (admission, read, decode, metrics, encode) against the null server's."""

    async def filter_(args: ExtenderArgs) -> FilterResult:
        return FilterResult(NodeNames=args.node_names)

    async def prioritize(args: ExtenderArgs) -> list[HostPriority]:
        return [HostPriority(n, 0) for n in args.node_names]

    app[SCHEDULER].filter = filter_
    app[SCHEDULER].prioritize = prioritize


@click.command()
@click.option("--nodes", "scales", multiple=True, type=int, default=(500, 5000),
              show_default=True)
@click.option("--gpus", default=8, show_default=True)
@click.option("--candidates", default=500, show_default=True)
@click.option("--requests", "count", default=300, show_default=True,
              help="Measured pods with NodeNames (a fifth of it with full Nodes).")
@click.option("--full/--no-full", default=True, show_default=True,
              help="Also measure full Node objects.")
@click.option("--filter-only", is_flag=True,
              help="Filter alone per pod (no prioritizeVerb): the extender answers its best"
                   " nodes (--filter-best-within 0), the null server passes every node.")
@click.option("--single", is_flag=True,
              help="With --filter-only: the extender answers its one best node"
                   " (--filter-best-single), as the throughput bench's filter-one.")
@click.option("--burst", is_flag=True,
              help="Replicas of one pod shape, each offered the next window of nodes in"
                   " order (kube-scheduler's search in a burst); else random shapes and"
                   " random samples of the nodes.")
@click.option("--stub-verbs", is_flag=True,
              help="Answer filter and prioritize without placement: the HTTP layer alone.")
@click.option("--bind", is_flag=True,
              help="Bind each pod to its best node after its cycle (not counted), as in a"
                   " real burst: the next filter prices the node that changed.")
@click.option("--rotate", is_flag=True,
              help="The server that goes first changes pod by pod (default: the extender,"
                   " as in earlier runs): the first to serve a pod meets colder caches.")
@click.option("--price-solve", type=click.Choice(PRICE_SOLVES), default=DEFERRED,
              show_default=True,
              help="Where the sparse policy's share price tables are solved: in the extender's"
                   " worker process (deferred, as shipped) or in the request (inline).")
def main(scales: tuple[int, ...], gpus: int, candidates: int, count: int, full: bool,
         filter_only: bool, single: bool, burst: bool, stub_verbs: bool, bind: bool,
         rotate: bool, price_solve: str) -> None:
    """CPU ms per pod, extender and null server, NodeNames and full Nodes."""
    if single and not filter_only:
        raise click.UsageError("--single answers one node of filter alone: add --filter-only")
    use_fast_event_loop()
    for nodes in scales:
        inventory = synthetic_inventory(nodes, gpus)
        picks = min(candidates, nodes)
        for mode, is_full in (("NodeNames", False), ("full Nodes", True)):
            if is_full and not full:
                continue
            n = count if not is_full else max(count // 5, 20)
            bodies = request_bodies(inventory, n + WARM_UP, picks, is_full, burst=burst)
            apps = {"extender": extender_app(nodes, gpus, price_solve), "null": null_app()}
            if filter_only:
                apps["extender"][SCHEDULER].filter_best_within = 0.0
                apps["extender"][SCHEDULER].filter_best_single = single
            if stub_verbs:
                answer_without_placement(apps["extender"])
            row = asyncio.run(cpu_per_pod(apps, bodies,
                                          ("filter",) if filter_only else TWO_CALL, bind,
                                          rotate))
            click.echo(f"{nodes:>6} nodes, {picks} {mode:10}"
                       f"{' (filter only)' if filter_only else ''}"
                       f"{', one answered' if filter_only and single else ''}"
                       f"{', one shape in a moving window' if burst else ''}"
                       f"{', bound' if bind else ''}: extender {row['extender']:.2f}"
                       f" ms CPU/pod, null {row['null']:.2f} ms, ratio"
                       f" {row['extender'] / row['null']:.2f}x, above null"
                       f" {row['extender'] - row['null']:.2f} ms")
            prices = apps["extender"][SCHEDULER].prices
            if prices.installed or prices.dropped or prices.failed:
                click.echo(f"{'':>14}share price tables solved in the worker: installed"
                           f" {prices.installed}, dropped {prices.dropped}, failed"
                           f" {prices.failed}; its CPU {row['prices']:.3f} ms/pod, counted"
                           " with the extender's")
            # (read after the run: a renewal replaces the verdicts, carrying the counters)
            verdicts = apps["extender"][SCHEDULER].node_verdicts
            if bind:
                click.echo(f"{'':>14}bind {row['bind']:.2f} ms CPU/pod; filter's pick taken"
                           f" by {verdicts.bind_reused} of {len(bodies)} binds")


if __name__ == "__main__":
    main()
