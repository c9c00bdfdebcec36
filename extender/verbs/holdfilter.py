"""filter's part of the hold for a waiting gang (extender/placement/holds.py).

A pod that needs several whole GPUs and that no candidate node can take now holds the node
where it can start soonest (when no other pod holds one); later pods predicted to end after
the hold's start (the job controller's ``sparse.io/predicted-seconds`` annotation, x the
predictor's margin; none: never ends) are kept off that node unless it has GPUs to spare.
The hold lives in this replica's memory: another replica does not see it (a soft rule, never
a booking), and it lapses ``HOLD_TTL_S`` after its owner was last refused.

kube-scheduler counts ``nvidia.com/gpu`` itself (the device plugin's resource), so a pod asking
more whole GPUs than any node has free is refused before filter is asked. The pod watch hands
such pods to ``hold_unscheduled`` (extender/kube/pendinggangs.py), which holds a node for them
the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np

from extender.demand import PodDemand
from extender.placement.fit import fit, model_mask
from extender.placement.holds import MIN_GANG, Hold
from extender.placement.state import ClusterState
from extender.protocol import Pod

if TYPE_CHECKING:
    from extender.service import Scheduler

# kube-scheduler retries an unschedulable pod at least every 5 minutes; twice that without
# being asked about, the owner is gone or placed elsewhere
HOLD_TTL_S = 600.0

Allows = Callable[[str, Mapping[str, str]], bool]  # (node name, its labels): may the pod run there


def held_off(s: Scheduler, state: ClusterState, demand: PodDemand, passed: list[str],
             failed: dict[str, str]) -> list[str]:
    """``passed`` less the held node when ``demand`` would delay the hold (its reason goes
    to ``failed``)."""
    book = s.holds
    book.lapse(s.clock(), HOLD_TTL_S)
    h = book.hold
    if h is None or demand.uid == h.owner:
        return passed
    name = h.name
    if name not in passed or not book.keeps_off(state, demand, s.clock()):
        return passed
    book.refusals += 1
    failed[name] = (f"held for a waiting gang of {h.gpus} GPUs; this pod is not predicted "
                    "to end before it starts")
    return [n for n in passed if n != name]


def hold_for(s: Scheduler, state: ClusterState, demand: PodDemand,
             candidates: list[str]) -> None:
    """Nothing took ``demand``: a gang holds the candidate node where it starts soonest
    (or renews its hold)."""
    book = s.holds
    now = s.clock()
    book.lapse(now, HOLD_TTL_S)
    if demand.whole_gpus < MIN_GANG or (book.hold is not None
                                        and book.hold.owner != demand.uid):
        return
    eligible = np.zeros(len(state.node_names), dtype=bool)
    for name in candidates:
        i = state.node_index.get(name)
        if i is not None:
            eligible[i] = True
    sizes = state.node_stop - state.node_start
    eligible &= sizes >= demand.whole_gpus
    if demand.allowed_models is not None:  # nodes with a GPU of a model the pod may use
        ok = model_mask(state, demand, np.arange(len(state.gpu_model)))
        has = np.zeros(len(state.node_names), dtype=bool)
        has[state.gpu_node[ok]] = True
        eligible &= has
    book.place(state, demand.uid, demand.whole_gpus, now, eligible)


async def hold_unscheduled(s: Scheduler, pod: Pod, allows: Allows) -> Hold | None:
    """kube-scheduler refused ``pod`` without asking filter: when it needs several whole
    GPUs and no GPU node ``allows`` (name, labels: the pod's node selector, required node
    affinity and tolerations) can take it now, hold (or renew) the one where it starts
    soonest. The pod's hold, or None."""
    book = s.holds
    book.lapse(s.clock(), HOLD_TTL_S)
    uid = pod.metadata.uid
    if book.hold is not None and book.hold.owner != uid:
        return None
    demand = await s.demand_of(pod)
    if demand.whole_gpus < MIN_GANG:
        return None
    state = s.own_excluded(await s.view(), uid)
    nodes = s.inventory.nodes
    candidates = [n for n in state.node_names if n in nodes and allows(n, nodes[n].labels)]
    if not candidates or fit(state, demand, candidates, explain=False).fits.any():
        return None  # refused for something other than its GPUs: filter will be asked
    hold_for(s, state, demand, candidates)
    return book.hold if book.hold is not None and book.hold.owner == uid else None
