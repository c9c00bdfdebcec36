"""Request handlers: a few lines each (decode -> service -> encode)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from extender import stages
from extender.errors import InvalidRequest, Overloaded
from extender.http.admission import BodyHold
from extender.http.body import read_body
from extender.http.keys import (
    ADMISSION,
    BODY_LIMIT,
    DEADLINES,
    DECODER,
    METRICS,
    READY,
    SCHEDULER,
)
from extender.protocol import BindingResult, FilterResult, PreemptionResult, encode
from extender.verbs import gang

log = logging.getLogger("sparse.http")

# A frozen store must not hold a read-only verb past the scheduler's httpTimeout (5 s by
# default, a slot may already have been waited for): cut it short (at most the deadlines'
# tick, 0.1 s, later) and answer Error. Bind is not cut: a write cancelled half way could
# leave a booking; it relies on the store client's own timeouts, and rolls back when they
# fire.
READ_ONLY_DEADLINE_S = 2.5


def _json(payload: object, status: int = 200) -> web.Response:
    return web.Response(body=encode(payload), status=status, content_type="application/json")


def _failure(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


async def _verb(request: web.Request, verb: str, failed: Callable[[str], Any]) -> web.Response:
    """Admission, bounded read, decode (4xx when malformed), then the verb. Anything that goes
    wrong past the decode (overload, an unreachable store, a bug) is the verb's own error
    answer with HTTP 200, which the scheduler retries; never a 5xx."""
    app = request.app
    metrics = app[METRICS]
    try:
        admission = app[ADMISSION]
        with stages.recording() as times:
            try:
                async with admission.slot():
                    with admission.bodies.hold() as hold:
                        return await _serve(request, verb, failed, hold)
            finally:
                metrics.observe_stages(verb, times)
    except Overloaded as exc:
        metrics.failures.labels(verb, "overloaded").inc()
        return _json(failed(str(exc)))


async def _serve(request: web.Request, verb: str, failed: Callable[[str], Any],
                 hold: BodyHold) -> web.Response:
    app = request.app
    with stages.stage("read"):
        body = await read_body(request, app[BODY_LIMIT], hold)
    try:
        with stages.stage("decode"):
            args = await app[DECODER].decode(verb, body)
        deadline = None if verb == "bind" else READ_ONLY_DEADLINE_S
        async with app[DEADLINES].within(deadline):  # asyncio's timeout, no timer each
            with stages.stage("verb"):
                answer = await getattr(app[SCHEDULER], verb)(args)
        with stages.stage("encode"):
            return _json(answer)
    except InvalidRequest:
        raise  # malformed: 4xx with the message (middleware)
    except Exception as exc:
        log.exception("%s failed; answered as an Error for the scheduler to retry", verb)
        app[METRICS].failures.labels(verb, "error").inc()
        return _json(failed(f"{verb} failed on this replica ({_failure(exc)}); retry"))


async def filter_(request: web.Request) -> web.Response:
    return await _verb(request, "filter", lambda why: FilterResult(Error=why))


async def prioritize(request: web.Request) -> web.Response:
    # HostPriorityList has no Error field; no scores = no contribution (errors are ignored).
    return await _verb(request, "prioritize", lambda why: [])


async def bind(request: web.Request) -> web.Response:
    return await _verb(request, "bind", lambda why: BindingResult(Error=why))


async def preempt(request: web.Request) -> web.Response:
    # No Error field either: no node is offered for preemption until the next attempt.
    return await _verb(request, "preempt", lambda why: PreemptionResult())


async def _gang(request: web.Request, verb: str, decode: Callable[[bytes], Any],
                call: Callable[[Any], Any]) -> web.Response:
    """Gang admission from the job controller: the same admission, bounded read and error
    answers as the scheduler's verbs (malformed: 4xx; a store failure: 503 with a message,
    which the controller retries)."""
    app = request.app
    try:
        async with app[ADMISSION].slot():
            with app[ADMISSION].bodies.hold() as hold:
                body = await read_body(request, app[BODY_LIMIT], hold)
                args = decode(body)
                try:
                    return _json(await call(args))
                except InvalidRequest:
                    raise
                except Exception as exc:
                    log.exception("%s failed", verb)
                    app[METRICS].failures.labels(verb, "error").inc()
                    return _json({"error": f"{verb} failed ({_failure(exc)}); retry"}, 503)
    except Overloaded as exc:
        app[METRICS].failures.labels(verb, "overloaded").inc()
        return _json({"error": str(exc)}, 503)


async def gang_reserve(request: web.Request) -> web.Response:
    scheduler = request.app[SCHEDULER]
    return await _gang(request, "gang_reserve", gang.decode_reserve,
                       lambda req: gang.reserve(scheduler, req))


async def gang_release(request: web.Request) -> web.Response:
    scheduler = request.app[SCHEDULER]

    async def release(req: Any) -> dict[str, list[str]]:
        return {"released": await gang.release(scheduler, req)}

    return await _gang(request, "gang_release", gang.decode_release, release)


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
    body = request.app[METRICS].render()
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
    """Read-only view of the ledger: nodes -> GPUs -> pods holding a part of them (and, where
    a node's embedding cache published, what the locality term knows of it)."""
    scheduler = request.app[SCHEDULER]
    state = await scheduler.view(fresh=True)  # exactly what the store holds now
    wanted = request.match_info.get("node")
    if wanted is not None and wanted not in state.node_index:
        return _json({"error": f"node {wanted!r} is not in the GPU inventory"}, status=404)
    names = [wanted] if wanted is not None else state.node_names
    nodes = []
    for name in names:
        n = state.node_index[name]
        gpus = {state.gpu_uuid[i]: _gpu_view(state, i) for i in state.gpus_of(n)}
        node = {"name": name, "gpus": list(gpus.values())}
        cache = scheduler.locality.cache_of(name)
        if cache:  # what the locality term reads of the node's embedding cache
            node["embedding_cache"] = cache
        nodes.append(node)
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
    h = scheduler.holds.hold  # the node held for a waiting gang (placement/holds.py)
    hold = None if h is None else {"owner": h.owner, "node": h.name, "gpus": h.gpus,
                                   "start_s": h.start_s}
    # readers waiting for a node whose cache holds their tables (verbs/localitywait.py)
    waiting = scheduler.reader_waits.waiting(scheduler.clock(),
                                             scheduler.locality.weights.max_wait_s)
    return _json({"version": state.version, "policy": scheduler.policy.name, "nodes": nodes,
                  "orphans": orphans, "hold": hold, "locality_waiting": waiting})
