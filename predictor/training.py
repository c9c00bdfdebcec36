"""Fit both models on the dataset and write versioned artefacts (needs pandas, statsmodels,
lightgbm; not torch)."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np

from predictor import MODEL_VERSION, dataset, gpus
from predictor.compute_model import ComputeModel, labels
from predictor.estimate import MANIFEST
from predictor.memory_model import MemoryModel

HOLDOUT_MOD = 10  # rows with row_id % 10 == 0 are never trained on (tests/predictor accuracy)


def holdout_mask(df) -> np.ndarray:  # noqa: ANN001
    return (df["row_id"].to_numpy() % HOLDOUT_MOD) == 0


def memory_target_mib(df) -> np.ndarray:  # noqa: ANN001
    return df["peak_bytes"].to_numpy(dtype=float) / 2**20


def calibrated_ctx(df) -> dict[str, int]:  # noqa: ANN001
    """Catalogue defaults, replaced by the per-GPU median of measured context where GPU rows
    carry ``gpu_ctx_bytes``."""
    ctx = {k: g.ctx_mib for k, g in gpus.CATALOGUE.items()}
    if "gpu_ctx_bytes" in df:
        gpu = df[(df["label_source"] == "gpu") & df["gpu_ctx_bytes"].notna()]
        for name, grp in gpu.groupby("gpu_model"):
            ctx[str(name)] = int(np.ceil(grp["gpu_ctx_bytes"].median() / 2**20))
    return ctx


def train(csv_path: Path, out_dir: Path, version: str = MODEL_VERSION,
          use_holdout: bool = True) -> dict:
    df = dataset.load(csv_path)
    train_df = df[~holdout_mask(df)] if use_holdout else df
    specs = dataset.specs(train_df)
    mem = MemoryModel.fit(specs, memory_target_mib(train_df), list(train_df["family"]),
                          version=version)
    mem.ctx_mib = calibrated_ctx(df)
    c_specs, c_y, _ = labels(train_df)
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
        "dataset_sha256": hashlib.sha256(csv_path.read_bytes()).hexdigest(),
        "rows_trained": int(len(train_df)),
        "holdout": f"row_id % {HOLDOUT_MOD} == 0" if use_holdout else "none",
        "compute_label": "gpu-measured" if (df["label_source"] == "gpu").any()
        else "cpu-flop-roofline-proxy",
        "memory_margin": mem.margin,
        "trained_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest
