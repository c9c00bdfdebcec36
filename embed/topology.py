"""Where an embedding store's shards run, read from the API server.

The store's shards are found from its Service's Endpoints (``addresses[].nodeName``) when a
namespace is given and they exist, else from its pods (label ``sparse.io/embedding-store=<store>``,
``spec.nodeName``); each node's zone (``topology.kubernetes.io/zone``) and rack (a configurable
label, default ``topology.sparse.io/rack``) come from the Node. The extender follows the same pods
with a watch (``extender/kube/stores.py``); this module answers ``sparse-embed where``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from extender.annotations import DEFAULT_RACK_LABEL, LABEL_EMBEDDING_STORE, LABEL_ZONE


@dataclass(frozen=True)
class ShardPlace:
    shard: str  # pod name or endpoint address
    node: str
    zone: str | None
    rack: str | None


async def shard_nodes(core: Any, store: str, namespace: str | None = None) -> dict[str, str]:
    """shard -> node name."""
    from kubernetes_asyncio.client.exceptions import ApiException

    out: dict[str, str] = {}
    if namespace:
        try:
            ep = await core.read_namespaced_endpoints(store, namespace)
            for subset in ep.subsets or []:
                for addr in subset.addresses or []:
                    if addr.node_name:
                        name = addr.target_ref.name if addr.target_ref else addr.ip
                        out[name] = addr.node_name
        except ApiException as exc:
            if exc.status != 404:
                raise
    if not out:
        selector = f"{LABEL_EMBEDDING_STORE}={store}"
        pods = (await core.list_namespaced_pod(namespace, label_selector=selector) if namespace
                else await core.list_pod_for_all_namespaces(label_selector=selector))
        for pod in pods.items:
            if pod.spec.node_name and pod.status.phase not in ("Succeeded", "Failed"):
                out[pod.metadata.name] = pod.spec.node_name
    return out


async def store_topology(core: Any, store: str, namespace: str | None = None,
                         rack_label: str = DEFAULT_RACK_LABEL) -> list[ShardPlace]:
    places = []
    labels_of: dict[str, dict[str, str]] = {}
    for shard, node in sorted((await shard_nodes(core, store, namespace)).items()):
        if node not in labels_of:
            labels_of[node] = (await core.read_node(node)).metadata.labels or {}
        labels = labels_of[node]
        places.append(ShardPlace(shard, node, labels.get(LABEL_ZONE), labels.get(rack_label)))
    return places
