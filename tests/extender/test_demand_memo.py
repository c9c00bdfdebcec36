"""pod_demand keeps the demand of each pod shape: a pod gets its own identity and exactly
what the uncached computation gives, whatever changed between two pods."""

from __future__ import annotations

import dataclasses
import random

import pytest
from builders import container, pod

from extender import demand as demand_module
from extender.demand import Prediction, pod_demand
from extender.errors import InvalidDemand
from extender.protocol import Pod, pod_from_dict


def as_pod(p: dict) -> Pod:
    return pod_from_dict(p)


def uncached(p: Pod, prediction: Prediction | None = None) -> demand_module.PodDemand:
    shape = demand_module._pod_shape(p, prediction)
    meta = p.metadata
    return dataclasses.replace(shape, uid=meta.uid, namespace=meta.namespace or "default",
                               name=meta.name)


def test_replicas_share_the_shape_and_keep_their_own_identity() -> None:
    a, b = as_pod(pod(mem=4000, milli=200)), as_pod(pod(mem=4000, milli=200, namespace="x"))
    da, db = pod_demand(a), pod_demand(b)
    assert (da.uid, da.name, da.namespace) == (a.metadata.uid, a.metadata.name, "ml")
    assert (db.uid, db.name, db.namespace) == (b.metadata.uid, b.metadata.name, "x")
    assert da == uncached(a) and db == uncached(b)  # every field, not only the ones read here


def test_whatever_changes_between_two_pods_the_demand_is_computed_afresh() -> None:
    rng = random.Random(7)
    prediction = Prediction(gpu_milli=150, gpu_mem_mib=9000, job_class="recommendation")
    for _ in range(200):  # few distinct shapes, asked in a random order: hits and misses
        p = pod(mem=rng.choice([2000, 4000]), milli=rng.choice([100, 300]),
                job_class=rng.choice([None, "cnn", "transformer"]),
                models=rng.choice([None, "H100|H200"]))
        if rng.random() < 0.3:
            p["metadata"]["annotations"]["sparse.io/predicted-seconds"] = rng.choice(["60", "90"])
        if rng.random() < 0.3:
            p["spec"]["initContainers"] = [{"name": "init", "resources": {
                "requests": {"cpu": rng.choice(["8", "16"]), "memory": "1Gi"}}}]
        typed = as_pod(p)
        pred = prediction if rng.random() < 0.3 else None
        assert pod_demand(typed, pred) == uncached(typed, pred)


def test_an_invalid_pod_raises_each_time_and_is_not_kept() -> None:
    bad = as_pod(pod(containers=[container("a", mem=1000, milli=700),
                                 container("b", mem=1000, milli=700)]))
    for _ in range(2):
        with pytest.raises(InvalidDemand, match="milli in total"):
            pod_demand(bad)
    assert not any(key[0] and key[0][0][0] == "a" for key in demand_module._SHAPES)


def test_the_table_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demand_module, "_SHAPES", {})
    monkeypatch.setattr(demand_module, "_SHAPES_MAX", 3)
    for mem in range(1000, 1010):
        p = as_pod(pod(mem=mem, milli=100))
        assert pod_demand(p) == uncached(p)
        assert len(demand_module._SHAPES) <= 3
