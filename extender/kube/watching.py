"""List-then-watch loops for Nodes and Pods, re-listing when the watch expires (HTTP 410).

Every (re)list is a resync: Nodes rebuild the inventory, Pods reconcile the ledger (adopt
bookings found on bound pods, release those of pods that are gone or finished). The first
pass of each runs before the extender reports ready.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio import watch
from kubernetes_asyncio.client.exceptions import ApiException

log = logging.getLogger("sparse.kube.watching")

WATCH_TIMEOUT_S = 240  # server-side timeout of one watch request; then it is renewed
RETRY_S = 2.0

Resync = Callable[[list[dict[str, Any]]], Awaitable[None]]
Handle = Callable[[str, dict[str, Any]], Awaitable[None]]


class Watcher:
    def __init__(self, name: str, list_fn: Callable[..., Any], to_dict: Callable[[Any], Any],
                 resync: Resync, handle: Handle, **list_kwargs: Any) -> None:
        self.name = name
        self._list = list_fn
        self._to_dict = to_dict
        self._resync = resync
        self._handle = handle
        self._kwargs = list_kwargs
        self.synced = asyncio.Event()

    async def relist(self) -> str:
        listing = await self._list(**self._kwargs)
        items = [self._to_dict(item) for item in listing.items]
        await self._resync(items)
        self.synced.set()
        return listing.metadata.resource_version

    async def run(self, resource_version: str | None = None) -> None:
        """Forever: (re)list, then watch from that version; never raises except on cancel."""
        while True:
            try:
                if resource_version is None:
                    resource_version = await self.relist()
                resource_version = await self._watch(resource_version)
            except asyncio.CancelledError:
                raise
            except ApiException as exc:
                if exc.status != 410:
                    log.warning("%s watch failed (HTTP %s); re-listing", self.name, exc.status)
                    await asyncio.sleep(RETRY_S)
                resource_version = None
            except Exception:
                log.exception("%s watch failed; re-listing", self.name)
                await asyncio.sleep(RETRY_S)
                resource_version = None

    async def _watch(self, resource_version: str) -> str | None:
        w = watch.Watch()
        try:
            async for event in w.stream(self._list, resource_version=resource_version,
                                        timeout_seconds=WATCH_TIMEOUT_S,
                                        allow_watch_bookmarks=True, **self._kwargs):
                kind = event["type"]
                raw = event.get("raw_object") or {}
                if kind == "ERROR":
                    return None  # usually 410 Gone: re-list
                version = (raw.get("metadata") or {}).get("resourceVersion")
                if version:
                    resource_version = version
                if kind == "BOOKMARK":
                    continue
                try:
                    await self._handle(kind, raw)
                except Exception:
                    log.exception("%s: handling %s failed", self.name, kind)
        finally:
            w.stop()
        return resource_version
