"""Holds: a node kept for the waiting gang at the head of the queue (EASY backfill). Pure.

A job queued shortest-first that needs several whole GPUs on one node (a *gang*) starves: each
GPU that frees is refilled at once by a smaller job from behind it, so a node never has all
the gang's GPUs free together. EASY backfill (the rule of Slurm's and most HPC schedulers'
backfill) fixes it with one reservation: the first gang the queue cannot place gets a *hold*
on the node where it can start soonest, and from then on a pod may take GPUs of that node only
when that does not delay the hold:

* ``start_s``, the hold's earliest start: the time at which ``gpus`` GPUs of the node are
  predicted free, from the predicted end of every pod on it (``started``: start + its
  predicted duration; a pod past its predicted end may end any moment, so counts as ending
  now; a pod without a prediction never ends). The node is the one with the earliest
  ``start_s`` among those that could host the gang empty (the caller's ``eligible``); ties
  go to the node with more GPUs free now, then to the first.
* ``refused``: another pod is refused the held node when it is predicted to end after
  ``start_s`` *and* the GPUs it takes would leave fewer than ``gpus`` GPUs free at
  ``start_s``. Its predicted end is pessimistic: its predicted duration x ``margin`` (the
  predictor's step estimate is within x2 of the measured step for 85 % of its dataset rows,
  extender/queueorder.py), so a pod the predictor under-estimates rarely delays the gang. A
  pod with no prediction never ends before the hold. A pod takes its whole GPUs plus one for
  a share (conservatively: a share may land on a GPU the hold counts on).

The hold is the head's only: it is dropped when its owner starts, and set again (for whoever is
then the first gang refused) on each pass over the queue, so its start follows the cluster.
The extender has no pass: the hold goes to the first gang filter refuses while none is held,
is set again each time its owner is refused, and lapses when the owner has not been asked
about for a while (``lapse``: deleted, or placed by another replica).
Single-GPU jobs and shares get no hold: any GPU that frees fits them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from extender.demand import PodDemand
from extender.placement.state import ClusterState

MARGIN = 2.0  # extender.queueorder.PREDICTION_MARGIN: the step estimate within x2 for 85 %
MIN_GANG = 2  # whole GPUs at once from which a refused job gets a hold


def gpu_free_at(state: ClusterState, node: int, now: float, ends: Mapping[str, float]
                ) -> np.ndarray:
    """When each GPU of ``node`` is predicted free: when the last of its pods ends (``ends``:
    pod uid -> predicted end; a pod without one never ends), ``now`` for an idle GPU."""
    lo, hi = int(state.node_start[node]), int(state.node_stop[node])
    out = np.full(hi - lo, now, dtype=np.float64)
    for i in range(lo, hi):
        for uid, _frac, _cls in state.resident_pods.get(i, ()):
            out[i - lo] = max(out[i - lo], ends.get(uid, math.inf))
    return out


@dataclass(frozen=True, slots=True)
class Hold:
    owner: str  # the pod uid the node is held for
    node: int  # state node index
    gpus: int  # whole GPUs the owner needs there
    start_s: float  # when ``gpus`` GPUs of the node are predicted free
    asked_s: float = 0.0  # when the owner was last refused (the hold lapses without it)
    name: str = ""  # the node's name (a state rebuilt for a changed inventory renumbers)


@dataclass
class HoldBook:
    margin: float = MARGIN
    hold: Hold | None = None
    _ends: dict[str, float] = field(default_factory=dict)  # pod uid -> predicted end (s)
    refusals: int = 0  # placements a hold refused (a pod kept off the held node)

    # --- what runs ------------------------------------------------------------------------

    def started(self, uid: str, now: float, predicted_s: float | None) -> None:
        """Pod ``uid`` was booked at ``now``; ``predicted_s``: its predicted duration."""
        ok = predicted_s is not None and math.isfinite(predicted_s) and predicted_s > 0
        self._ends[uid] = now + float(predicted_s) if ok else math.inf
        if self.hold is not None and self.hold.owner == uid:
            self.hold = None

    def finished(self, uid: str) -> None:
        self._ends.pop(uid, None)

    def moved(self, old: str, new: str) -> None:
        """Booking ``old`` now stands under ``new`` (a gang slot taken by its pod)."""
        if old in self._ends:
            self._ends[new] = self._ends.pop(old)
        if self.hold is not None and self.hold.owner == old:
            self.hold = None

    @property
    def ends(self) -> Mapping[str, float]:
        """Pod uid -> predicted end, of the pods booked here."""
        return self._ends

    def free_at(self, state: ClusterState, node: int, now: float) -> np.ndarray:
        """When each GPU of ``node`` is predicted free (``now`` for an idle one)."""
        return gpu_free_at(state, node, now, self._ends)

    # --- the hold -------------------------------------------------------------------------

    def place(self, state: ClusterState, owner: str, gpus: int, now: float,
              eligible: np.ndarray) -> Hold | None:
        """Hold for ``owner`` (``gpus`` whole GPUs) the eligible node where it can start
        soonest (module doc); None when no node is eligible or the gang is too small."""
        self.hold = None
        if gpus < MIN_GANG:
            return None
        if len(self._ends) > 2 * len(state.reservations) + 64:  # pods released unseen
            self._ends = {u: t for u, t in self._ends.items() if u in state.reservations}
        best: tuple[float, int, int] | None = None
        for n in np.flatnonzero(eligible).tolist():
            free = self.free_at(state, n, now)
            if len(free) < gpus:
                continue
            start = float(np.sort(free)[gpus - 1])
            key = (start, -int((free <= now).sum()), n)
            if best is None or key < best:
                best = key
        if best is None or not math.isfinite(best[0]):
            return None
        self.hold = Hold(owner, best[2], int(gpus), best[0], now, state.node_names[best[2]])
        return self.hold

    def clear(self) -> None:
        self.hold = None

    def lapse(self, now: float, ttl_s: float) -> None:
        """Drop a hold whose owner was not refused for ``ttl_s`` (deleted, or placed by
        another replica)."""
        if self.hold is not None and now - self.hold.asked_s > ttl_s:
            self.hold = None

    def refused(self, state: ClusterState, demand: PodDemand, nodes: np.ndarray, now: float
                ) -> np.ndarray:
        """Per node index in ``nodes``: whether the hold keeps ``demand`` off it."""
        out = np.zeros(len(nodes), dtype=bool)
        h = self.hold
        if h is None or demand.uid == h.owner:
            return out
        node = self.node_of(state)
        at = np.flatnonzero(np.asarray(nodes) == node)
        if node is None or not len(at):
            return out
        if self.keeps_off(state, demand, now):
            out[at] = True
            self.refusals += 1
        return out

    def keeps_off(self, state: ClusterState, demand: PodDemand, now: float) -> bool:
        """Whether placing ``demand`` on the held node would delay the hold."""
        h = self.hold
        if h is None or demand.uid == h.owner:
            return False
        p = demand.predicted_s
        end = now + p * self.margin if p is not None and math.isfinite(p) and p > 0 \
            else math.inf
        if end <= h.start_s:
            return False
        node = self.node_of(state)
        if node is None:
            return False
        takes = demand.whole_gpus + (1 if demand.has_share else 0)
        free = int((self.free_at(state, node, now) <= h.start_s).sum())
        return free - takes < h.gpus

    def node_of(self, state: ClusterState) -> int | None:
        """The held node's index in ``state`` (None: no hold, or the node is gone)."""
        h = self.hold
        if h is None:
            return None
        if not h.name:
            return h.node
        return state.node_index.get(h.name)
