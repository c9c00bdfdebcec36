"""preempt: keep only the nodes where evicting the proposed victims frees enough GPU."""

from __future__ import annotations

from typing import TYPE_CHECKING

from extender.demand import wants_gpu
from extender.errors import InvalidDemand
from extender.placement import assign
from extender.protocol import MetaPod, MetaVictims, PreemptionArgs, PreemptionResult

if TYPE_CHECKING:
    from extender.service import Scheduler


async def run(s: Scheduler, args: PreemptionArgs) -> PreemptionResult:
    if not wants_gpu(args.pod):
        return PreemptionResult(NodeNameToMetaVictims={
            node: MetaVictims(Pods=[MetaPod(UID=u) for u in v.pod_uids],
                              NumPDBViolations=v.num_pdb_violations)
            for node, v in args.victims.items()
        })
    try:
        demand = await s.demand_of(args.pod)
    except InvalidDemand:
        return PreemptionResult()
    base = s.own_excluded(await s.view(), demand.uid)
    out: dict[str, MetaVictims] = {}
    for node, victims in args.victims.items():
        what_if = base.copy()
        for uid in victims.pod_uids:
            what_if.unapply(uid)
        if assign(what_if, demand, node, s.policy) is not None:
            out[node] = MetaVictims(
                Pods=[MetaPod(UID=u) for u in victims.pod_uids],
                NumPDBViolations=victims.num_pdb_violations,
            )
    return PreemptionResult(NodeNameToMetaVictims=out)
