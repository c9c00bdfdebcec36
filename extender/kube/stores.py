"""Where each embedding store's shards run: pods labelled ``sparse.io/embedding-store=<store>``
(their ``spec.nodeName``), followed with a list-then-watch, fed to the locality index. The
nodes' zone and rack come from the Node watch the extender already runs."""

from __future__ import annotations

from typing import Any

from extender.annotations import LABEL_EMBEDDING_STORE
from extender.placement.locality import LocalityIndex


class StoreShards:
    def __init__(self, index: LocalityIndex) -> None:
        self.index = index
        self._pods: dict[str, tuple[str, str]] = {}  # pod uid -> (store, node)

    def _publish(self, stores: set[str]) -> None:
        for store in stores:
            nodes = {node for s, node in self._pods.values() if s == store}
            self.index.set_store(store, nodes)

    @staticmethod
    def _place(pod: dict[str, Any]) -> tuple[str, str, str] | None:
        meta = pod.get("metadata") or {}
        store = (meta.get("labels") or {}).get(LABEL_EMBEDDING_STORE)
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if not store or not node or phase in ("Succeeded", "Failed") or meta.get(
                "deletionTimestamp"):
            return None
        return meta.get("uid", ""), store, node

    async def resync(self, items: list[dict[str, Any]]) -> None:
        before = {s for s, _ in self._pods.values()}
        self._pods = {}
        for pod in items:
            placed = self._place(pod)
            if placed is not None:
                self._pods[placed[0]] = placed[1:]
        self._publish(before | {s for s, _ in self._pods.values()})

    async def on_event(self, kind: str, pod: dict[str, Any]) -> None:
        uid = (pod.get("metadata") or {}).get("uid", "")
        old = self._pods.pop(uid, None)
        placed = None if kind == "DELETED" else self._place(pod)
        if placed is not None:
            self._pods[uid] = placed[1:]
        self._publish({s for s in (old and old[0], placed and placed[1]) if s})
