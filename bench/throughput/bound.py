"""The bench's count of bound pods, from one watch rather than polls.

Polling the unbound pods costs the API server a list of them per poll (about 20 ms of its CPU
with 1,000 pods waiting, plus a TLS handshake per connection): a cost per second, so the
slower a run, the more of the two shared cores the bench itself took from it. One watch of
the pods that have a node, their metadata only, costs one small event per bound pod, the
same for every run, and tells the moment each pod was bound, not the poll after it.

The API server may end a watch at any time (a slow reader, its own timeout): the watch is then
renewed from the last version seen, or, when that version is gone (410), from a new list.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import threading
import time
from urllib.parse import quote, urlsplit

# Only the pods' metadata (names), not the whole objects.
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
METADATA_WATCH = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
BOUND = "spec.nodeName!="  # a pod enters this selection when it is bound
WATCH_TIMEOUT_S = 600  # the server's timeout of one watch request; then it is renewed
GONE = 410


class _Expired(Exception):
    """The watch's version is no longer held by the API server: list again."""


class BoundWatch:
    """Pods of ``namespace`` bound to a node: their names, kept current by a watch on a
    thread, and when each was first seen bound (``time.monotonic``)."""

    def __init__(self, server: str, token: str, context: ssl.SSLContext,
                 namespace: str = "default") -> None:
        url = urlsplit(server)
        self._host, self._port = url.hostname or "127.0.0.1", url.port or 443
        self._path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods"
        self._selector = f"fieldSelector={quote(BOUND, safe='')}"
        self._token = token
        self._context = context
        self._lock = threading.Condition()
        self._bound: dict[str, float] = {}
        self._error: BaseException | None = None
        self._closed = False
        self._conn: http.client.HTTPSConnection | None = None
        self._thread: threading.Thread | None = None
        self.renewals = 0  # watches the API server ended, renewed

    def start(self) -> BoundWatch:
        """List the pods bound now, then follow the watch from that list's version."""
        version = self._list()
        self._thread = threading.Thread(target=self._follow, args=(version,),
                                        name="bound-watch", daemon=True)
        self._thread.start()
        return self

    def _get(self, query: str, accept: str, timeout: float
             ) -> tuple[http.client.HTTPSConnection, http.client.HTTPResponse]:
        conn = http.client.HTTPSConnection(self._host, self._port, context=self._context,
                                           timeout=timeout)
        conn.request("GET", f"{self._path}?{query}",
                     headers={"Authorization": f"Bearer {self._token}", "Accept": accept})
        return conn, conn.getresponse()

    def _list(self) -> str:
        """Add the pods bound now (seen now unless seen before); the list's version."""
        conn, resp = self._get(self._selector, METADATA_LIST, 30)
        try:
            body = resp.read()
        finally:
            conn.close()
        if resp.status != 200:
            raise RuntimeError(f"listing bound pods: HTTP {resp.status} {body[:200]!r}")
        listing = json.loads(body)
        now = time.monotonic()
        with self._lock:
            for item in listing.get("items") or []:
                self._bound.setdefault(item["metadata"]["name"], now)
            self._lock.notify_all()
        return listing["metadata"]["resourceVersion"]

    def _follow(self, version: str) -> None:
        try:
            while not self._closed:
                try:
                    version = self._watch(version)
                except _Expired:
                    version = self._list()
                if not self._closed:
                    self.renewals += 1
        except BaseException as exc:  # noqa: BLE001 (handed to the waiting thread)
            with self._lock:
                if not self._closed:
                    self._error = exc
                self._lock.notify_all()

    def _watch(self, version: str) -> str:
        """Follow one watch request until the server ends it; the last version seen."""
        query = (f"{self._selector}&watch=1&allowWatchBookmarks=true"
                 f"&resourceVersion={version}&timeoutSeconds={WATCH_TIMEOUT_S}")
        conn, resp = self._get(query, METADATA_WATCH, WATCH_TIMEOUT_S + 30)
        with self._lock:
            if self._closed:
                conn.close()
                return version
            self._conn = conn
        try:
            if resp.status == GONE:
                raise _Expired
            if resp.status != 200:
                raise RuntimeError(f"watching bound pods: HTTP {resp.status}")
            for line in resp:
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == GONE:
                        raise _Expired
                    raise RuntimeError(f"watching bound pods: {obj.get('message')}")
                meta = obj.get("metadata") or {}
                version = meta.get("resourceVersion") or version
                if kind == "ADDED":
                    with self._lock:
                        self._bound.setdefault(meta["name"], time.monotonic())
                        self._lock.notify_all()
        finally:
            with self._lock:
                self._conn = None
            conn.close()
        return version

    def count(self) -> int:
        with self._lock:
            self._check()
            return len(self._bound)

    def wait(self, count: int, timeout: float) -> int:
        """Until ``count`` pods are bound or ``timeout`` passed; the pods bound now."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self._bound) < count:
                self._check()
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._lock.wait(left)
            self._check()
            return len(self._bound)

    def times(self) -> list[float]:
        """When each bound pod was first seen bound, in order."""
        with self._lock:
            return sorted(self._bound.values())

    def _check(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"watch of bound pods failed: {self._error!r}")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conn = self._conn
        if conn is not None and conn.sock is not None:
            # Ends the reader's blocking read; closing alone would wait for it.
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(10)
