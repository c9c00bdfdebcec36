"""filter's part of delay scheduling for embedding readers (extender/placement/delay.py).

A pod that declares embeddings (``sparse.io/embedding`` with ``steps`` and what prices its
step: ``stepComputeMs``, ``idsPerStep``) and could start now may instead wait for a node whose
cache holds rows of its tables, when that node has no GPU room for it now but is predicted to
have it soon, and the run time the node saves it (the locality term's bonus there over the
node it would take now, times its reference run time) exceeds the whole wait. A node's room is
predicted from the predicted ends of the pods booked there (``sparse.io/predicted-seconds``,
as the hold for gangs reads them); a pod without one never ends, so its node is never waited
for.

Only candidates of the request are waited for: kube-scheduler's own filters passed them, so
the pod may run there (selectors, taints, CPU). Share pods see full nodes (the chart has
kube-scheduler ignore ``sparse.io/gpu-*``); a whole-GPU pod does not, since kube-scheduler
counts ``nvidia.com/gpu`` itself, so it never waits.

Off unless the operator sets ``--locality-max-wait``; a pod never waits longer than that (or
its own ``maxWaitSeconds`` in ``sparse.io/embedding``, when lower; 0: never) from its
creation (``metadata.creationTimestamp``, the API server's clock, so that every replica, and
one restarted, counts the same wait; without it, or with a creation clock ahead of ours, from
the first filter this replica saw). The waiting pod is answered with no node, each marked
unresolvable (preemption must not evict pods for a pod that chose to wait), with a message
kube-scheduler posts as the pod's FailedScheduling event; kube-scheduler tries it again on
the next cluster event (a pod ending) or after its backoff.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from extender.demand import PodDemand
from extender.placement.delay import Wait, room_in, warm_wait
from extender.placement.embedding_annotations import EmbeddingSpec
from extender.placement.state import ClusterState
from extender.protocol import epoch_seconds

if TYPE_CHECKING:
    from extender.service import Scheduler

FIRST_TRIES_KEPT = 10_000  # pods whose wait start is remembered; the oldest go first
MOST_WARM_NODES = 16  # full warm nodes whose room is predicted, those the term prefers first


class ReaderWaits:
    """Since when each reader may have waited (its creation, or its first filter here), to
    bound its whole wait, and the wait each is in now (for ``/scheduler/inspect``)."""

    def __init__(self, kept: int = FIRST_TRIES_KEPT) -> None:
        self.kept = kept
        self._first: dict[str, float] = {}
        self._now: dict[str, tuple[str, Wait, float]] = {}  # uid -> (pod, its wait, when)

    def first(self, uid: str, now: float, created: float | None = None) -> float:
        """When the reader's wait started: its creation (``created``), or ``now`` at its first
        filter here when that is earlier (a creation clock ahead of ours) or unknown."""
        at = self._first.get(uid)
        if at is None:
            if len(self._first) >= self.kept:  # dicts keep insertion order: drop the oldest
                for old in list(self._first)[: max(self.kept // 10, 1)]:
                    del self._first[old]
                    self._now.pop(old, None)
            at = self._first[uid] = now if created is None else min(now, created)
        return at

    def waits(self, uid: str, pod: str, wait: Wait | None, now: float) -> None:
        """The reader ``uid`` (``pod``: namespace/name) was told to wait, or not (None)."""
        if wait is None:
            self._now.pop(uid, None)
        else:
            self._now[uid] = (pod, wait, now)

    def forget(self, uid: str) -> None:
        self._first.pop(uid, None)
        self._now.pop(uid, None)

    def waiting(self, now: float, limit: float) -> list[dict[str, object]]:
        """The readers waiting now (told to wait within ``limit`` seconds), longest first."""
        out = [{"pod": pod, "uid": uid, "node": w.node, "room_in_s": round(w.free_in_s, 1),
                "saves_s": round(w.saved_s, 1), "waited_s": round(now - self._first[uid], 1)}
               for uid, (pod, w, at) in self._now.items()
               if now - at <= limit and uid in self._first]
        return sorted(out, key=lambda x: -float(x["waited_s"]))  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self._first)


def warm_node_wait(s: Scheduler, state: ClusterState, demand: PodDemand, spec: EmbeddingSpec,
                   candidates: list[str], passed: list[str], here: Callable[[], str | None],
                   created: str | None = None) -> Wait | None:
    """Whether the reader ``demand`` waits for a warm candidate node without room now instead
    of starting on ``here()`` (the node it would take among ``passed``, asked only when a
    warm node is near); None: start now. ``created``: its ``metadata.creationTimestamp``."""
    limit = s.locality.weights.max_wait_s
    if spec.max_wait_s is not None:  # the pod's own bound, below the operator's
        limit = min(limit, spec.max_wait_s)
    if not limit > 0 or demand.whole_gpus:
        return None
    now = s.clock()  # counted from its creation, whether a node could take it then or not
    waited = now - s.reader_waits.first(demand.uid, now, epoch_seconds(created))
    if not passed or waited >= limit:
        return None
    ref = s.locality.reference_run_seconds(spec)
    if not ref:
        return None
    fitting = set(passed)
    asked = set(candidates)
    warm = [n for n in s.locality.warm_nodes(spec.tables)
            if n not in fitting and n in asked and n in state.node_index]
    if len(warm) > MOST_WARM_NODES:  # the ones saving most: a bounded walk over the GPUs
        bonus = s.locality.bonus(spec, warm)
        warm = [warm[i] for i in np.argsort(-bonus, kind="stable")[:MOST_WARM_NODES].tolist()]
    near: dict[str, float] = {}
    for name in warm:
        fin = room_in(state, state.node_index[name], demand, now, s.holds.ends)
        if np.isfinite(fin) and waited + fin <= limit:
            near[name] = fin
    if not near:
        return None
    return warm_wait(lambda names: s.locality.bonus(spec, names), here(), near, waited, False,
                     ref)
