"""Compute-share model: LightGBM regressor of milli-GPU for a target GPU model.

Labels (see ``labels``):

* rows with ``label_source == "gpu"`` (GPU mode of the generator): measured SM activity
  (``gpu_sm_active_pct``, else NVML ``gpu_util_pct``) x 10, for the GPU they ran on. When any
  such rows exist the model is trained on them only.
* otherwise CPU rows, expanded over every GPU in :data:`predictor.gpus.CATALOGUE`:
  :func:`predictor.gpus.compute_label` — a roofline proxy from the CPU-measured FLOPs, bytes
  moved and op count of one training step and the GPU's datasheet peak. **This is a FLOP
  proxy, not measured GPU utilisation.**

Prediction needs lightgbm and numpy, not torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from predictor import features, gpus, schema

FEATURES = (
    "log_batch", "log_macs", "log_flops_step", "log_params", "log_dense_params",
    "log_emb_params", "log_act", "log_lookups", "n_tables", "mlp_depth", "dtype_bytes",
    "m_dense", "sparse", "log_peak_flops", "log_mem_bw", "log_intensity",
    # roofline times of the step on the target GPU (step_time.roofline_times)
    "log_t_flops", "log_t_opt", "log_t_act", "log_t_lookup", "log_t_gpu", "opt_share",
    "flops_share",
    # kernel launches against GPU time (step_time.dispatch_features)
    "log_kernels", "log_busy_per_launch", "busy_share",
)
PARAMS = {
    "objective": "regression", "learning_rate": 0.05, "num_leaves": 15,
    "min_data_in_leaf": 20, "feature_fraction": 0.9, "bagging_fraction": 0.9,
    "bagging_freq": 1, "lambda_l2": 1.0, "verbose": -1, "seed": 0, "num_threads": 2,
    "deterministic": True, "force_row_wise": True,
    # piecewise-linear leaves extrapolate along the roofline features to unseen families
    "linear_tree": True, "linear_lambda": 1.0,
}
NUM_ROUNDS = 400
LABEL_GPU = "gpu-measured-sm-activity"
LABEL_PROXY = "cpu-flop-roofline-proxy"


def matrix(specs: Sequence[schema.ModelSpec]) -> np.ndarray:
    return np.array([[features.derive(s)[k] for k in FEATURES] for s in specs], dtype=float)


def labels(df) -> tuple[list[schema.ModelSpec], np.ndarray, list[str]]:  # noqa: ANN001
    """(specs with the target GPU set, milli-GPU labels, family) for a dataset frame."""
    import msgspec

    specs: list[schema.ModelSpec] = []
    y: list[float] = []
    fam: list[str] = []
    gpu_rows = df[df["label_source"] == "gpu"]
    if len(gpu_rows):
        for _, r in gpu_rows.iterrows():
            pct = r["gpu_sm_active_pct"]
            if pct != pct:  # NaN
                pct = r["gpu_util_pct"]
            if pct != pct:
                continue
            spec = schema.parse_model(r["spec_json"])
            specs.append(msgspec.structs.replace(spec, gpu_model=r["gpu_model"]))
            y.append(min(1000.0, max(1.0, 10.0 * pct)))
            fam.append(r["family"])
        return specs, np.array(y), fam
    for _, r in df.iterrows():
        spec = schema.parse_model(r["spec_json"])
        for name, g in gpus.CATALOGUE.items():
            specs.append(msgspec.structs.replace(spec, gpu_model=name))
            y.append(gpus.compute_label(r["flops_step"], r["bytes_moved_step"],
                                        r["n_ops_step"], g, spec.dtype))
            fam.append(r["family"])
    return specs, np.array(y), fam


class ComputeModel:
    def __init__(self, booster, version: str = "v1") -> None:  # noqa: ANN001
        self.booster = booster
        self.version = version

    @classmethod
    def fit(cls, specs: Sequence[schema.ModelSpec], y: np.ndarray,
            version: str = "v1") -> ComputeModel:
        import lightgbm as lgb

        ds = lgb.Dataset(matrix(specs), label=y, feature_name=list(FEATURES),
                         free_raw_data=True)
        return cls(lgb.train(PARAMS, ds, num_boost_round=NUM_ROUNDS), version)

    def predict_many(self, specs: Sequence[schema.ModelSpec]) -> np.ndarray:
        return np.clip(self.booster.predict(matrix(specs), num_threads=1), 1, 1000)

    def predict_milli(self, spec: schema.ModelSpec) -> int:
        return int(round(float(self.predict_many([spec])[0])))

    def save(self, path: Path) -> None:
        self.booster.save_model(str(path))

    @classmethod
    def load(cls, path: Path, version: str = "v1") -> ComputeModel:
        import lightgbm as lgb

        return cls(lgb.Booster(model_file=str(path)), version)
