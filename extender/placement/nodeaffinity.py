"""Whether a pod may run on a node at all, as kube-scheduler decides it. Pure.

kube-scheduler asks the extender only about nodes its own filters passed, so filter never needs
this; the pod watch does, for a gang kube-scheduler refused without asking (a hold on a node the
pod cannot use would keep other pods off it for nothing). The rules are kube-scheduler's
``NodeAffinity``, ``TaintToleration`` and ``NodeUnschedulable`` filters
(k8s.io/component-helpers/scheduling/corev1 and nodeaffinity, Apache-2.0):

* ``spec.nodeSelector``: every label equal;
* ``requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms``: any term matches; a
  term matches when all its ``matchExpressions`` (node labels) and ``matchFields`` (only
  ``metadata.name``) do; an empty or malformed term matches nothing;
* taints: every ``NoSchedule``/``NoExecute`` taint tolerated (``PreferNoSchedule`` only scores);
  a cordoned node (``spec.unschedulable``) counts as tainted
  ``node.kubernetes.io/unschedulable:NoSchedule``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
FILTERING_EFFECTS = ("NoSchedule", "NoExecute")
_DECIMAL = re.compile(r"[+-]?[0-9]+")


def node_taints(node: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    """The taints of a Node object that keep pods off it (cordoning included)."""
    spec = node.get("spec") or {}
    taints = [t for t in spec.get("taints") or [] if t.get("effect") in FILTERING_EFFECTS]
    if spec.get("unschedulable") and not any(
            t.get("key") == UNSCHEDULABLE_TAINT["key"] for t in taints):
        taints.append(dict(UNSCHEDULABLE_TAINT))
    return tuple(taints)


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """``Toleration.ToleratesTaint``: an empty effect or key matches any; ``Exists`` any
    value, ``Equal`` (the default) the same value."""
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("key") and toleration.get("key") != taint.get("key"):
        return False
    op = toleration.get("operator") or "Equal"
    if op == "Exists":
        return True
    return op == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def tolerates_all(tolerations: Sequence[Mapping[str, Any]],
                  taints: Iterable[Mapping[str, Any]]) -> bool:
    return all(any(tolerates(t, taint) for t in tolerations) for taint in taints
               if taint.get("effect") in FILTERING_EFFECTS)


def _int(value: str) -> int | None:
    """Go's ``strconv.ParseInt(value, 10, 64)``: decimal digits, an optional sign."""
    return int(value) if isinstance(value, str) and _DECIMAL.fullmatch(value) else None


def _expression(req: Mapping[str, Any], have: Mapping[str, str]) -> bool | None:
    """One node selector requirement against ``have`` (labels); None when malformed."""
    key, op, values = req.get("key"), req.get("operator"), list(req.get("values") or [])
    if not key:
        return None
    present = key in have
    if op in ("In", "NotIn"):
        if not values:
            return None
        inside = present and have[key] in values
        return inside if op == "In" else not inside
    if op in ("Exists", "DoesNotExist"):
        if values:
            return None
        return present if op == "Exists" else not present
    if op in ("Gt", "Lt"):
        bound = _int(values[0]) if len(values) == 1 else None
        if bound is None:
            return None
        value = _int(have[key]) if present else None
        if value is None:
            return False
        return value > bound if op == "Gt" else value < bound
    return None


def _field(req: Mapping[str, Any], name: str) -> bool | None:
    """A ``matchFields`` requirement: ``In``/``NotIn`` with one value; only ``metadata.name``
    is a field of a node (any other reads as empty)."""
    values = list(req.get("values") or [])
    if req.get("operator") not in ("In", "NotIn") or len(values) != 1:
        return None
    value = name if req.get("key") == "metadata.name" else ""
    return (value == values[0]) == (req.get("operator") == "In")


def _term(term: Mapping[str, Any], name: str, labels: Mapping[str, str]) -> bool:
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False
    results = [_expression(r, labels) for r in exprs] + [_field(r, name) for r in fields]
    return all(r is True for r in results)


def required_affinity(spec: Mapping[str, Any], name: str, labels: Mapping[str, str]) -> bool:
    """The pod's nodeSelector and required node affinity both allow the node."""
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is None:
        return True
    return any(_term(t, name, labels) for t in required.get("nodeSelectorTerms") or [])


def pod_allows_node(spec: Mapping[str, Any], name: str, labels: Mapping[str, str],
                    taints: Iterable[Mapping[str, Any]] = ()) -> bool:
    """kube-scheduler's verdict on node ``name`` for a pod with ``spec``, from everything
    but resources: node selector, required node affinity, taints."""
    return (required_affinity(spec, name, labels)
            and tolerates_all(spec.get("tolerations") or [], taints))
