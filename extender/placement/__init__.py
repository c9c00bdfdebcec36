"""Placement core: fit, per-GPU policy costs, Hungarian assignment, scores. Pure, no I/O.

The extender's service and the trace simulator both call exactly these functions.
"""

from extender.placement.assign import Assignment, assign, node_costs, reservation_for
from extender.placement.fit import FitResult, fit
from extender.placement.normalize import scores_from_costs
from extender.placement.policies import REGISTRY, Policy, make_policy
from extender.placement.state import ClusterState

__all__ = [
    "REGISTRY",
    "Assignment",
    "ClusterState",
    "FitResult",
    "Policy",
    "assign",
    "fit",
    "make_policy",
    "node_costs",
    "reservation_for",
    "scores_from_costs",
]
