"""The controller's Kubernetes calls (pods, job status, events), on kubernetes_asyncio.

Objects travel as plain dicts (JSON from the API server), the same shape kopf hands the
handlers, so the reconciler never sees generated client models.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import socket
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from controller.errors import PodCreateError
from controller.pods import GROUP, KIND, LABEL_JOB_UID, PLURAL, VERSION
from extender.kube.answers import checked

log = logging.getLogger("sparse.controller.kube")

COMPONENT = "sparse-controller"
MERGE = "application/merge-patch+json"


def _message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body).get("message") or exc.reason)
    except (TypeError, ValueError, AttributeError):
        return f"HTTP {exc.status} {exc.reason or ''}".strip()


class Kube:
    def __init__(self, api: client.ApiClient, pod_delete_grace_s: int | None = None) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.grace = pod_delete_grace_s
        self.instance = socket.gethostname()

    async def ensure_peering(self, name: str, *, cluster_wide: bool,
                             namespaces: tuple[str, ...] = ()) -> None:
        """Create kopf's peering object(s) if missing (all replicas race: 409 is fine)."""
        body: dict[str, Any] = {"apiVersion": "kopf.dev/v1", "metadata": {"name": name}}
        targets = [None] if cluster_wide else list(namespaces)
        for ns in targets:
            try:
                if ns is None:
                    resp = await checked(self.custom.create_cluster_custom_object(
                        "kopf.dev", "v1", "clusterkopfpeerings",
                        {**body, "kind": "ClusterKopfPeering"}, _preload_content=False))
                else:
                    resp = await checked(self.custom.create_namespaced_custom_object(
                        "kopf.dev", "v1", ns, "kopfpeerings", {**body, "kind": "KopfPeering"},
                        _preload_content=False))
                resp.release()
            except ApiException as exc:
                if exc.status != 409:
                    raise

    async def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            resp = await checked(self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return json.loads(await resp.read())

    async def list_pods(self, namespace: str, job_uid: str) -> list[dict[str, Any]]:
        resp = await checked(self.core.list_namespaced_pod(
            namespace, label_selector=f"{LABEL_JOB_UID}={job_uid}", _preload_content=False))
        return json.loads(await resp.read()).get("items") or []

    async def create_pod(self, body: dict[str, Any]) -> bool:
        """False when a pod of that name already exists (a retried reconcile)."""
        try:
            resp = await checked(self.core.create_namespaced_pod(
                body["metadata"]["namespace"], body, _preload_content=False))
            resp.release()
        except ApiException as exc:
            if exc.status == 409:
                return False
            if exc.status in (400, 403, 422):
                raise PodCreateError(_message(exc)) from exc
            raise
        return True

    async def delete_pod(self, namespace: str, name: str) -> None:
        kwargs = {} if self.grace is None else {"grace_period_seconds": self.grace}
        try:
            resp = await checked(self.core.delete_namespaced_pod(
                name, namespace, _preload_content=False, **kwargs))
            resp.release()
        except ApiException as exc:
            if exc.status != 404:
                raise

    async def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        try:
            resp = await checked(self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, PLURAL, name, {"status": status},
                _content_type=MERGE, _preload_content=False))
            resp.release()
        except ApiException as exc:
            if exc.status != 404:  # deleted meanwhile: nothing to report on
                raise

    async def delete_job(self, namespace: str, name: str) -> None:
        try:
            resp = await checked(self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, _preload_content=False))
            resp.release()
        except ApiException as exc:
            if exc.status != 404:
                raise

    async def event(self, job: dict[str, Any], kind: str, reason: str, message: str) -> None:
        meta = job["metadata"]
        stamp = dt.datetime.now(dt.UTC)
        body = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
                               "name": meta["name"], "namespace": meta["namespace"],
                               "uid": meta["uid"]},
            "type": kind, "reason": reason, "message": message[:1000],
            "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
            "reportingInstance": self.instance, "firstTimestamp": stamp,
            "lastTimestamp": stamp, "count": 1,
        }
        try:
            resp = await checked(self.core.create_namespaced_event(
                meta["namespace"], body, _preload_content=False))
            resp.release()
        except ApiException as exc:  # an event is best effort
            log.debug("event %s on %s not posted: %s", reason, meta["name"], exc.status)
