"""API client construction."""

from __future__ import annotations

from pathlib import Path

from kubernetes_asyncio import client, config


async def make_api_client(kubeconfig: Path | None, in_cluster: bool) -> client.ApiClient:
    if in_cluster:
        config.load_incluster_config()
        return client.ApiClient()
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    return client.ApiClient(configuration)


