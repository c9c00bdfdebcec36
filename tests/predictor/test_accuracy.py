"""Accuracy of the shipped models on the held-out slice (row_id % 10 == 0) of the dataset.

Thresholds sit a little above what the shipped models reach (docs/predictor.md §4), so a
regression fails.
"""

from __future__ import annotations

import numpy as np
import pytest

from predictor import dataset, estimate, training
from predictor.compute_model import labels


@pytest.fixture(scope="module")
def holdout():  # noqa: ANN201
    df = dataset.load()
    return df[training.holdout_mask(df)]


def test_memory_on_holdout(holdout) -> None:  # noqa: ANN001
    est = estimate.Estimator.load()
    specs = dataset.specs(holdout)
    y = training.memory_target_mib(holdout)
    parts = est.memory.predict_parts(specs)
    raw = parts.sum(axis=1)
    rel = (y - raw) / y
    mape = float(np.mean(np.abs(rel)))
    under_with_margin = float(np.max((y - parts @ est.memory.reserve["described"]) / y))
    r2 = 1 - float(((y - raw) ** 2).sum() / ((y - y.mean()) ** 2).sum())
    assert len(y) >= 20
    assert r2 >= MEM_R2_MIN, r2
    assert mape <= MEM_MAPE_MAX, mape
    assert under_with_margin <= MEM_UNDER_MAX, under_with_margin


@pytest.fixture(scope="module")
def gpu_holdout():  # noqa: ANN201
    df = dataset.load(dataset.DEFAULT_GPU_CSV)
    return df[training.holdout_mask(df)]


def test_compute_on_gpu_holdout(gpu_holdout) -> None:  # noqa: ANN001
    """The shipped compute model was trained on GPU-measured SM activity."""
    est = estimate.Estimator.load()
    specs, y, _ = labels(gpu_holdout)
    assert len(y) >= 15 and set(gpu_holdout["label_source"]) == {"gpu"}
    p = est.compute.predict_many(specs)
    mae = float(np.mean(np.abs(p - y)))
    assert mae <= COMPUTE_MAE_MAX, mae


def test_reservation_covers_measured_gpu_memory(gpu_holdout) -> None:  # noqa: ANN001
    """gpu_mem_mib as the worker would write it, against the process memory NVML measured
    on the GPU (CUDA context, workspaces and allocator slack included)."""
    est = estimate.Estimator.load()
    rows = training.used_rows(gpu_holdout)
    reserved = np.array([est.predict(s).gpu_mem_mib for s in dataset.specs(rows)])
    used = rows["gpu_nvml_used_bytes"].to_numpy(dtype=float) / 2**20
    assert len(used) >= 15
    assert float(np.max((used - reserved) / used)) <= DEVICE_UNDER_MAX
    assert float(np.mean((reserved - used) / used)) <= DEVICE_OVER_MAX


def test_replayed_reservation_on_gpu_holdout() -> None:
    """The same rows with the annotation ``describe`` writes (the CPU row's, carrying the
    allocator replay): the H200 allowance books the replayed peak plus what the trace
    cannot see, with the family-conformal margin, tighter than the fallback above."""
    _, gdf = dataset.load_datasets(dataset.DEFAULT_CSV, dataset.DEFAULT_GPU_CSV)
    rows = training.used_rows(gdf[training.holdout_mask(gdf)])
    specs = dataset.specs(rows)
    assert all(s.slack_bytes is not None for s in specs)
    est = estimate.Estimator.load()
    reserved = np.array([est.predict(s).gpu_mem_mib for s in specs])
    used = training.used_mib(rows)
    assert len(used) >= 15
    assert float(np.max((used - reserved) / used)) <= DEVICE_UNDER_MAX
    assert float(np.mean((reserved - used) / used)) <= REPLAYED_OVER_MAX


MEM_R2_MIN = 0.999  # v5: 1.0000 (described level)
MEM_MAPE_MAX = 0.01  # v5: 0.0 %
MEM_UNDER_MAX = 0.02  # v5: 0.0 % (with the reservation's state/activation scales)
COMPUTE_MAE_MAX = 55.0  # v4: 47.6 milli-GPU (GPU-measured labels)
DEVICE_UNDER_MAX = 0.02  # v4: none (closest -5.3 %)
DEVICE_OVER_MAX = 0.35  # v7: 34.8 % mean (v6 34.6 %; annotations without the replay)
REPLAYED_OVER_MAX = 0.22  # v9: 20.7 % mean, none under (closest +3.4 %); v8 18.4 % (its
# replay kept CPU dropout noise, 2-4x the CUDA mask, which hid small BERT rows' buffers)


@pytest.mark.slow
def test_leave_one_family_out_goals() -> None:
    """Held-out-family figures of the committed datasets (docs/predictor.md §4), a little
    below what they are, so that a regression fails."""
    from predictor import evaluation

    ev = evaluation.evaluate()
    described = {r.family: r for r in ev.memory["described"] if r.family != "overall"}
    assert len(described) >= 13  # the six first families and seven more
    for r in described.values():
        assert r.mem_r2 >= 0.98 and r.mem_mape <= 0.05, r
        assert r.mem_under_raw <= 0.05, r  # v5: 0.0 % every family
    job = ev.memory["job"][-1]
    assert job.family == "overall" and job.mem_r2 >= 0.95, job
    assert ev.compute_label == "gpu-measured-sm-activity"
    assert ev.compute[-1].r2 >= 0.90, ev.compute[-1]  # v4: 0.922
    device = ev.device["described"]["H200"][-1]
    # v9 (dropout replayed as CUDA runs it; the margin two factors and a constant on the
    # held-out allowance): none under in any family, median over 17.4 %, mean 17.0 %;
    # v8 (pinned context + BLAS workspaces, replayed peak + kernel-buffer allowance x the
    # family-conformal margin): none under in any family, median over 16.6 %, mean 16.6 %;
    # v7 (fitted offset inside the margin): none under, median 22.4 %, BERT 26.2 %; v6
    # (scaled parts): 1.6 % under, 7.9 % at most, median 14.1 %, mean 23.4 %, BERT 44.5 %
    per_family = {r.family: r for r in ev.device["described"]["H200"]}
    assert device.under_share <= 0.02 and device.under_max <= 0.05, device
    assert all(r.under_share <= 0.02 for r in per_family.values()), per_family
    assert device.over_median <= 0.19 and device.over_mean <= 0.19, device
    assert per_family["bert"].over_median <= 0.12, per_family["bert"]  # v9 9.2 %, v8 12.8 %
    assert max(r.over_median for r in per_family.values()) <= 0.25  # v9 22.2 % (YOLO)
    replay = ev.allocator["H200"][-1]  # v9: MAPE 5.1 % against max_memory_reserved (v8 5.6)
    assert replay.family == "overall" and replay.mape <= 0.055, replay
    bert_replay = next(r for r in ev.allocator["H200"] if r.family == "bert")
    assert bert_replay.mape_alloc <= 0.01, bert_replay  # v9 0.3 % (dropout masks), v8 3.8 %
    tradeoff = ev.margin_tradeoff["H200"]
    shipped = next(r for r in tradeoff if r.setting.endswith("(shipped)"))
    assert shipped.under_worst <= 0.02 and shipped.over_median <= 0.19, shipped
    job_res = ev.memory["job"][-1]  # v7: 1.0 % under, median over 61.3 % (v6 0.5 / 61.8)
    assert job_res.res_under_share <= 0.02 and job_res.res_over_median <= 0.70, job_res
    assert job_res.mem_mape <= 0.26, job_res  # v7 24.6 %, v6 29.8 %
    optional = ev.memory["job+optional"][-1]  # v8 16.8 % (with optimizerImpl), v7 17.6 %
    assert optional.mem_mape <= 0.18, optional
    leaf = ev.memory["job+optional+leaf"][-1]  # v8 15.9 %, v7 16.9 %
    assert leaf.mem_mape <= 0.17, leaf
