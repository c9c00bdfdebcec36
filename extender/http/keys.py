"""Typed application state keys (aiohttp AppKey)."""

from __future__ import annotations

import asyncio

from aiohttp import web

from extender.http.admission import Admission
from extender.http.deadlines import Deadlines
from extender.http.offload import BodyDecoder
from extender.metrics import Metrics
from extender.service import Scheduler

SCHEDULER = web.AppKey("scheduler", Scheduler)
METRICS = web.AppKey("metrics", Metrics)
READY = web.AppKey("ready", asyncio.Event)
ADMISSION = web.AppKey("admission", Admission)
DECODER = web.AppKey("decoder", BodyDecoder)
BODY_LIMIT = web.AppKey("body_limit", int)
DEADLINES = web.AppKey("deadlines", Deadlines)
