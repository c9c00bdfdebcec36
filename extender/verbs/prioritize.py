"""prioritize: score each candidate 0-10 by the policy's cost of placing the pod there.

Nothing is recorded: scores only advise, bind re-plans on the current ledger.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from extender import stages
from extender.demand import wants_gpu
from extender.errors import InvalidDemand
from extender.placement import fit, node_costs, scores_from_costs
from extender.protocol import ExtenderArgs, HostPriority
from extender.verbs.reasons import zero_scores

if TYPE_CHECKING:
    from extender.service import Scheduler


async def run(s: Scheduler, args: ExtenderArgs) -> list[HostPriority]:
    pod = args.pod
    if not wants_gpu(pod):
        return zero_scores(args.node_names)
    cached = s.cycle_costs.take(pod.metadata.uid, s.clock())
    if cached is not None:
        passed, costs = cached
        if passed != args.node_names:  # normally the very list filter passed
            by_node = dict(zip(passed, costs.tolist(), strict=True))
            # nodes filter rejected are absent: infeasible, score 0
            costs = np.array([by_node.get(n, np.inf) for n in args.node_names])
        return [HostPriority(Host=n, Score=sc) for n, sc in
                zip(args.node_names, scores_from_costs(costs), strict=True)]
    try:
        demand = await s.demand_of(pod)
    except InvalidDemand:
        return zero_scores(args.node_names)
    with stages.stage("ledger"):
        view = await s.view()
    state = s.own_excluded(view, demand.uid)
    result = fit(state, demand, args.node_names)
    scores = scores_from_costs(node_costs(state, demand, result, s.costing_policy))
    if len(result.names) == len(args.node_names):  # every candidate known: same order
        return [HostPriority(Host=n, Score=sc) for n, sc in zip(result.names, scores,
                                                                strict=True)]
    by_name = dict(zip(result.names, scores, strict=True))
    return [HostPriority(Host=n, Score=by_name.get(n, 0)) for n in args.node_names]
