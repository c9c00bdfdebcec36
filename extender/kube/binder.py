"""Binding through the API server: annotate the pod with its GPUs, then create the Binding."""

from __future__ import annotations

import logging

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from extender.binder import BindError
from extender.kube.assignment import LABEL_MANAGED, annotations_for
from extender.kube.client import create_binding, to_dict
from extender.ledger.rules import Reservation
from extender.protocol import BindingArgs, Pod, pod_from_dict

log = logging.getLogger("sparse.kube.binder")


def _why(exc: ApiException) -> str:
    return f"HTTP {exc.status} {exc.reason}".strip()


class KubeBinder:
    def __init__(self, api: client.ApiClient) -> None:
        self._api = api
        self._core = client.CoreV1Api(api)

    async def bind(self, args: BindingArgs, reservation: Reservation) -> None:
        ns, name = args.pod_namespace, args.pod_name
        patch = {"metadata": {"labels": {LABEL_MANAGED: "true"},
                              "annotations": annotations_for(reservation)}}
        try:
            patched = await self._core.patch_namespaced_pod(name, ns, patch)
        except ApiException as exc:
            raise BindError(f"annotating the pod failed: {_why(exc)}") from exc
        if patched.metadata.uid != args.pod_uid:
            await self._unannotate(ns, name)
            raise BindError(f"pod {ns}/{name} was replaced (UID {patched.metadata.uid})")
        try:
            await create_binding(self._core, ns, name, args.pod_uid, args.node)
        except ApiException as exc:
            await self._unannotate(ns, name)
            raise BindError(f"creating the Binding failed: {_why(exc)}") from exc

    async def _unannotate(self, namespace: str, name: str) -> None:
        """Best effort: a pod that was not bound must not advertise GPUs it does not hold."""
        patch = {"metadata": {"labels": {LABEL_MANAGED: None},
                              "annotations": dict.fromkeys(annotations_for_keys())}}
        try:
            await self._core.patch_namespaced_pod(name, namespace, patch)
        except ApiException as exc:
            log.warning("could not clear annotations of %s/%s: %s", namespace, name, _why(exc))

    async def fetch_pod(self, namespace: str, name: str) -> Pod | None:
        try:
            pod = await self._core.read_namespaced_pod(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return pod_from_dict(to_dict(self._api, pod))


def annotations_for_keys() -> list[str]:
    from extender.annotations import ANN_ASSIGNMENT, ANN_GPU_UUIDS, ANN_NODE

    return [ANN_GPU_UUIDS, ANN_NODE, ANN_ASSIGNMENT]
