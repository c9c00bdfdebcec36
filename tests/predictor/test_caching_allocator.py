"""The CUDA caching-allocator model: PyTorch's segment and block rules, and the replay of a
traced training step that the described-level reservation books."""

from __future__ import annotations

import pytest

from predictor import caching_allocator as ca

MIB = 2**20


def test_requests_are_rounded_to_512_bytes() -> None:
    assert ca.round_size(1) == 512
    assert ca.round_size(512) == 512
    assert ca.round_size(513) == 1024
    alloc = ca.CachingAllocator()
    alloc.malloc(1, 1000)
    assert alloc.allocated == 1024


def test_small_requests_share_2_mib_segments() -> None:
    alloc = ca.CachingAllocator()
    for k in range(4):  # 4 x 0.5 MiB fill one 2 MiB segment exactly
        alloc.malloc(k, 512 * 1024)
    assert alloc.reserved == 2 * MIB
    assert alloc.segments == 1
    alloc.malloc(9, 1)  # the segment is full: a second 2 MiB segment
    assert (alloc.segments, alloc.reserved) == (2, 4 * MIB)


def test_a_1_mib_request_is_still_small_and_one_above_is_large() -> None:
    alloc = ca.CachingAllocator()
    alloc.malloc(1, MIB)
    assert alloc.reserved == 2 * MIB
    alloc.malloc(2, MIB + 1)
    assert alloc.reserved == 2 * MIB + 20 * MIB


def test_mid_size_requests_share_20_mib_segments() -> None:
    alloc = ca.CachingAllocator()
    for k in range(3):
        alloc.malloc(k, 6 * MIB)  # 6 + 6 fit in 20 MiB (8 left, > 1 MiB: split); 6 more
    assert alloc.segments == 1 and alloc.reserved == 20 * MIB
    alloc.malloc(3, 3 * MIB)  # 2 MiB left in the segment: a new 20 MiB one
    assert alloc.segments == 2 and alloc.reserved == 40 * MIB


def test_large_requests_get_their_own_segment_rounded_to_2_mib() -> None:
    alloc = ca.CachingAllocator()
    alloc.malloc(1, 10 * MIB)
    assert alloc.reserved == 10 * MIB
    alloc.malloc(2, 33 * MIB + 1)
    assert alloc.reserved == 10 * MIB + 34 * MIB
    assert alloc.segments == 2


def test_a_freed_block_is_reused_not_returned() -> None:
    alloc = ca.CachingAllocator()
    alloc.malloc(1, 100 * MIB)
    alloc.free(1)
    assert alloc.allocated == 0 and alloc.reserved == 100 * MIB  # cached, not released
    alloc.malloc(2, 60 * MIB)  # fits the cached block: split (40 MiB left > 1 MiB)
    alloc.malloc(3, 30 * MIB)  # and the remainder
    assert alloc.reserved == 100 * MIB and alloc.segments == 1
    alloc.malloc(4, 20 * MIB)  # 10 MiB left: not enough, a new segment
    assert alloc.reserved == 120 * MIB


def test_large_block_remainder_of_1_mib_or_less_is_not_split() -> None:
    alloc = ca.CachingAllocator()
    alloc.malloc(1, 12 * MIB)
    alloc.free(1)
    alloc.malloc(2, 11 * MIB + 512)  # 1 MiB - 512 B left over: the whole block is handed out
    assert alloc.allocated == 12 * MIB


def test_freed_neighbours_merge_into_one_block() -> None:
    alloc = ca.CachingAllocator()
    alloc.malloc(1, 40 * MIB)
    alloc.free(1)
    alloc.malloc(2, 20 * MIB)
    alloc.malloc(3, 20 * MIB)
    alloc.free(2)
    alloc.free(3)
    alloc.malloc(4, 40 * MIB)  # the two halves merged back: no new segment
    assert alloc.segments == 1 and alloc.reserved == 40 * MIB


def test_best_fit_takes_the_smallest_cached_block() -> None:
    alloc = ca.CachingAllocator()
    alloc.malloc(1, 50 * MIB)
    alloc.malloc(2, 12 * MIB)
    alloc.free(1)
    alloc.free(2)
    alloc.malloc(3, 12 * MIB)  # the 12 MiB block, leaving the 50 MiB one whole
    alloc.malloc(4, 50 * MIB)
    assert alloc.reserved == 62 * MIB


def test_replay_repeats_the_steady_step_until_the_cache_is_stable() -> None:
    # step: a 30 MiB activation, then a 40 MiB temporary while it lives, both freed
    base = [(0, 100 * MIB)]
    step = [(1, 30 * MIB), (2, 40 * MIB), (1, ca.FREE), (2, ca.FREE)]
    out = ca.replay(base + step, step)
    assert out.peak_allocated == 170 * MIB
    assert out.peak_reserved == 170 * MIB  # the cached blocks serve every later step
    assert out.steps >= 1


def test_model_files_of_the_previous_format_still_load() -> None:
    """A format-7 memory model (v5) has no replayed calibration: a spec with the replay
    falls back to that GPU's device calibration with the slack on top."""
    from predictor import features
    from predictor.estimate import Estimator
    from predictor.memory_model import MemoryModel

    d = Estimator.load().memory.to_json()
    d["format"] = "sparse-predictor/memory-phases/7"
    del d["replayed"]
    old = MemoryModel.from_json(d)
    assert old.replayed == {}
    spec = features.ModelSpec(family="recommendation", batch_size=64, activations=10.0,
                              gpu_model="H200", saved_bytes=100.0, slack_bytes=50 * MIB)
    parts = old.predict_parts([spec])[0]
    s_state, s_act, offset = old.reservation("H200", "described")
    assert old.reserve_parts_mib(spec, parts) >= parts[0] * s_state + parts[1] * s_act + 50


torch = pytest.importorskip("torch")


def _tiny_step():  # noqa: ANN202
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.EmbeddingBag(50_000, 32, mode="sum"), nn.Linear(32, 256),
                          nn.ReLU(), nn.Linear(256, 1))
    ids = torch.randint(0, 50_000, (512, 8))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    return model, (ids,), opt


def test_traced_step_replay_agrees_with_the_tracer_and_the_reservation_covers_it() -> None:
    """The replay's allocated peak is the tracer's label up to rounding; the annotation
    carries the allocator's slack, and the shipped reservation books at least the replayed
    reserved peak plus the GPU's context."""
    from predictor import features
    from predictor.describe import _trace, describe
    from predictor.estimate import Estimator

    model, inputs, opt = _tiny_step()
    m = _trace(model, inputs, [opt], None, fake=True)
    assert m["cuda_allocated_bytes"] >= m["peak_bytes"]
    assert m["cuda_allocated_bytes"] - m["peak_bytes"] < 0.02 * m["peak_bytes"] + MIB
    assert m["cuda_reserved_bytes"] >= m["cuda_allocated_bytes"]
    ann = describe(model, inputs, opt, gpu_model="H200")
    assert ann["slack_bytes"] == pytest.approx(m["cuda_reserved_bytes"] - m["peak_bytes"])
    est = Estimator.load()
    spec = features.parse_model(__import__("json").dumps(ann))
    pred = est.predict(spec)
    reserved_mib = m["cuda_reserved_bytes"] / MIB
    assert pred.gpu_mem_mib >= reserved_mib + est.memory.ctx_mib["H200"]
    # on a GPU without measured rows: the slack is booked on top of the context too
    other = est.predict(features.parse_model(__import__("json").dumps({**ann, "gpu_model": "T4"})))
    assert other.gpu_mem_mib >= reserved_mib + est.memory.ctx_mib["T4"]


def test_replay_frees_what_the_previous_step_left_in_each_repeat() -> None:
    """A tensor one step keeps until the next (last step's output, say) is freed in every
    repeated step, so the repeats do not leak."""
    base = [(0, 50 * MIB)]
    warm = [(1, 12 * MIB)]  # kept past the warm-up step
    steady = [(1, ca.FREE), (2, 12 * MIB)]  # frees it, keeps its own for the next
    out = ca.replay(base + warm + steady, steady, max_repeats=4)
    assert out.peak_reserved == 50 * MIB + 12 * MIB
    assert out.peak_allocated == 62 * MIB


def test_allowance_prices_kernel_buffers_by_kind() -> None:
    """The H200 allowance: the replayed peak scaled >= 1, the convolution layer size only
    for convolutional models, the embedding backward only for tables with dense gradients,
    above a base the measured rows pin; the calibration covers every row it is fitted on."""
    import numpy as np

    from predictor import memory_model as mm

    rows = [{"slack_mib": 10.0, "conv_layer_mib": 30.0, "gathered_mib": 0.0, "sparse": 0.0},
            {"slack_mib": 5.0, "conv_layer_mib": 0.0, "gathered_mib": 40.0, "sparse": 0.0},
            {"slack_mib": 5.0, "conv_layer_mib": 0.0, "gathered_mib": 40.0, "sparse": 1.0}]
    parts = np.array([[100.0, 300.0], [500.0, 20.0], [500.0, 20.0]])
    cols = mm.allowance_columns(parts, rows)
    assert cols.tolist() == [[410.0, 30.0, 0.0, 1.0], [525.0, 0.0, 40.0, 1.0],
                             [525.0, 0.0, 0.0, 1.0]]
    rng = np.random.default_rng(0)
    n = 60
    x = np.column_stack([rng.uniform(100, 5000, n), rng.uniform(0, 100, n) * (
        rng.random(n) < 0.5), rng.uniform(0, 300, n), np.ones(n)])
    base = 858.0
    used = x @ np.array([1.05, 4.0, 0.5, 0.0]) + base + rng.uniform(0, 50, n)
    groups = np.repeat(["a", "b", "c"], 20)
    coef = np.array(mm.fit_allowance(x, used, groups, base))
    assert coef[0] >= 1.0 and np.all(coef[1:] >= 0)
    booked = x @ coef + base
    assert np.all(booked >= used - 1e-6)
    assert np.median((booked - used) / used) < 0.05


def test_device_base_is_the_largest_context_and_the_blas_workspaces() -> None:
    """The pinned part of an H200 reservation: the largest measured context (a process's
    context varies; the largest is safe) and the median allocated-peak gap to the replay
    (cuBLAS + cuBLASLt workspaces, 2 x 32 MiB on Hopper)."""
    import numpy as np

    from predictor import memory_model as mm

    ctx = np.array([742.0, 784.0, 794.0, np.nan])
    blas = np.array([65.0, 64.9, 650.0, -800.0, 65.0])
    assert mm.device_base_mib(ctx, blas) == 794.0 + 65.0


def test_allowance_margin_covers_a_family_the_fit_has_not_seen() -> None:
    """The margin is each calibration family's need against the allowance fitted without
    it: 1 when every family follows the same law, above 1 when one family's kernels buffer
    more per convolution MiB than the others', and then enough to cover that family; the
    pinned base is not scaled."""
    import numpy as np

    from predictor import memory_model as mm

    rng = np.random.default_rng(1)
    n = 20
    peak = rng.uniform(100, 4000, 4 * n)
    conv = np.concatenate([rng.uniform(0, 200, 2 * n), np.zeros(2 * n)])
    x = np.column_stack([peak, conv, np.zeros(4 * n), np.ones(4 * n)])
    groups = np.repeat(["conv_a", "conv_b", "mlp_c", "mlp_d"], n)
    base = 800.0
    same = peak + 2.0 * conv + base
    assert mm.allowance_margin(x, same, groups, base) == pytest.approx(1.0, abs=1e-6)
    heavier = same + np.where(groups == "conv_b", 3.0 * conv, 0.0)
    margin = mm.allowance_margin(x, heavier, groups, base)
    assert margin > 1.05
    held = groups == "conv_b"
    coef = np.array(mm.fit_allowance(x[~held], heavier[~held], groups[~held], base))
    allowance = x[held] @ coef
    assert np.any(allowance + base < heavier[held])
    assert np.all(margin * allowance + base >= heavier[held] - 1e-6)


def test_dropout_is_replayed_with_the_cuda_kernels_bool_mask() -> None:
    """CPU dropout keeps a noise tensor of the input's dtype for backward, CUDA's fused
    ``native_dropout`` a bool mask: the label keeps the CPU bytes, the replay the CUDA
    ones, so the replayed peak is below the label by 3 bytes per masked fp32 element."""
    from torch import nn

    from predictor.describe import _trace

    torch.manual_seed(0)
    width, batch = 1024, 256
    model = nn.Sequential(nn.Linear(64, width), nn.Dropout(0.1), nn.ReLU(),
                          nn.Linear(width, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    m = _trace(model, (torch.randn(batch, 64),), [opt], None, fake=True)
    mask_saving = batch * width * 3  # fp32 noise (4 B) -> bool mask (1 B), kept for backward
    assert m["peak_bytes"] - m["cuda_allocated_bytes"] == pytest.approx(mask_saving, rel=0.05)
    model.eval()  # no dropout: nothing to swap
    m = _trace(model, (torch.randn(batch, 64),), [opt], None, fake=True)
    assert m["cuda_allocated_bytes"] >= m["peak_bytes"]


def test_margin_is_the_family_conformal_quantile_of_held_out_needs() -> None:
    """Each calibration family's rows are scored against an allowance fitted without it
    (the only family with a term is scored by a fit that cannot price it: pessimistic,
    kept); below 49 families the margin is the largest score."""
    import numpy as np

    from predictor import memory_model as mm

    rng = np.random.default_rng(0)
    peak = rng.uniform(100, 1000, 40)
    conv = np.where(np.arange(40) < 10, rng.uniform(10, 50, 40), 0.0)
    cols = np.column_stack([peak, conv, np.zeros(40), np.ones(40)])
    groups = ["cnn"] * 10 + ["a"] * 10 + ["b"] * 10 + ["c"] * 10
    scale = np.array([1.0] * 10 + [1.0] * 10 + [1.05] * 10 + [1.0] * 10)
    used = (peak + 4 * conv + 50) * scale
    needs = mm.allowance_needs(cols, used, groups)
    assert np.isfinite(needs).all()
    scores = mm.family_scores(needs, groups)
    assert set(scores) == {"cnn", "a", "b", "c"}
    assert scores["b"] > 1.0  # fitted on the others, b needs its extra 5 %
    assert scores["cnn"] > scores["a"]  # its convolutions unpriced without it
    assert mm.allowance_margin(cols, used, groups) == pytest.approx(max(scores.values()))
    assert mm.conformal_margin([1.2, 1.1]) == pytest.approx(1.2)
    assert mm.conformal_margin([0.9]) == 1.0
    assert mm.conformal_margin(list(np.linspace(1.0, 2.0, 200))) < 2.0  # 200 families: q < 1


def test_shipped_margin_covers_every_held_out_row() -> None:
    """Two factors and a constant on the held-out allowance: every scored calibration row
    covered (below 49 families), a fixed-size buffer on a small job met by the constant
    rather than by a factor on every large job's peak."""
    import numpy as np

    from predictor import memory_model as mm

    peak = np.array([100.0, 200.0, 10_000.0, 20_000.0, 150.0, 30_000.0])
    held = np.column_stack([peak, np.full(6, 20.0)])
    target = peak + 20.0 + np.array([0.0, 0.0, 100.0, 200.0, 150.0, 0.0])
    groups = ["a", "a", "b", "b", "c", "c"]
    m_peak, m_rest, c = mm.fit_margin(held, target, groups)
    booked = m_peak * held[:, 0] + m_rest * held[:, 1] + c
    assert (booked >= target - 1e-6).all()
    # 1 % on the large jobs; the 150 MiB as a fixed amount (the rest column is fixed here)
    assert m_peak <= 1.011 and m_rest * 20.0 + c >= 149.0
