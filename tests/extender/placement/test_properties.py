"""Property tests: whatever arrives, placement never exceeds a GPU and respects models, and
the vectorised node costs equal the Hungarian optimum node by node."""

from __future__ import annotations

import numpy as np
from builders import inventory
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.demand import ContainerRequest, PodDemand
from extender.interference import default_matrix
from extender.inventory import Gpu, NodeGpus
from extender.placement import ClusterState, assign, fit, make_policy, node_costs, reservation_for

MODELS = ["V100M16", "V100M32", "A100"]
MEM = {"V100M16": 16384, "V100M32": 32768, "A100": 81920}
CLASSES = ["recommendation", "cnn", "cnn-small", "transformer", "unknown"]

nodes_st = st.lists(
    st.lists(st.sampled_from(MODELS), min_size=1, max_size=4), min_size=1, max_size=5
)
demand_st = st.builds(
    lambda kind, n, mem, milli, cls, models: (kind, n, mem, milli, cls, models),
    st.sampled_from(["share", "whole", "mixed"]),
    st.integers(1, 3),
    st.integers(1, 40000),
    st.integers(0, 1000),
    st.sampled_from(CLASSES),
    st.one_of(st.none(), st.sets(st.sampled_from(MODELS), min_size=1, max_size=2)),
)


def make_inventory(spec):
    return inventory(*[
        NodeGpus(f"n{i}", tuple(Gpu(f"n{i}-g{j}", j, m, MEM[m]) for j, m in enumerate(models)))
        for i, models in enumerate(spec)
    ])


def make_demand(uid, kind, n, mem, milli, cls, models):
    w = n if kind in ("whole", "mixed") else 0
    sharing = kind in ("share", "mixed")
    containers = []
    if w:
        containers.append(ContainerRequest("w", w, 0, 0))
    shares = (ContainerRequest("s", 0, milli, mem),) if sharing else ()
    return PodDemand(uid=uid, namespace="ns", name=uid, containers=(*containers, *shares),
                     whole_gpus=w, share_milli=milli if sharing else 0,
                     share_mem_mib=mem if sharing else 0, job_class=cls,
                     allowed_models=frozenset(models) if models else None,
                     share_containers=shares)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes_st, st.lists(demand_st, min_size=1, max_size=25),
       st.sampled_from(["sparse", "binpack", "spread"]))
def test_never_over_capacity_and_models_respected(spec, demands, policy_name):
    state = ClusterState.build(make_inventory(spec), default_matrix())
    policy = make_policy(policy_name)
    names = state.node_names
    for i, d in enumerate(demands):
        demand = make_demand(f"p{i}", *d)
        result = fit(state, demand, names)
        costs = node_costs(state, demand, result, policy)
        for k, name in enumerate(result.names):
            choice = assign(state, demand, name, policy)
            assert (choice is not None) == bool(result.fits[k])
            if choice is not None:
                assert np.isclose(choice.cost, costs[k])
        if not result.fits.any():
            continue
        best = result.names[int(np.argmin(costs))]
        choice = assign(state, demand, best, policy)
        r = reservation_for(demand, choice, state, 0.0, None)
        for uuid in r.gpus:
            model = state.models[state.gpu_model[state.gpu_index[uuid]]]
            assert demand.allowed_models is None or model in demand.allowed_models
        assert len(set(choice.whole)) == demand.whole_gpus
        state.apply(r)
        assert (state.mem_used <= state.mem_cap).all()
        assert (state.milli_used <= state.milli_cap).all()
        assert (state.mem_used >= 0).all()


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 16), st.integers(1, 30),
       st.lists(st.sampled_from([0.0, 1.0, 2.0, -0.0, np.inf, -np.inf, np.nan]),
                min_size=480, max_size=480))
def test_first_minimum_is_argmin_along_rows(width: int, rows: int, values: list[float]) -> None:
    """The pick of each node's cheapest GPU equals argmin's, ties, infinities and NaN
    included, for every row width (those read as one integer and the others)."""
    from extender.placement.assign import first_minimum

    runs = np.array(values[: width * rows]).reshape(rows, width)
    least = runs[:, 0].copy()
    for j in range(1, width):
        np.minimum(least, runs[:, j], out=least)
    np.testing.assert_array_equal(first_minimum(runs, least), runs.argmin(axis=1))
