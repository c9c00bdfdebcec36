"""How far the step-time estimate under-estimates, per model family and job class, measured.

The step time the predictor gives (``features.step_seconds``: structure only, no fitted
weights) is compared with the measured step time on every GPU-measured row of its dataset
that has one; the bound of a family (or job class, or all rows pooled) is an upper quantile
of ``measured / predicted`` over its rows. The job controller's queue promotes a job whose
predicted duration x its family's bound reaches the drain time
(``extender.queueorder.StepErrorBounds``). ``sparse-predictor step-bounds`` writes
``predictor/models/step-error-bounds.json`` from the rows; nothing here is typed in.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from extender.queueorder import StepErrorBounds
from predictor import dataset, features
from predictor.estimate import MODELS_DIR

BOUNDS_FILE = "step-error-bounds.json"
BOUNDS_DIR_ENV = "SPARSE_STEP_BOUNDS_DIR"  # another quantile's bounds, e.g. for a replay
DEFAULT_QUANTILE = 0.9  # a job under-estimated beyond its family's bound: 1 in 10


def step_ratios(gpu_csv: Path = dataset.DEFAULT_GPU_CSV) -> tuple[np.ndarray, np.ndarray,
                                                                  np.ndarray]:
    """(family, job class, measured / predicted step time) of every GPU-measured row with a
    measured step rate."""
    gdf = dataset.load_datasets(dataset.DEFAULT_CSV, gpu_csv)[1]
    if gdf is None:
        raise RuntimeError("the predictor has no GPU-measured dataset: no step-time errors")
    df = gdf[(gdf["label_source"] == "gpu") & (gdf["gpu_steps_per_s"] > 0)]
    pred = np.array([features.step_seconds(features.parse_model(s)) for s in df["spec_json"]])
    measured = 1.0 / df["gpu_steps_per_s"].to_numpy(float)
    return df["family"].to_numpy(str), df["job_class"].to_numpy(str), measured / pred


def compute(quantile: float = DEFAULT_QUANTILE,
            gpu_csv: Path = dataset.DEFAULT_GPU_CSV) -> dict:
    """The bounds' JSON form (``StepErrorBounds.from_dict``), with the row count per key."""
    if not 0 < quantile < 1:
        raise ValueError(f"quantile must be in (0, 1), got {quantile!r}")
    family, job_class, ratio = step_ratios(gpu_csv)
    if not len(ratio):
        raise RuntimeError("no GPU-measured row has a step rate")

    def per(keys: np.ndarray) -> dict[str, float]:
        return {str(k): round(float(np.quantile(ratio[keys == k], quantile)), 4)
                for k in np.unique(keys)}

    return {
        "quantile": quantile,
        "measure": "measured / predicted step time, GPU-measured rows",
        "rows": int(len(ratio)),
        "pooled": round(float(np.quantile(ratio, quantile)), 4),
        "families": per(family),
        "classes": per(job_class),
        "rows_per_family": {str(k): int((family == k).sum()) for k in np.unique(family)},
        "rows_per_class": {str(k): int((job_class == k).sum()) for k in np.unique(job_class)},
    }


def write(out_dir: Path = MODELS_DIR, quantile: float = DEFAULT_QUANTILE,
          gpu_csv: Path = dataset.DEFAULT_GPU_CSV) -> Path:
    path = Path(out_dir) / BOUNDS_FILE
    path.write_text(json.dumps(compute(quantile, gpu_csv), indent=1) + "\n")
    return path


MEDIAN_DIR = MODELS_DIR / "median"  # the same rows and rule at q0.5: each family's median


def load_median() -> StepErrorBounds:
    """Each family's median measured / predicted step time (shipped in ``MEDIAN_DIR``): what
    a job's predicted run time is multiplied by in the expected drain of the queue."""
    return load(MEDIAN_DIR)


def load(models_dir: Path | None = None) -> StepErrorBounds:
    """The bounds in ``models_dir`` (default: ``$SPARSE_STEP_BOUNDS_DIR``, else the shipped
    ones); a clear error when the file is missing or malformed."""
    models_dir = models_dir or Path(os.environ.get(BOUNDS_DIR_ENV) or MODELS_DIR)
    path = Path(models_dir) / BOUNDS_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise RuntimeError(f"{path} is missing: run `sparse-predictor step-bounds`") from None
    return StepErrorBounds.from_dict(data)
