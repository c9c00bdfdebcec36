"""aiohttp layer of the webhook: ``POST /mutate``, ``GET /healthz``; TLS via ssl_context."""

from __future__ import annotations

import ssl
from pathlib import Path

from aiohttp import web

from webhook.patch import PatchConfig
from webhook.review import MAX_BODY_BYTES, handle

CONFIG_KEY = web.AppKey("config", PatchConfig)


async def _mutate(request: web.Request) -> web.Response:
    body = await request.read()
    status, review = handle(body, request.app[CONFIG_KEY])
    return web.json_response(review, status=status)


async def _healthz(_: web.Request) -> web.Response:
    return web.Response(text="ok")


def make_app(config: PatchConfig) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY_BYTES + 1)
    app[CONFIG_KEY] = config
    app.router.add_post("/mutate", _mutate)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _healthz)
    return app


def server_ssl_context(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context
