"""Delay scheduling for embedding readers: wait briefly for a warm node, and give a freed node
to the queued job its cache serves. Pure, no I/O; the locality replay (``bench/sim/locality.py``)
calls it, and so can the extender's queue adapters.

Delay scheduling (Zaharia, Borthakur, Sen Sarma, Elmeleegy, Shenker and Stoica, "Delay
scheduling: a simple technique for achieving locality and fairness in cluster scheduling",
EuroSys 2010): a job that cannot start where its data is waits a little for such a slot
instead of starting at once elsewhere, and a freed slot goes first to a queued job whose data
it holds. Their wait bound ``D`` is a fixed number of scheduling chances; here it is derived
per job from the locality term's own prediction instead of set by hand: a job waits for a warm
node only while the wait so far plus the predicted time until that node frees is less than the
run time the node saves it (``saved_seconds``: the step time saved, ``step_time``, over the
job's steps). Waiting longer than that would end the job later than starting cold now, so the
bound is a fraction of its predicted run time, the fraction being what the warm node saves.

Nothing starves: a job's whole wait is bounded by that saving, counted from its first chance
to start, and a job whose latest start has come (``queueorder.latest_start_due``) never waits
and goes first on a freed node whatever its cache says (``freed_node_order``); of the others,
only one job per freed node skips ahead of the queue.

The extender waits only (``warm_wait``; kube-scheduler's queue keeps its own order, so there
is no freed-node reorder), for warm nodes without room now whose pods all carry a predicted
end, and never past the operator's ``max_wait_s`` from the pod's creation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from extender.demand import PodDemand
from extender.placement.fit import model_mask
from extender.placement.holds import gpu_free_at
from extender.placement.state import ClusterState


def saved_seconds(bonus_there: float, bonus_here: float, reference_run_s: float) -> float:
    """Run time the node ``there`` saves over ``here``: the locality term's bonuses are shares
    of the job's reference step time, so their difference times the job's reference run time
    (its steps x that step) is seconds; 0 when ``there`` saves nothing more. (With a store
    whose egress binds, the bonuses count the time the job's misses hold the store's other
    readers back too, ``step_time.loaded_per_byte``: seconds of all of them.)"""
    if not reference_run_s > 0:
        return 0.0
    return max(float(bonus_there) - float(bonus_here), 0.0) * float(reference_run_s)


def should_wait(saved_s: float, free_in_s: float, waited_s: float, due: bool) -> bool:
    """Whether a job that could start now waits for a warm node instead: not when its latest
    start has come (``due``); else while its whole wait (``waited_s`` since its first chance to
    start, plus ``free_in_s`` until the warm node is predicted to have room) stays under the
    run time that node saves it (``saved_s``)."""
    if due or not saved_s > 0 or not np.isfinite(free_in_s):
        return False
    return max(waited_s, 0.0) + max(free_in_s, 0.0) < saved_s


def free_in(now: float, free_gpus: float, need_gpus: float, ends: Sequence[float],
            gpus: Sequence[float]) -> float:
    """Seconds until a node has ``need_gpus`` free: it has ``free_gpus`` now and its running
    jobs are predicted to end at ``ends`` freeing ``gpus`` each; inf when they never add up.
    (Whole-node arithmetic: how the freed shares pack on the node's GPUs is left to fit.)"""
    have = float(free_gpus)
    if have >= need_gpus:
        return 0.0
    for end, g in sorted(zip(ends, gpus, strict=True)):
        have += float(g)
        if have >= need_gpus - 1e-9:
            return max(float(end) - now, 0.0)
    return float("inf")


def freed_node_order(held: Sequence[float], due: Sequence[bool]) -> list[int]:
    """The order in which queued jobs (in queue order) try when a node frees: jobs whose latest
    start has come first, as the queue had them; then the one job whose tables the node's cache
    holds most (the first in the queue among equals; none when the cache holds none of any),
    skipping ahead of the queue's head as delay scheduling lets one local task skip; then the
    rest in queue order. Only one job skips per freed node, so the queue order holds."""
    first = [k for k in range(len(held)) if due[k]]
    rest = [k for k in range(len(held)) if not due[k]]
    best = max(rest, key=lambda k: (float(held[k]), -k), default=None)
    if best is None or not float(held[best]) > 0:
        return first + rest
    return first + [best] + [k for k in rest if k != best]


@dataclass(frozen=True, slots=True)
class Wait:
    """A pod held back for a warm node: which, and the figures that justify it."""

    node: str  # the warm node waited for
    free_in_s: float  # until it is predicted to have room for the pod
    saved_s: float  # run time it saves the pod over the node it would take now
    waited_s: float  # since the pod's first chance to start

    def reason(self) -> str:
        """For the filter's answer (kube-scheduler's FailedScheduling event): the figures."""
        return (f"waiting for node {self.node}, whose embedding cache holds this pod's tables:"
                f" room predicted in {self.free_in_s:.0f} s, saving {self.saved_s:.0f} s of"
                f" run time (waited {self.waited_s:.0f} s)")

    def event(self) -> str:
        """For the extender's own event: the same while the pod waits for the same node (so
        that its rate limit holds), the figures being in the scheduler's."""
        return (f"waiting for node {self.node}, whose embedding cache holds this pod's tables,"
                " to have room (delay scheduling, --locality-max-wait)")


def room_in(state: ClusterState, node: int, demand: PodDemand, now: float,
            ends: Mapping[str, float]) -> float:
    """Seconds until node ``node`` has room for ``demand``'s GPUs as its pods end (``ends``:
    pod uid -> predicted end; a pod without one never ends): a share on the GPU of an allowed
    model whose free compute and memory first cover it, whole GPUs when that many are free
    (with a share, on one more free GPU). 0: room now; inf: never, by these predictions."""
    lo, hi = int(state.node_start[node]), int(state.node_stop[node])
    gpus = np.arange(lo, hi)[model_mask(state, demand, np.arange(lo, hi))]
    if demand.whole_gpus:
        free = np.sort(gpu_free_at(state, node, now, ends)[gpus - lo])
        takes = demand.slot_count
        return max(float(free[takes - 1]) - now, 0.0) if len(free) >= takes else math.inf
    if not demand.has_share:
        return 0.0
    best = math.inf
    for i in gpus.tolist():
        milli = int(state.milli_cap[i] - state.milli_used[i]) - demand.share_milli
        mem = int(state.mem_cap[i] - state.mem_used[i]) - demand.share_mem_mib
        at = now
        if milli < 0 or mem < 0:
            at = math.inf
            uuid = state.gpu_uuid[i]
            leaving = []
            for uid, _frac, _cls in state.resident_pods.get(i, ()):
                r = state.reservations.get(uid)
                if r is not None:
                    m, k = r.per_gpu().get(uuid, (0, 0))
                    leaving.append((ends.get(uid, math.inf), m, k))
            for end, m, k in sorted(leaving):
                if not math.isfinite(end):
                    break
                mem, milli = mem + m, milli + k
                if milli >= 0 and mem >= 0:
                    at = max(end, now)
                    break
        best = min(best, at)
    return max(best - now, 0.0)


def warm_wait(bonus: Callable[[list[str]], np.ndarray], here: str | None,
              near: Mapping[str, float], waited_s: float, due: bool, reference_run_s: float
              ) -> Wait | None:
    """Whether a pod that could start on ``here`` now waits instead for one of the warm
    nodes ``near`` (name -> seconds until it has room, > 0, in the order to try): the first
    whose saving over ``here`` (``bonus(names)``: the locality bonus per name, shares of the
    pod's reference step; ``saved_seconds``) passes ``should_wait``. None: start now."""
    if here is None or due or not reference_run_s > 0:
        return None
    near = {n: f for n, f in near.items()
            if n != here and f > 0 and np.isfinite(f) and waited_s + f < reference_run_s}
    if not near:
        return None
    b = bonus([*near, here])
    for (node, fin), there in zip(near.items(), b[:-1].tolist(), strict=True):
        saved = saved_seconds(there, float(b[-1]), reference_run_s)
        if should_wait(saved, fin, waited_s, due):
            return Wait(node, fin, saved, max(waited_s, 0.0))
    return None
