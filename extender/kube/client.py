"""API client construction and the few raw calls the generated client gets wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config


async def make_api_client(kubeconfig: Path | None, in_cluster: bool) -> client.ApiClient:
    if in_cluster:
        config.load_incluster_config()
        return client.ApiClient()
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    return client.ApiClient(configuration)


async def create_binding(core: client.CoreV1Api, namespace: str, name: str, uid: str,
                         node: str) -> None:
    """POST pods/binding. The reply is not decoded: the generated client raises
    'Invalid value for target' on it although the server bound the pod (kubernetes-client
    python #825), so ``_preload_content=False`` and the status code are what count."""
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        # The UID makes the API server refuse a same-named pod created since we decided.
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    response = await core.create_namespaced_binding(namespace, body, _preload_content=False)
    response.release()


def to_dict(api: client.ApiClient, obj: Any) -> dict[str, Any]:
    """A generated model object as the plain JSON dict the API server sent."""
    return api.sanitize_for_serialization(obj)
