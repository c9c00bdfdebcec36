"""List-then-watch loops for Nodes and Pods, re-listing when the watch expires (HTTP 410).

Objects are decoded straight from the response bytes (msgspec), not through the generated
client's models, which would dominate the extender's CPU at a few hundred pods per second.
Every (re)list is a resync: Nodes rebuild the inventory, Pods reconcile the ledger (adopt
bookings found on bound pods, release those of pods that are gone or finished). The first
pass of each runs before the extender reports ready.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec
from kubernetes_asyncio.client.exceptions import ApiException

from extender.kube.answers import checked

log = logging.getLogger("sparse.kube.watching")

WATCH_TIMEOUT_S = 240  # server-side timeout of one watch request; then it is renewed
RETRY_S = 2.0

Resync = Callable[[list[dict[str, Any]]], Awaitable[None]]
Handle = Callable[[str, dict[str, Any]], Awaitable[None]]


async def _lines(response: Any) -> AsyncIterator[bytes]:
    """Newline-delimited watch events, whatever their size (StreamReader.readline caps lines)."""
    buffer = b""
    async for chunk in response.content.iter_any():
        buffer += chunk
        while True:
            cut = buffer.find(b"\n")
            if cut < 0:
                break
            line, buffer = buffer[:cut], buffer[cut + 1:]
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


class Watcher:
    def __init__(self, name: str, list_fn: Callable[..., Any], resync: Resync, handle: Handle,
                 **list_kwargs: Any) -> None:
        self.name = name
        self._list = list_fn
        self._resync = resync
        self._handle = handle
        self._kwargs = list_kwargs

    async def relist(self) -> str:
        response = await checked(self._list(_preload_content=False, **self._kwargs))
        listing = msgspec.json.decode(await response.read())
        await self._resync(listing.get("items") or [])
        return listing["metadata"]["resourceVersion"]

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
        response = await checked(self._list(watch=True, resource_version=resource_version,
                                            timeout_seconds=WATCH_TIMEOUT_S,
                                            allow_watch_bookmarks=True, _preload_content=False,
                                            **self._kwargs))
        try:
            async for line in _lines(response):
                event = msgspec.json.decode(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    return None  # usually 410 Gone: re-list
                version = (obj.get("metadata") or {}).get("resourceVersion")
                if version:
                    resource_version = version
                if kind == "BOOKMARK":
                    continue
                try:
                    await self._handle(kind, obj)
                except Exception:
                    log.exception("%s: handling %s failed", self.name, kind)
        finally:
            response.release()
        return resource_version
