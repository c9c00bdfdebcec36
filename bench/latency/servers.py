"""The two servers under test, each run in its own process: the real extender app over a
pre-booked in-memory ledger, and a null aiohttp server that only parses and echoes."""

from __future__ import annotations

import asyncio
import sys
import time

import aiohttp
import msgspec
from aiohttp import web

from bench.latency.cluster import half_occupancy, synthetic_inventory
from extender.cli import use_fast_event_loop
from extender.config import Settings
from extender.http.app import extender_policy, make_app
from extender.interference import default_matrix
from extender.ledger.memory import MemoryLedger
from extender.placement.policies.sparse import DEFERRED, Sparse
from extender.service import Scheduler


def extender_app(nodes: int, gpus: int, price_solve: str = DEFERRED) -> web.Application:
    """``price_solve``: where the sparse policy's share price tables are solved (the
    extender's own choice, a worker process; or inline, in the request, as before)."""
    inventory = synthetic_inventory(nodes, gpus)
    ledger = MemoryLedger()
    capacities = {g.uuid: g.memory_mib for n in inventory.nodes.values() for g in n.gpus}

    async def book() -> None:
        from extender.ledger.rules import GpuCapacity

        for r in half_occupancy(inventory):
            await ledger.reserve(r, {u: GpuCapacity(capacities[u]) for u in r.gpus})

    asyncio.run(book())
    policy = extender_policy("sparse") if price_solve == DEFERRED else Sparse()
    scheduler = Scheduler(inventory=inventory, ledger=ledger, matrix=default_matrix(),
                          policy=policy)
    # The price worker is started by the first re-read of the mix in a real extender: here
    # now, so that its start-up (imports) is not counted as a pod's work.
    scheduler.prices.start()
    return make_app(Settings(max_body_mib=256), scheduler=scheduler)


async def cycle(session: aiohttp.ClientSession, port: int, body: bytes) -> None:
    """One scheduling cycle of kube-scheduler against the server on ``port``: filter, then
    prioritize, with the same body."""
    for verb in ("filter", "prioritize"):
        async with session.post(f"http://127.0.0.1:{port}/scheduler/{verb}", data=body,
                                headers={"Content-Type": "application/json"}) as r:
            await r.read()
            if r.status != 200:
                raise RuntimeError(f"{verb} -> HTTP {r.status}")


async def wait_ready(port: int, timeout_s: float = 300, interval_s: float = 0.2) -> None:
    """Poll ``/readyz`` on localhost until it answers 200."""
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(f"http://127.0.0.1:{port}/readyz") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(interval_s)
    raise RuntimeError(f"server on port {port} did not become ready in {timeout_s:.0f} s")


def null_app() -> web.Application:
    """Parses the body as JSON and echoes what a filter/prioritize reply needs, nothing else."""

    async def handle(request: web.Request) -> web.Response:
        args = msgspec.json.decode(await request.read())
        names = args.get("NodeNames")
        if request.path.endswith("/prioritize"):
            hosts = names or [n["metadata"]["name"] for n in args["Nodes"]["items"]]
            reply = [{"Host": h, "Score": 0} for h in hosts]
        elif names is not None:
            reply = {"NodeNames": names, "FailedNodes": {}, "Error": ""}
        else:
            reply = {"Nodes": args["Nodes"], "FailedNodes": {}, "Error": ""}
        return web.Response(body=msgspec.json.encode(reply), content_type="application/json")

    async def ready(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=256 * 1024 * 1024)
    app.router.add_post("/scheduler/filter", handle)
    app.router.add_post("/scheduler/prioritize", handle)
    app.router.add_get("/readyz", ready)
    return app


if __name__ == "__main__":
    kind, port, nodes, gpus = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    use_fast_event_loop()  # both servers on the event loop the extender's CLI uses
    app = extender_app(nodes, gpus) if kind == "extender" else null_app()
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)
