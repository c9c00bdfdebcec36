"""Binding through the API server, in one call.

The Binding carries the assignment annotations: the API server copies a Binding's annotations
onto the pod in the same write that sets ``spec.nodeName`` (``BindingREST.assignPod`` in
kube-apiserver), so a pod is never bound without its GPU annotations, nor annotated without
being bound, and nothing needs undoing when the call fails.
"""

from __future__ import annotations

import logging

import msgspec
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from extender.binder import BindError
from extender.kube.assignment import annotations_for
from extender.ledger.rules import Reservation
from extender.protocol import BindingArgs, Pod, decode_pod

log = logging.getLogger("sparse.kube.binder")


def _why(exc: ApiException) -> str:
    body = ""
    if exc.body:
        try:
            body = msgspec.json.decode(exc.body).get("message", "")
        except (msgspec.DecodeError, AttributeError):
            body = ""
    return f"HTTP {exc.status} {exc.reason or ''} {body}".strip()


class KubeBinder:
    binds_pods = True

    def __init__(self, api: client.ApiClient) -> None:
        self._core = client.CoreV1Api(api)

    async def bind(self, args: BindingArgs, reservation: Reservation) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            # The UID makes the API server refuse a same-named pod created since we decided.
            "metadata": {"name": args.pod_name, "namespace": args.pod_namespace,
                         "uid": args.pod_uid, "annotations": annotations_for(reservation)},
            "target": {"apiVersion": "v1", "kind": "Node", "name": args.node},
        }
        try:
            # Reply not decoded: the generated client raises 'Invalid value for target' on
            # it although the pod is bound (kubernetes-client/python #825).
            response = await self._core.create_namespaced_binding(
                args.pod_namespace, body, _preload_content=False)
            response.release()
        except ApiException as exc:
            raise BindError(f"creating the Binding failed: {_why(exc)}") from exc

    async def fetch_pod(self, namespace: str, name: str) -> Pod | None:
        try:
            response = await self._core.read_namespaced_pod(name, namespace,
                                                            _preload_content=False)
            raw = await response.read()
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return decode_pod(raw)
