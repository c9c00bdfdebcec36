"""prioritize: score each candidate 0-10 by the policy's cost of placing the pod there, plus
the data-locality term (``extender.placement.locality``).

Nothing is recorded: scores only advise, bind re-plans on the current ledger.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np

from extender import stages
from extender.demand import PodDemand, wants_gpu
from extender.errors import InvalidDemand
from extender.placement import fit, node_costs, scores_from_costs
from extender.placement.locality import InvalidEmbedding, combine, idle_nodes, parse_embedding
from extender.protocol import ExtenderArgs, HostPriority
from extender.verbs.costcache import CycleEntry
from extender.verbs.reasons import zero_scores

if TYPE_CHECKING:
    from extender.protocol import Pod
    from extender.service import Scheduler

log = logging.getLogger("sparse.prioritize")
_unplaced_stores: set[str] = set()  # stores already reported as without known shards


def with_locality(s: Scheduler, pod: Pod, demand: PodDemand | None, names: list[str],
                  costs: np.ndarray) -> np.ndarray:
    """Costs plus the locality term; an unreadable declaration scores neutral (logged)."""
    if demand is None or not s.locality.weights.enabled:
        return costs
    try:
        spec = parse_embedding(pod.metadata.annotations)
    except InvalidEmbedding as exc:
        log.warning("%s/%s: no locality score: %s", pod.metadata.namespace, pod.metadata.name,
                    exc)
        return costs
    if (spec is not None and spec.store not in s.locality.store_nodes
            and spec.store not in _unplaced_stores and len(_unplaced_stores) < 1000):
        _unplaced_stores.add(spec.store)
        log.warning("embedding store %r: no shard pod labelled sparse.io/embedding-store=%s "
                    "seen; its pods get no rack or zone score", spec.store, spec.store)
    if spec is None and not s.locality.avoids():  # the term is zero: nothing to add
        return costs
    idle = idle_nodes(s.state, names) if spec is None else None
    return combine(costs, s.locality.term(spec, demand, names, idle))


def cycle_costs(s: Scheduler, uid: str, cached: CycleEntry) -> np.ndarray | None:
    """The costs filter computed for this pod, with the nodes booked since (this replica's
    binds, or others' its view has seen) costed again on the current view; None when the
    inventory changed. No I/O: the view is the one the last verb left."""
    changed = cached.changed(s.state)
    if changed is None or not len(changed):
        return cached.costs if changed is not None else None
    demand = s.pending_demand(uid)
    if demand is None:
        return None
    state = s.own_excluded(s.state, uid)
    names = [cached.passed[i] for i in changed.tolist()]
    result = fit(state, demand, names, explain=False)
    costs = cached.costs.copy()
    costs[changed] = node_costs(state, demand, result, s.costing_policy)
    return costs


def host_priorities(names: list[str], scores: list[int]) -> list[HostPriority]:
    """The HostPriorityList; positional construction in C (keywords cost a fifth more)."""
    if len(names) != len(scores):
        raise ValueError(f"{len(names)} hosts for {len(scores)} scores")
    return list(map(HostPriority, names, scores))


async def run(s: Scheduler, args: ExtenderArgs) -> list[HostPriority]:
    pod = args.pod
    if not wants_gpu(pod):
        return zero_scores(args.node_names)
    cached = s.cycle_costs.take(pod.metadata.uid, s.clock())
    costs = None if cached is None else cycle_costs(s, pod.metadata.uid, cached)
    if cached is not None and costs is not None:
        passed = cached.passed
        if passed != args.node_names:  # normally the very list filter passed
            # nodes filter rejected are absent: infeasible, score 0
            costs = cached.costs_for(args.node_names, costs)
        costs = with_locality(s, pod, s.pending_demand(pod.metadata.uid), args.node_names,
                              costs)
        return host_priorities(args.node_names, scores_from_costs(costs))
    try:
        demand = await s.demand_of(pod)
    except InvalidDemand:
        return zero_scores(args.node_names)
    with stages.stage("ledger"):
        view = await s.view()
    state = s.own_excluded(view, demand.uid)
    result = fit(state, demand, args.node_names)
    costs = with_locality(s, pod, demand, result.names,
                          node_costs(state, demand, result, s.costing_policy))
    scores = scores_from_costs(costs)
    if len(result.names) == len(args.node_names):  # every candidate known: same order
        return host_priorities(result.names, scores)
    by_name = dict(zip(result.names, scores, strict=True))
    return [HostPriority(Host=n, Score=by_name.get(n, 0)) for n in args.node_names]
