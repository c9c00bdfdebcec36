"""Pods filtered but not yet bound: the pod and the demand filter read, kept for bind."""

from __future__ import annotations

from collections import OrderedDict

from extender.demand import PodDemand
from extender.protocol import Pod

PENDING_PODS = 50_000  # filter-time demands kept for bind


class PendingPods:
    """Bounded, oldest dropped first: a bind whose pod fell out reads it from the API."""

    def __init__(self, size: int = PENDING_PODS) -> None:
        self.size = size
        self._by_uid: OrderedDict[str, tuple[Pod, PodDemand]] = OrderedDict()

    def put(self, pod: Pod, demand: PodDemand) -> None:
        uid = pod.metadata.uid
        self._by_uid[uid] = (pod, demand)
        self._by_uid.move_to_end(uid)
        while len(self._by_uid) > self.size:
            self._by_uid.popitem(last=False)

    def pod(self, uid: str) -> Pod | None:
        cached = self._by_uid.get(uid)
        return None if cached is None else cached[0]

    def demand(self, uid: str) -> PodDemand | None:
        cached = self._by_uid.get(uid)
        return None if cached is None else cached[1]

    def forget(self, uid: str) -> None:
        self._by_uid.pop(uid, None)

    def __len__(self) -> int:
        return len(self._by_uid)
