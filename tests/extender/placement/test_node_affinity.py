"""kube-scheduler's node selector, required node affinity and taint rules
(extender/placement/nodeaffinity.py), case by case."""

from __future__ import annotations

import pytest

from extender.placement.nodeaffinity import node_taints, pod_allows_node, tolerates

LABELS = {"rack": "r1", "gpu": "a100", "gpus": "8"}


def affinity(*terms: dict) -> dict:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}}


def expr(key: str, op: str, *values: str) -> dict:
    return {"matchExpressions": [{"key": key, "operator": op, "values": list(values)}]}


@pytest.mark.parametrize(("term", "allowed"), [
    (expr("gpu", "In", "h100", "a100"), True),
    (expr("gpu", "In", "h100"), False),
    (expr("zone", "In", "z1"), False),  # absent label
    (expr("gpu", "NotIn", "h100"), True),
    (expr("gpu", "NotIn", "a100"), False),
    (expr("zone", "NotIn", "z1"), True),  # absent label: not in
    (expr("rack", "Exists"), True),
    (expr("zone", "Exists"), False),
    (expr("zone", "DoesNotExist"), True),
    (expr("rack", "DoesNotExist"), False),
    (expr("gpus", "Gt", "4"), True),
    (expr("gpus", "Gt", "8"), False),
    (expr("gpus", "Lt", "9"), True),
    (expr("rack", "Gt", "1"), False),  # not an integer
    (expr("zone", "Lt", "9"), False),  # absent
    (expr("gpus", "Gt", "4", "5"), False),  # malformed: one value only
    (expr("gpu", "In"), False),  # malformed: In needs values
    (expr("rack", "Exists", "r1"), False),  # malformed: Exists takes none
    (expr("gpu", "Like", "a100"), False),  # unknown operator
    ({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}, True),
    ({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}, False),
    ({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1", "n2"]}]},
     False),  # one value only
    ({}, False),  # an empty term matches nothing
])
def test_one_term(term, allowed):
    assert pod_allows_node(affinity(term), "n1", LABELS) is allowed


def test_terms_are_ored_and_requirements_anded():
    both = {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]},
                                 {"key": "rack", "operator": "In", "values": ["r2"]}]}
    assert not pod_allows_node(affinity(both), "n1", LABELS)
    assert pod_allows_node(affinity(both, expr("rack", "In", "r1")), "n1", LABELS)
    mixed = {**expr("gpu", "In", "a100"),
             "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}
    assert not pod_allows_node(affinity(mixed), "n1", LABELS)
    assert not pod_allows_node(affinity(), "n1", LABELS)  # no term: nothing matches
    assert pod_allows_node({"affinity": {"nodeAffinity": {}}}, "n1", LABELS)


def test_node_selector_and_affinity_must_both_allow():
    spec = {"nodeSelector": {"rack": "r1"}, **affinity(expr("gpu", "In", "h100"))}
    assert not pod_allows_node(spec, "n1", LABELS)
    spec = {"nodeSelector": {"rack": "r2"}, **affinity(expr("gpu", "In", "a100"))}
    assert not pod_allows_node(spec, "n1", LABELS)
    assert pod_allows_node({"nodeSelector": {"rack": "r1"}}, "n1", LABELS)


NO_SCHEDULE = {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}


@pytest.mark.parametrize(("toleration", "ok"), [
    ({"key": "dedicated", "value": "infer"}, True),  # Equal by default, any effect
    ({"key": "dedicated", "operator": "Equal", "value": "train"}, False),
    ({"key": "dedicated", "operator": "Exists"}, True),
    ({"operator": "Exists"}, True),  # empty key + Exists: everything
    ({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}, False),
    ({"key": "other", "operator": "Exists"}, False),
    ({"key": "dedicated", "operator": "Gt", "value": "1"}, False),  # unknown here
])
def test_toleration_matches_taint(toleration, ok):
    assert tolerates(toleration, NO_SCHEDULE) is ok


def test_every_filtering_taint_must_be_tolerated():
    node = {"spec": {"taints": [NO_SCHEDULE,
                                {"key": "gpu-maint", "effect": "NoExecute"},
                                {"key": "soft", "effect": "PreferNoSchedule"}]}}
    taints = node_taints(node)
    assert [t["key"] for t in taints] == ["dedicated", "gpu-maint"]  # Prefer only scores
    one = {"tolerations": [{"key": "dedicated", "operator": "Exists"}]}
    assert not pod_allows_node(one, "n1", LABELS, taints)
    both = {"tolerations": [*one["tolerations"], {"key": "gpu-maint", "operator": "Exists"}]}
    assert pod_allows_node(both, "n1", LABELS, taints)
    assert pod_allows_node({}, "n1", LABELS, ())


def test_a_cordoned_node_counts_as_tainted_unschedulable():
    taints = node_taints({"spec": {"unschedulable": True}})
    assert taints == ({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},)
    assert not pod_allows_node({}, "n1", LABELS, taints)
    tolerant = {"tolerations": [{"key": "node.kubernetes.io/unschedulable",
                                 "operator": "Exists", "effect": "NoSchedule"}]}
    assert pod_allows_node(tolerant, "n1", LABELS, taints)
