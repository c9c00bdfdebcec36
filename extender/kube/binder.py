"""Binding through the API server, in one call.

The Binding carries the assignment annotations: the API server copies a Binding's annotations
onto the pod in the same write that sets ``spec.nodeName`` (``BindingREST.assignPod`` in
kube-apiserver), so a pod is never bound without its GPU annotations, nor annotated without
being bound, and nothing needs undoing when the call fails.

The Binding is POSTed as msgspec-encoded bytes on the generated client's own aiohttp session
(its TLS, proxy and bearer-token settings, the token's refresh hook included), not through the
generated client: its per-call header, path and body sanitising plus ``json.dumps`` cost more
CPU than the request itself in a burst. The answer's status is checked here: the generated
client does not check it when the reply is not preloaded, which would take a refused Binding
(409, 404) for a bound pod.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote

import aiohttp
import msgspec
from kubernetes_asyncio import client

from extender.binder import BindError
from extender.kube.assignment import annotations_for
from extender.ledger.rules import Reservation
from extender.protocol import BindingArgs, Pod, decode_pod

log = logging.getLogger("sparse.kube.binder")

_encode = msgspec.json.Encoder().encode


class _Target(msgspec.Struct):
    name: str
    apiVersion: str = "v1"  # noqa: N815 (the API's field names)
    kind: str = "Node"


class _BindingMeta(msgspec.Struct):
    name: str
    namespace: str
    uid: str  # the API server refuses a same-named pod created since we decided
    annotations: dict[str, str]


class _Binding(msgspec.Struct):
    metadata: _BindingMeta
    target: _Target
    apiVersion: str = "v1"  # noqa: N815
    kind: str = "Binding"


class _Status(msgspec.Struct):
    message: str = ""


def binding_body(args: BindingArgs, reservation: Reservation) -> bytes:
    """The Binding's JSON: the pod (by name and UID), its node, the assignment annotations."""
    return _encode(_Binding(
        _BindingMeta(args.pod_name, args.pod_namespace, args.pod_uid,
                     annotations_for(reservation)),
        _Target(args.node)))


def refusal(status: int, reason: str | None, body: bytes) -> str:
    """An API error answer in one line: status, reason and the Status object's message."""
    try:
        message = msgspec.json.decode(body, type=_Status).message if body else ""
    except (msgspec.DecodeError, msgspec.ValidationError):
        message = ""
    return f"HTTP {status} {reason or ''} {message}".strip()


class KubeBinder:
    binds_pods = True

    def __init__(self, api: client.ApiClient) -> None:
        self._api = api
        rest = api.rest_client
        self._session: aiohttp.ClientSession = rest.pool_manager
        self._host = api.configuration.host.rstrip("/")
        # What the generated client adds to every request on this connection pool.
        self._request_options: dict[str, Any] = {
            key: value for key, value in (("proxy", getattr(rest, "proxy", None)),
                                          ("proxy_headers", getattr(rest, "proxy_headers", None)),
                                          ("server_hostname",
                                           getattr(rest, "server_hostname", None)))
            if value}

    async def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "Content-Type": "application/json",
                   **self._api.default_headers}
        # Per call: an expiring token (in-cluster, exec plugins) is refreshed by its hook.
        await self._api.update_params_for_auth(headers, [], ["BearerToken"])
        return headers

    async def bind(self, args: BindingArgs, reservation: Reservation) -> None:
        """Create the Binding. A refusal (any non-2xx answer) raises BindError; a transport
        failure propagates as is: the Binding's outcome is then unknown."""
        # The pod's binding subresource (RBAC: create pods/binding), as kube-scheduler binds.
        url = (f"{self._host}/api/v1/namespaces/{quote(args.pod_namespace, safe='')}/pods/"
               f"{quote(args.pod_name, safe='')}/binding")
        async with self._session.post(url, data=binding_body(args, reservation),
                                      headers=await self._headers(),
                                      **self._request_options) as response:
            if 200 <= response.status <= 299:
                return
            body = await response.read()
            raise BindError(
                f"creating the Binding failed: {refusal(response.status, response.reason, body)}")

    async def fetch_pod(self, namespace: str, name: str) -> Pod | None:
        """The pod, or None when the API server has none of that name; other refusals raise
        LookupError (the bind answers an error, the scheduler retries)."""
        url = (f"{self._host}/api/v1/namespaces/{quote(namespace, safe='')}/pods/"
               f"{quote(name, safe='')}")
        async with self._session.get(url, headers=await self._headers(),
                                     **self._request_options) as response:
            body = await response.read()
            if response.status == 404:
                return None
            if not 200 <= response.status <= 299:
                raise LookupError(f"reading pod {namespace}/{name} failed: "
                                  f"{refusal(response.status, response.reason, body)}")
        return decode_pod(body)
