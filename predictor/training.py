"""Fit both models on the dataset and write versioned artefacts (needs pandas, statsmodels,
lightgbm; not torch)."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from predictor import (
    MODEL_VERSION,
    allowance,
    dataset,
    gpus,
    memory_model,
    memory_phases,
    reservation,
)
from predictor.compute_model import LABEL_GPU, LABEL_PROXY, ComputeModel, labels
from predictor.estimate import MANIFEST
from predictor.memory_model import MemoryModel

HOLDOUT_MOD = 10  # rows with row_id % 10 == 0 are never trained on (tests/predictor accuracy)


def holdout_mask(df) -> np.ndarray:  # noqa: ANN001
    return (df["row_id"].to_numpy() % HOLDOUT_MOD) == 0


def memory_target_mib(df) -> np.ndarray:  # noqa: ANN001
    return df["peak_bytes"].to_numpy(dtype=float) / 2**20


def used_rows(gdf):  # noqa: ANN001, ANN201
    """GPU rows that carry the process's NVML-measured memory."""
    return gdf[(gdf["label_source"] == "gpu") & gdf["gpu_nvml_used_bytes"].notna()]


def used_mib(rows) -> np.ndarray:  # noqa: ANN001
    return rows["gpu_nvml_used_bytes"].to_numpy(dtype=float) / 2**20


def calibrated_ctx(gdf) -> dict[str, int]:  # noqa: ANN001
    """Catalogue defaults, replaced by the per-GPU median of measured context where GPU rows
    carry ``gpu_ctx_bytes``."""
    ctx = {k: g.ctx_mib for k, g in gpus.CATALOGUE.items()}
    if gdf is not None and "gpu_ctx_bytes" in gdf:
        gpu = gdf[(gdf["label_source"] == "gpu") & gdf["gpu_ctx_bytes"].notna()]
        for name, grp in gpu.groupby("gpu_model"):
            ctx[str(name)] = int(np.ceil(grp["gpu_ctx_bytes"].median() / 2**20))
    return ctx


def level_rows(specs, level: str, optional: bool | tuple[str, ...] = False,  # noqa: ANN001
               ) -> list[dict[str, float]]:
    """Derived features of ``specs`` as the ``level`` sees them (``job``: the job fields)."""
    return memory_phases.level_rows(specs, level, optional)


def calibrate_devices(df, gdf, level: str = "described") -> dict[str, tuple[float, float, float]]:  # noqa: ANN001, E501
    """``MemoryModel.device[level]`` for every GPU model with enough measured rows: the fit
    on the CPU rows ``df``, held out by family, against the GPU rows' NVML-measured memory."""
    if gdf is None:
        return {}
    rows, idx = memory_phases.fit_rows(dataset.specs(df), level)
    y, fam = memory_target_mib(df)[idx], list(df["family"].to_numpy()[idx])
    out: dict[str, tuple[float, float, float]] = {}
    for name, grp in used_rows(gdf).groupby("gpu_model"):
        if len(grp) < memory_model.DEVICE_MIN_ROWS:
            continue
        out[str(name)] = reservation.calibrate_device(
            rows, y, fam, level_rows(dataset.specs(grp), level),
            list(grp["family"]), used_mib(grp), level)
    return out


def replayed_mask(grp) -> np.ndarray:  # noqa: ANN001
    """GPU rows whose annotation carries the caching-allocator replay (``slack_bytes``)."""
    return np.array([s.slack_bytes is not None for s in dataset.specs(grp)], dtype=bool)


def device_base(df, grp) -> float:  # noqa: ANN001
    """:func:`allowance.device_base_mib` of one GPU model's measured rows ``grp``: the
    largest measured context and the median of ``max_memory_allocated`` less the replayed
    allocated peak of the same config (``df``'s ``cuda_allocated_bytes``)."""
    mib = 2.0**20
    replayed = grp["row_id"].map(df.set_index("row_id")["cuda_allocated_bytes"])
    blas = (grp["gpu_max_allocated_bytes"] - replayed).to_numpy(dtype=float) / mib
    ctx = grp["gpu_ctx_bytes"].to_numpy(dtype=float) / mib
    return allowance.device_base_mib(ctx, blas)


def calibrate_replayed(df, gdf) -> dict[str, tuple[float, ...]]:  # noqa: ANN001
    """``MemoryModel.replayed`` for every GPU model with enough measured rows that carry the
    allocator replay: held-out parts + the replayed slack against NVML-measured memory."""
    if gdf is None:
        return {}
    rows = level_rows(dataset.specs(df), "described")
    y, fam = memory_target_mib(df), list(df["family"])
    out: dict[str, tuple[float, float, float, float]] = {}
    for name, grp in used_rows(gdf).groupby("gpu_model"):
        grp = grp[replayed_mask(grp)]
        if len(grp) < memory_model.DEVICE_MIN_ROWS:
            continue
        out[str(name)] = allowance.calibrate_replayed(
            rows, y, fam, level_rows(dataset.specs(grp), "described"), list(grp["family"]),
            used_mib(grp), device_base(df, grp))
    return out


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def train(csv_path: Path, out_dir: Path, version: str = MODEL_VERSION,
          use_holdout: bool = True, gpu_csv: Path | None = dataset.DEFAULT_GPU_CSV,
          step: Callable[[str], None] = lambda _s: None) -> dict:
    """Memory: OLS on the CPU rows of ``csv_path``, calibrated per GPU model on the GPU rows of
    ``gpu_csv``. Compute: LightGBM on the GPU rows' measured SM activity when there are any,
    else on the CPU FLOP-roofline proxy."""
    df, gdf = dataset.load_datasets(csv_path, gpu_csv)
    train_df = df[~holdout_mask(df)] if use_holdout else df
    train_gdf = gdf[~holdout_mask(gdf)] if gdf is not None and use_holdout else gdf
    specs = dataset.specs(train_df)
    step("memory model (both input levels)")
    mem = MemoryModel.fit(specs, memory_target_mib(train_df), list(train_df["family"]),
                          version=version)
    mem.ctx_mib = calibrated_ctx(gdf)
    step("per-GPU reservation calibration")
    mem.device = {level: calibrate_devices(train_df, train_gdf, level)
                  for level in memory_phases.LEVELS}
    mem.replayed = calibrate_replayed(train_df, train_gdf)
    gpu_labelled = dataset.gpu_labelled(train_gdf)
    step("compute model (LightGBM)")
    c_specs, c_y, _ = labels(train_gdf if gpu_labelled else train_df)
    comp = ComputeModel.fit(c_specs, c_y, version=version)
    out_dir.mkdir(parents=True, exist_ok=True)
    mem_name, comp_name = f"memory-{version}.json", f"compute-{version}.txt"
    mem.save(out_dir / mem_name)
    comp.save(out_dir / comp_name)
    manifest = {
        "version": version,
        "memory": mem_name,
        "compute": comp_name,
        "dataset": csv_path.name,
        "dataset_sha256": _digest(csv_path),
        "gpu_dataset": gpu_csv.name if gdf is not None else None,
        "gpu_dataset_sha256": _digest(gpu_csv) if gdf is not None else None,
        "rows_trained": int(len(train_df)),
        "gpu_rows_trained": int(len(train_gdf)) if train_gdf is not None else 0,
        "holdout": f"row_id % {HOLDOUT_MOD} == 0" if use_holdout else "none",
        "compute_label": LABEL_GPU if gpu_labelled else LABEL_PROXY,
        "memory_reserve": {lv: list(v) for lv, v in mem.reserve.items()},
        "memory_device": {lv: {k: list(v) for k, v in d.items()}
                          for lv, d in mem.device.items()},
        "memory_replayed": {k: list(v) for k, v in mem.replayed.items()},
        "trained_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest
