"""Nodes' GPU inventory annotations folded into the inventory.

Every full-Node request and every watch event carries the annotation; it is parsed only when
its text changed, and a node that claims a GPU UUID another node owns is refused (logged), so
one bad annotation cannot move another node's GPUs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from extender.annotations import ANN_GPU_INVENTORY
from extender.errors import InvalidInventory
from extender.inventory import Inventory, NodeGpus, node_from_annotations

log = logging.getLogger("sparse.service")

NodeMeta = tuple[str, dict[str, str] | None, dict[str, str] | None]  # name, annotations, labels


class NodeAnnotations:
    """The annotation text last parsed per node, and the merge of what changed."""

    def __init__(self) -> None:
        self._seen: dict[str, str] = {}

    def forget(self, name: str) -> None:
        self._seen.pop(name, None)

    def merge(self, current: Inventory, nodes: Iterable[NodeMeta],
              base: Inventory | None = None) -> tuple[Inventory | None, int]:
        """The inventory with ``nodes``' annotations applied (None: nothing to replace) and
        how many nodes changed. With ``base`` the inventory is replaced: ``base`` plus every
        given node that carries the annotation (a re-list)."""
        if base is not None:
            current = base
            self._seen = {}
        changed: dict[str, NodeGpus] = {}
        for name, node_annotations, labels in nodes:
            raw = (node_annotations or {}).get(ANN_GPU_INVENTORY)
            if raw is None or self._seen.get(name) == raw:
                continue  # the common case on every full-Node request: nothing changed
            self._seen[name] = raw
            try:
                node = node_from_annotations(name, node_annotations, labels)
            except InvalidInventory as exc:
                log.warning("ignoring node %s: %s", name, exc)
                continue
            known = current.nodes.get(name)
            if node is not None and (known is None or known.gpus != node.gpus):
                changed[name] = node
        if not changed and base is None:
            return None, 0
        merged = dict(current.nodes)
        owner = {g.uuid: n.name for n in merged.values() for g in n.gpus}
        for name, node in changed.items():
            clash = [g.uuid for g in node.gpus if owner.get(g.uuid, name) != name]
            if clash:
                log.warning("ignoring node %s: GPU %s already belongs to node %s", name,
                            clash[0], owner[clash[0]])
                self._seen.pop(name, None)
                continue
            for g in merged.get(name, node).gpus:
                owner.pop(g.uuid, None)
            owner.update({g.uuid: name for g in node.gpus})
            merged[name] = node
        return Inventory(merged), len(changed)
