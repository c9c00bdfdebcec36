"""A null extender for the throughput bench: the same four verbs over the same protocol as
sparse's, answered instantly. filter passes every candidate, prioritize scores all 0, bind
creates the Binding in one API call (a binding extender cannot do less), preempt agrees with
the scheduler. It is the ceiling any extender can reach through kube-scheduler: what it
costs beyond the stock scheduler is the protocol's (serial filter and prioritize round trips,
JSON on the scheduler's side, the Binding call), not any placement. With ``one``, filter
passes only the first candidate (as an extender answering its single best node would), and
kube-scheduler, left with one feasible node, skips its own scoring. With ``burn_ms``,
filter first spends that much CPU: an extender that costs so much more per pod, and nothing
else, to tell what its CPU alone does to the run (the machine's cores are shared).

    python -m bench.throughput.null_extender PORT API_SERVER TOKEN [one] [BURN_MS]
"""

from __future__ import annotations

import ssl
import sys
import time

import aiohttp
import msgspec
from aiohttp import web

from extender.cli import use_fast_event_loop

JSON = "application/json"


def burn(seconds: float) -> None:
    """Spend ``seconds`` of this process's CPU (a stand-in for an extender's own work)."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def null_app(api_server: str, token: str, one: bool = False, burn_ms: float = 0.0
             ) -> web.Application:
    session: dict[str, aiohttp.ClientSession] = {}

    async def open_session(app: web.Application) -> None:
        insecure = ssl.create_default_context()  # the local test API server's own certificate
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        session["api"] = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=insecure, limit=64),
            headers={"Authorization": f"Bearer {token}", "Content-Type": JSON})

    async def close_session(app: web.Application) -> None:
        await session["api"].close()

    async def filter_(request: web.Request) -> web.Response:
        args = msgspec.json.decode(await request.read())
        if burn_ms:
            burn(burn_ms / 1000)
        names = args.get("NodeNames")
        if one and names is not None:
            names = names[:1]
        reply = ({"NodeNames": names, "FailedNodes": {}, "Error": ""} if names is not None
                 else {"Nodes": args.get("Nodes"), "FailedNodes": {}, "Error": ""})
        return web.Response(body=msgspec.json.encode(reply), content_type=JSON)

    async def prioritize(request: web.Request) -> web.Response:
        args = msgspec.json.decode(await request.read())
        hosts = args.get("NodeNames") or [n["metadata"]["name"]
                                          for n in (args.get("Nodes") or {}).get("items", [])]
        return web.Response(body=msgspec.json.encode([{"Host": h, "Score": 0} for h in hosts]),
                            content_type=JSON)

    async def bind(request: web.Request) -> web.Response:
        args = msgspec.json.decode(await request.read())
        ns, name = args["PodNamespace"], args["PodName"]
        body = {"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name, "namespace": ns, "uid": args["PodUID"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": args["Node"]}}
        async with session["api"].post(f"{api_server}/api/v1/namespaces/{ns}/pods/{name}/binding",
                                       data=msgspec.json.encode(body)) as resp:
            error = "" if resp.status < 300 else f"HTTP {resp.status}: {await resp.text()}"
        return web.Response(body=msgspec.json.encode({"Error": error}), content_type=JSON)

    async def preempt(request: web.Request) -> web.Response:
        args = msgspec.json.decode(await request.read())
        victims = args.get("NodeNameToMetaVictims") or {}
        return web.Response(body=msgspec.json.encode({"NodeNameToMetaVictims": victims}),
                            content_type=JSON)

    async def ready(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=256 * 1024 * 1024)
    app.on_startup.append(open_session)
    app.on_cleanup.append(close_session)
    app.router.add_post("/scheduler/filter", filter_)
    app.router.add_post("/scheduler/prioritize", prioritize)
    app.router.add_post("/scheduler/bind", bind)
    app.router.add_post("/scheduler/preempt", preempt)
    app.router.add_get("/readyz", ready)
    return app


if __name__ == "__main__":
    port, api_server, token = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    use_fast_event_loop()  # the event loop the extender's CLI uses
    rest = sys.argv[4:]
    one = "one" in rest
    burn_ms = float(next((a for a in rest if a != "one"), 0.0))
    web.run_app(null_app(api_server, token, one=one, burn_ms=burn_ms), host="127.0.0.1",
                port=port, print=None, access_log=None)
