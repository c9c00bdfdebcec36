"""Load the shipped model artefacts and predict a job's demand (no torch, no training)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from predictor import features, schema
from predictor.compute_model import ComputeModel
from predictor.memory_model import MemoryModel

MODELS_DIR = Path(__file__).parent / "models"
MANIFEST = "manifest.json"


@dataclass(frozen=True, slots=True)
class Prediction:
    gpu_milli: int  # 1..1000
    gpu_mem_mib: int
    job_class: str
    model_version: str
    gpu_model: str
    train_mib: float = 0.0  # training-state estimate: no CUDA context, no margin
    input_level: str = "described"  # or "job": what the annotation carried (job fields only)
    step_s: float = 0.0  # predicted seconds per training step alone (features.step_seconds)

    def to_dict(self) -> dict:
        return {"train_mib": round(self.train_mib, 1), "gpu_mem_mib": self.gpu_mem_mib,
                "gpu_milli": self.gpu_milli, "job_class": self.job_class,
                "gpu_model": self.gpu_model, "input_level": self.input_level,
                "model_version": self.model_version}


class Estimator:
    def __init__(self, memory: MemoryModel, compute: ComputeModel, version: str) -> None:
        self.memory = memory
        self.compute = compute
        self.version = version

    @classmethod
    def load(cls, models_dir: Path = MODELS_DIR) -> Estimator:
        manifest = json.loads((models_dir / MANIFEST).read_text())
        version = manifest["version"]
        return cls(
            MemoryModel.load(models_dir / manifest["memory"]),
            ComputeModel.load(models_dir / manifest["compute"], version),
            version,
        )

    def predict(self, spec: schema.ModelSpec) -> Prediction:
        milli = min(1000, max(1, self.compute.predict_milli(spec)))
        parts = self.memory.predict_parts([spec])[0]
        train = float(parts.sum())
        return Prediction(
            gpu_milli=milli,
            gpu_mem_mib=self.memory.reserve_parts_mib(spec, parts),
            job_class=features.job_class(spec),
            model_version=self.version,
            gpu_model=spec.gpu_model,
            train_mib=train,
            input_level=schema.input_level(spec),
            step_s=features.step_seconds(spec),
        )
