"""Kubernetes I/O of the node agent (kubernetes-asyncio): read the Node, patch what changed.

Two writes, both JSON merge patches on the agent's own Node:
* ``PATCH nodes/<name>``        → ``metadata.annotations['sparse.io/gpu-inventory']``
* ``PATCH nodes/<name>/status`` → ``status.capacity`` / ``status.allocatable`` extended resources
Nothing is written when the Node already says the right thing (no write amplification).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agent.discovery import DeviceInfo, annotation_patch, needs_update, status_patch

log = logging.getLogger("sparse.agent")
MERGE = "application/merge-patch+json"


async def api_client(kubeconfig: str | None, in_cluster: bool) -> Any:
    from kubernetes_asyncio import client, config

    if in_cluster:
        config.load_incluster_config()
        return client.ApiClient()
    return await config.new_client_from_config(config_file=kubeconfig)


@dataclass(frozen=True, slots=True)
class PublishResult:
    annotation_written: bool
    status_written: bool


async def publish(core: Any, node: str, devices: Sequence[DeviceInfo], *,
                  whole_gpus: bool) -> PublishResult:
    """Bring the Node's annotation and extended resources in line with ``devices``."""
    obj = await core.read_node(node)
    ann_stale, status_stale = needs_update(
        obj.metadata.annotations, obj.status.capacity if obj.status else None,
        obj.status.allocatable if obj.status else None, devices, whole_gpus=whole_gpus,
    )
    if ann_stale:
        await core.patch_node(node, annotation_patch(devices), _content_type=MERGE)
    if status_stale:
        await core.patch_node_status(node, status_patch(devices, whole_gpus=whole_gpus),
                                     _content_type=MERGE)
    if ann_stale or status_stale:
        log.info("published %d GPU(s) on node %s (annotation=%s, status=%s)",
                 len(devices), node, ann_stale, status_stale)
    return PublishResult(ann_stale, status_stale)
