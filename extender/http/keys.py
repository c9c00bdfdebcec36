"""Typed application state keys (aiohttp AppKey)."""

from __future__ import annotations

import asyncio

from aiohttp import web

from extender.metrics import Metrics
from extender.service import Scheduler

SCHEDULER = web.AppKey("scheduler", Scheduler)
METRICS = web.AppKey("metrics", Metrics)
READY = web.AppKey("ready", asyncio.Event)
