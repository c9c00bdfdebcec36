"""Request handlers: a few lines each (decode -> service -> encode)."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from extender import protocol
from extender.http.keys import METRICS, READY, SCHEDULER
from extender.protocol import encode


def _json(payload: object, status: int = 200) -> web.Response:
    return web.Response(body=encode(payload), status=status, content_type="application/json")


async def filter_(request: web.Request) -> web.Response:
    args = protocol.decode_extender_args(await request.read(), "ExtenderArgs (filter)")
    return _json(await request.app[SCHEDULER].filter(args))


async def prioritize(request: web.Request) -> web.Response:
    args = protocol.decode_extender_args(await request.read(), "ExtenderArgs (prioritize)")
    return _json(await request.app[SCHEDULER].prioritize(args))


async def bind(request: web.Request) -> web.Response:
    args = protocol.decode_binding_args(await request.read())
    return _json(await request.app[SCHEDULER].bind(args))


async def preempt(request: web.Request) -> web.Response:
    args = protocol.decode_preemption_args(await request.read())
    return _json(await request.app[SCHEDULER].preempt(args))


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def readyz(request: web.Request) -> web.Response:
    if not request.app[READY].is_set():
        return web.Response(text="not ready: ledger not rebuilt yet", status=503)
    health = request.app[SCHEDULER].health
    if not health.ok:
        return web.Response(text=f"not ready: GPU ledger unreachable: {health.problem}",
                            status=503)
    return web.Response(text="ok")


async def metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[METRICS].registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def _gpu_view(state, i: int) -> dict[str, object]:
    return {
        "uuid": state.gpu_uuid[i],
        "model": state.models[state.gpu_model[i]],
        "memory_mib": int(state.mem_cap[i]),
        "memory_reserved_mib": int(state.mem_used[i]),
        "milli_reserved": int(state.milli_used[i]),
        "pods": [],
    }


async def inspect(request: web.Request) -> web.Response:
    """Read-only view of the ledger: nodes -> GPUs -> pods holding a part of them."""
    scheduler = request.app[SCHEDULER]
    state = await scheduler.view()
    wanted = request.match_info.get("node")
    if wanted is not None and wanted not in state.node_index:
        return _json({"error": f"node {wanted!r} is not in the GPU inventory"}, status=404)
    names = [wanted] if wanted is not None else state.node_names
    nodes = []
    for name in names:
        n = state.node_index[name]
        gpus = {state.gpu_uuid[i]: _gpu_view(state, i) for i in state.gpus_of(n)}
        nodes.append({"name": name, "gpus": list(gpus.values())})
        for r in state.reservations.values():
            if r.node != name:
                continue
            for a in r.allocations:
                if a.gpu in gpus:
                    gpus[a.gpu]["pods"].append({
                        "pod": f"{r.namespace}/{r.name}", "uid": r.pod_uid,
                        "container": a.container, "memory_mib": a.mem_mib, "milli": a.milli,
                        "job_class": r.job_class, "state": r.state,
                    })
    orphans = [{"pod": f"{r.namespace}/{r.name}", "uid": r.pod_uid, "node": r.node}
               for r in state.orphans.values()]
    return _json({"version": state.version, "policy": scheduler.policy.name, "nodes": nodes,
                  "orphans": orphans})
