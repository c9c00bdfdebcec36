"""Domain errors -> HTTP status with a message; per-verb request counts and latency."""

from __future__ import annotations

import logging
import time
from typing import Any

from aiohttp import web

from extender.errors import SparseError
from extender.http.keys import METRICS
from extender.protocol import encode

log = logging.getLogger("sparse.http")


def make_middleware(prefix: str) -> web.middleware:
    verbs = {f"{prefix}/{v}": v for v in ("filter", "prioritize", "bind", "preempt")}
    children: dict[tuple[object, str, int], tuple[Any, Any]] = {}  # labels() once per pair

    def count(metrics: Any, verb: str, status: int, seconds: float) -> None:
        key = (metrics, verb, status)
        pair = children.get(key)
        if pair is None:
            pair = children[key] = (metrics.latency.labels(verb),
                                    metrics.requests.labels(verb, str(status)))
        pair[0].observe(seconds)
        pair[1].inc()

    @web.middleware
    async def middleware(request: web.Request, handler):  # type: ignore[no-untyped-def]
        verb = verbs.get(request.path, "other")
        metrics = request.app[METRICS]
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except SparseError as exc:
            status = exc.http_status
            log.info("%s %s -> %d: %s", request.method, request.path, status, exc)
            return web.Response(body=encode({"error": str(exc)}), status=status,
                                content_type="application/json")
        except web.HTTPException as exc:
            status = exc.status
            if status < 400:
                raise
            # Bodies over --max-body-mib, unknown paths...: same JSON shape as other errors.
            return web.Response(body=encode({"error": exc.text or exc.reason}), status=status,
                                content_type="application/json")
        except Exception:
            log.exception("%s %s failed", request.method, request.path)
            return web.Response(body=encode({"error": "internal error; see extender logs"}),
                                status=500, content_type="application/json")
        finally:
            if verb != "other":
                count(metrics, verb, status, time.perf_counter() - started)

    return middleware
