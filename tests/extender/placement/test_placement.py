from __future__ import annotations

import numpy as np
import pytest
from builders import gpu_node, inventory

from extender.demand import ContainerRequest, PodDemand
from extender.interference import default_matrix
from extender.inventory import Gpu
from extender.ledger.rules import Allocation, Reservation
from extender.placement import (
    ClusterState,
    assign,
    fit,
    make_policy,
    node_costs,
    reservation_for,
    scores_from_costs,
)


def share(uid="p", mem=4096, milli=200, job_class="unknown", models=None):
    return PodDemand(uid=uid, namespace="ml", name=uid,
                     containers=(ContainerRequest("c", 0, milli, mem),), whole_gpus=0,
                     share_milli=milli, share_mem_mib=mem, job_class=job_class,
                     allowed_models=frozenset(models) if models else None,
                     share_containers=(ContainerRequest("c", 0, milli, mem),))


def whole(uid="w", n=2, models=None):
    return PodDemand(uid=uid, namespace="ml", name=uid,
                     containers=(ContainerRequest("c", n, 0, 0),), whole_gpus=n,
                     share_milli=0, share_mem_mib=0,
                     allowed_models=frozenset(models) if models else None)


def booked(uid, gpu, mem, milli, job_class="unknown", node="a"):
    return Reservation(pod_uid=uid, namespace="ml", name=uid, node=node,
                       allocations=(Allocation(gpu, "c", mem, milli),), job_class=job_class)


@pytest.fixture
def state():
    inv = inventory(gpu_node("a", 2, "V100M16", 16384), gpu_node("b", 4, "V100M32", 32768),
                    gpu_node("c", 1, "A100", 81920))
    return ClusterState.build(inv, default_matrix())


def test_fit_reasons(state):
    state.apply(booked("x", "GPU-a-0", 16000, 100))
    result = fit(state, share(mem=8192), ["a", "b", "c", "ghost"])
    assert result.fits.tolist() == [True, True, True]
    result = fit(state, share(mem=20000), ["a", "b", "ghost"])
    assert result.fits.tolist() == [False, True]
    assert result.unresolvable == {
        "a": "GPU size: needs 20000 MiB on one GPU, the largest has 16384 MiB (1 node;"
             " closest: a)",
        "ghost": "node has no GPU inventory known to sparse",
    }
    result = fit(state, whole(n=2), ["a", "b", "c"])
    assert result.fits.tolist() == [False, True, False]
    assert result.failed == {
        "a": "free GPUs: needs 2 free whole GPU(s), at most 1 free on a node (1 node; closest: a)"}
    assert result.unresolvable == {
        "c": "GPU count: needs 2 GPUs, at most 1 usable on a node (1 node; closest: c)"}
    result = fit(state, share(models={"A100"}), ["a", "c"])
    assert result.fits.tolist() == [False, True]
    assert result.unresolvable == {"a": "GPU model: no GPU of model A100 (1 node)"}


def test_busy_gpu_is_failed_not_unresolvable(state):
    state.apply(booked("x", "GPU-c-0", 80000, 900, node="c"))
    result = fit(state, share(mem=4096, milli=200), ["c"])
    assert not result.fits[0]
    assert result.failed["c"] == ("GPU memory: needs 4096 MiB, at most 1920 MiB free on a GPU"
                                  " (1 node; closest: c)")
    result = fit(state, share(mem=1024, milli=200), ["c"])
    assert result.failed["c"] == ("GPU compute: needs 200 milli, at most 100 milli free on a GPU"
                                  " with 1024 MiB free (1 node; closest: c)")


def test_whole_plus_share_needs_distinct_gpus():
    state = ClusterState.build(inventory(gpu_node("a", 2)), default_matrix())
    mixed = PodDemand(uid="m", namespace="ml", name="m",
                      containers=(ContainerRequest("w", 2, 0, 0),
                                  ContainerRequest("s", 0, 100, 10)),
                      whole_gpus=2, share_milli=100, share_mem_mib=10,
                      share_containers=(ContainerRequest("s", 0, 100, 10),))
    assert not fit(state, mixed, ["a"]).fits[0]
    assert assign(state, mixed, "a", make_policy("sparse")) is None
    state3 = ClusterState.build(inventory(gpu_node("a", 3)), default_matrix())
    choice = assign(state3, mixed, "a", make_policy("sparse"))
    assert choice is not None and choice.share not in choice.whole and len(set(choice.whole)) == 2


def test_sparse_avoids_bad_co_runner():
    inv = inventory(gpu_node("bad", 1), gpu_node("good", 1))
    state = ClusterState.build(inv, default_matrix(), [
        booked("r50", "GPU-bad-0", 8192, 400, "cnn", node="bad"),
        booked("r18", "GPU-good-0", 8192, 400, "cnn-small", node="good"),
    ])
    rec = share(mem=4096, milli=300, job_class="recommendation")
    result = fit(state, rec, ["bad", "good"])
    costs = node_costs(state, rec, result, make_policy("sparse"))
    assert scores_from_costs(costs) == [0, 10]
    # binpack does not care about classes: both GPUs are equally full
    costs = node_costs(state, rec, result, make_policy("binpack"))
    assert costs[0] == pytest.approx(costs[1])


def test_sparse_prefers_empty_gpu_over_harmful_pairing_but_packs_good_pairs():
    # Compute unstated (milli 0): each job may use the whole GPU, as in the measurements.
    inv = inventory(gpu_node("n", 2))
    state = ClusterState.build(inv, default_matrix(),
                               [booked("r50", "GPU-n-0", 8192, 0, "cnn", node="n")])
    policy = make_policy("sparse")
    rec = share(job_class="recommendation", milli=0)
    assert assign(state, rec, "n", policy).share == "GPU-n-1"  # loss 1.34 > 1
    small = share(job_class="cnn-small", milli=0)
    assert assign(state, small, "n", policy).share == "GPU-n-0"  # loss 0.63 < 1


def test_sparse_packs_a_share_of_unknown_class_and_steers_a_known_one():
    """Without a class the interference model cannot tell co-runners apart, so the share
    packs next to the resident (keeping a GPU whole); a recommendation job of the same shape
    is steered to the empty GPU because its measured loss next to a ResNet-50 is high.
    Compute unstated (milli 0): each job may use the whole GPU, as in the measurements."""
    inv = inventory(gpu_node("n", 2))
    state = ClusterState.build(inv, default_matrix(),
                               [booked("r50", "GPU-n-0", 8192, 0, "cnn", node="n")])
    policy = make_policy("sparse")
    assert assign(state, share(milli=0), "n", policy).share == "GPU-n-0"
    rec = share(milli=0, job_class="recommendation")
    assert assign(state, rec, "n", policy).share == "GPU-n-1"  # loss 1.34 > 1


def test_interference_scales_with_compute_shares():
    m = default_matrix()
    r50 = np.zeros((1, len(m.classes)))
    r50[0, m.index("cnn")] = 1.0
    whole = m.placement_loss("recommendation", 1.0, r50)[0]
    assert whole == pytest.approx((1 - 0.182) + (1 - 0.477))
    r50_small = r50 * 0.2
    small = m.placement_loss("recommendation", 0.2, r50_small)[0]
    assert 0 < small < 0.2 * whole  # two fifth-GPU jobs barely interfere
    assert m.placement_loss("recommendation", 1.0, np.zeros((1, len(m.classes))))[0] == 0


def test_binpack_and_spread(state):
    state.apply(booked("x", "GPU-b-2", 16384, 500, node="b"))
    d = share(mem=4096)
    assert assign(state, d, "b", make_policy("binpack")).share == "GPU-b-2"
    assert assign(state, d, "b", make_policy("spread")).share != "GPU-b-2"


def test_scores():
    assert scores_from_costs(np.array([1.0, 2.0, np.inf, 1.5])) == [10, 0, 0, 5]
    assert scores_from_costs(np.array([3.0, 3.0])) == [10, 10]
    assert scores_from_costs(np.array([np.inf])) == [0]
    assert all(isinstance(s, int) for s in scores_from_costs(np.array([0.1, 0.7])))


def _scores_as_written_before(costs: np.ndarray) -> list[int]:
    """The scaler as it was written before its in-place form (the reference)."""
    lo, hi = (costs.min(), costs.max()) if len(costs) else (np.inf, np.inf)
    if np.isfinite(lo) and np.isfinite(hi):
        if hi - lo <= 1e-12:
            return [10] * len(costs)
        return np.rint(10 * (hi - costs) / (hi - lo)).astype(np.int64).tolist()
    out = np.zeros(len(costs), dtype=np.int64)
    finite = np.isfinite(costs)
    if not finite.any():
        return out.tolist()
    lo, hi = costs[finite].min(), costs[finite].max()
    if hi - lo <= 1e-12:
        out[finite] = 10
    else:
        out[finite] = np.rint(10 * (hi - costs[finite]) / (hi - lo)).astype(np.int64)
    return out.tolist()


def test_scores_equal_the_reference_scaler_on_random_costs():
    rng = np.random.default_rng(3)
    for _ in range(400):
        n = int(rng.integers(0, 40))
        costs = [rng.random(n) * 10.0 ** rng.integers(-6, 6),
                 rng.integers(0, 4, n).astype(float),  # ties, and halves to round
                 np.round(rng.random(n), 1) + 1e-13][int(rng.integers(3))]
        costs[rng.random(n) < 0.2] = np.inf
        if rng.random() < 0.1 and n:
            costs[rng.integers(n)] = np.nan
        assert scores_from_costs(costs) == _scores_as_written_before(costs)


def test_reservation_for_whole_gpus_takes_full_capacity(state):
    choice = assign(state, whole(n=2), "b", make_policy("sparse"))
    r = reservation_for(whole(n=2), choice, state, now=10.0, ttl_s=5.0)
    assert r.expires_at == 15.0
    assert [(a.mem_mib, a.milli) for a in r.allocations] == [(32768, 1000)] * 2
    state.apply(r)
    assert fit(state, whole(n=3), ["b"]).failed == {
        "b": "free GPUs: needs 3 free whole GPU(s), at most 2 free on a node (1 node; closest: b)"}


def test_mixed_sizes_on_one_node():
    node = gpu_node("m", gpus=[Gpu("big", 0, "A100", 81920), Gpu("small", 1, "T4", 16384)])
    state = ClusterState.build(inventory(node), default_matrix())
    choice = assign(state, share(mem=30000), "m", make_policy("binpack"))
    assert choice.share == "big"
    choice = assign(state, share(mem=8000), "m", make_policy("binpack"))
    assert choice.share == "small"  # tighter fit


def test_state_copy_is_independent(state):
    other = state.copy()
    other.apply(booked("x", "GPU-a-0", 100, 10))
    assert state.mem_used.sum() == 0 and other.mem_used.sum() == 100
    assert "x" not in state.reservations


def test_orphaned_reservation_survives_inventory_change(state):
    state.apply(booked("x", "GPU-gone-0", 100, 10, node="gone"))
    assert "x" in state.orphans
    grown = state.with_inventory(state.inventory.with_node(gpu_node("gone", 1)))
    assert "x" in grown.reservations and grown.mem_used[grown.gpu_index["GPU-gone-0"]] == 100


@pytest.mark.parametrize("alike", [True, False])
def test_masks_over_every_node_in_order_match_any_other_order(alike):
    """All nodes in order take the path without gathers; the masks must be the ones the
    general path gives (checked through a permutation and back), on alike and mixed nodes."""
    from extender.placement.fit import gpu_masks

    counts = (4, 4, 4) if alike else (2, 4, 1)
    inv = inventory(*(gpu_node(n, k, "V100M32", 32768) for n, k in zip("abc", counts, strict=True)))
    state = ClusterState.build(inv, default_matrix())
    state.apply(booked("x", "GPU-a-0", 30000, 900))
    state.apply(booked("y", "GPU-b-1", 4000, 100, node="b"))
    for demand in (share(mem=8192), share(mem=31000), whole(n=1), whole(n=2)):
        everything = gpu_masks(state, demand, np.arange(3))
        reordered = gpu_masks(state, demand, np.array([2, 0, 1]))
        back = np.argsort(state.gpu_node[reordered.gpus], kind="stable")
        assert everything.gpus.tolist() == reordered.gpus[back].tolist()
        assert everything.owner.tolist() == state.gpu_node.tolist()
        assert everything.alike == (4 if alike else 0) == reordered.alike
        for name in ("model_ok", "free", "share"):
            assert getattr(everything, name).tolist() == getattr(reordered, name)[back].tolist()
        assert fit(state, demand, ["a", "b", "c"]).fits.tolist() == \
            fit(state, demand, ["c", "a", "b"]).fits[[1, 2, 0]].tolist()


def test_nodes_are_found_by_name_at_their_sorted_position_under_names_held_elsewhere():
    names = ["node-c", "node-a", "nöde-ü", "node-b"]
    state = ClusterState(inventory(*(gpu_node(n, 1) for n in names)), default_matrix())
    assert state.node_names == sorted(names)
    # the lookup keys are the state's own copies; requests bring other string objects
    asked = ["".join(list(n)) for n in reversed(sorted(names))]
    assert [state.node_index[n] for n in asked] == [3, 2, 1, 0]
    assert fit(state, share(), asked).nodes.tolist() == [3, 2, 1, 0]
