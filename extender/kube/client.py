"""API client construction."""

from __future__ import annotations

from pathlib import Path

import aiohttp
from aiohttp.helpers import netrc_from_env, proxies_from_env
from kubernetes_asyncio import client, config


async def make_api_client(kubeconfig: Path | None, in_cluster: bool) -> client.ApiClient:
    if in_cluster:
        config.load_incluster_config()
        api = client.ApiClient()
    else:
        configuration = client.Configuration()
        await config.load_kube_config(config_file=str(kubeconfig),
                                      client_configuration=configuration)
        api = client.ApiClient(configuration)
    _skip_env_lookups(api)
    return api


def _skip_env_lookups(api: client.ApiClient) -> None:
    """kubernetes_asyncio's session trusts the environment, so aiohttp reads the proxy
    variables and ~/.netrc in a worker thread on every request (two thread hops per Binding,
    on the event loop that serves filter). With neither set there is nothing to find: the
    lookups are turned off; with either, nothing changes."""
    if proxies_from_env() or netrc_from_env() is not None:
        return
    session = getattr(getattr(api, "rest_client", None), "pool_manager", None)
    if isinstance(session, aiohttp.ClientSession):
        session._trust_env = False
