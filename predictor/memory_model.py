"""GPU-memory model: a physics-shaped fit of the training-state peak, and a two-part
reservation calibrated per GPU model.

Both input levels (``described``: the annotation ``describe`` writes; ``job``: the job fields
only) price the peak of a training step as the larger of two phases, each a sum of memory
terms computed from the spec (:func:`features.derive`) with one non-negative coefficient per
term (:class:`Layout`, :func:`fit_phases`):

* optimizer step: parameters, optimizer state, gradients, the step's temporaries;
* backward: parameters, optimizer state, gradients being produced, activations kept for
  backward, the batch and the lookups.

A prediction splits into a *state* part (parameters, gradients, optimizer state and step
temporaries: exact physics once the optimizer is known) and an *activation* part (what the
forward keeps: counted by ``describe``, only bounded from MACs and parameters at the job
level). The reservation prices them separately::

    gpu_mem_mib = ceil(s_state x state + s_act x activations + offset)

* GPU models without measured rows: ``(s_state, s_act)`` per level, fitted on
  leave-one-family-out parts against the CPU label plus the default GPU's context, and
  ``offset`` = that GPU's context (:mod:`predictor.gpus`);
* GPU models with measured rows: ``(s_state, s_act, offset)`` per level, fitted on held-out
  parts against the process memory NVML measured (context, library workspaces, allocator
  slack included).

* described specs carrying the caching-allocator replay (``slack_bytes``) on GPU models with
  measured rows: ``base + m x (s_peak x (state + activations + slack) + w_conv x conv
  layer + w_emb x dense-gradient lookups + w_seg)``: ``base`` is what the measured rows pin
  (the largest CUDA context and the BLAS workspaces, :func:`device_base_mib`), the rest the
  predicted reserved peak and an allowance for what the trace cannot see, memory GPU
  kernels allocate inside one op (cuDNN workspaces, the CUDA embedding backward's buffers)
  and the fragmentation it leaves (:func:`allowance_columns`, :func:`fit_allowance`,
  :func:`calibrate_replayed`), times the margin ``m`` a family it has not seen needs
  (:func:`allowance_margin`).

The others are linear quantile regressions of the relative error (:func:`fit_scales`), rows
weighted so that every family counts the same, covered in the share :func:`reserve_quantile`
sets for the number of families (every row, below 49 families: the split-conformal level
with families as units), the rest as tight as the check loss allows. One multiplier on the
whole estimate could not be tight and safe at once: the state part of a recommendation
model is known to a few percent while the activations of an unseen architecture are not.

The pieces: the phase fit in ``predictor.memory_phases``, the scales in
``predictor.reservation``, the replayed allowance and its margin in ``predictor.allowance``;
this module holds the model they make and its artefact.

Prediction needs numpy only; fitting needs scipy.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# ``name as name``: re-exported, the tests read them here
from predictor import features, gpus, schema
from predictor.allowance import Quint, Triple, allowance_columns
from predictor.allowance import allowance_margin as allowance_margin
from predictor.allowance import allowance_needs as allowance_needs
from predictor.allowance import conformal_margin as conformal_margin
from predictor.allowance import device_base_mib as device_base_mib
from predictor.allowance import family_scores as family_scores
from predictor.allowance import fit_allowance as fit_allowance
from predictor.allowance import fit_margin as fit_margin
from predictor.memory_phases import JOB as JOB
from predictor.memory_phases import JOB_TERMS as JOB_TERMS
from predictor.memory_phases import LAYOUTS, LEVELS, fit_level, fit_rows, parts_level
from predictor.memory_phases import TERMS as TERMS
from predictor.reservation import RESERVE_ALPHA, calibrate_reserve, reserve_quantile
from predictor.reservation import fit_reserve as fit_reserve

FORMAT = "sparse-predictor/memory-phases/10"
# loaded when their terms match; format 7 has no replayed calibration, formats 8 and 9 one
# of another meaning (8: scales of state, activations and slack; 9: a fitted offset, times
# the margin), which is dropped
OLD_FORMATS = ("sparse-predictor/memory-phases/7", "sparse-predictor/memory-phases/8",
               "sparse-predictor/memory-phases/9")
DEVICE_MIN_ROWS = 20  # fewer measured rows than this: the CPU calibration and the context


@dataclass
class MemoryModel:
    """Both input levels: ``coef`` for described specs, ``coef_job`` for specs built from
    job fields only (:func:`schema.input_level`); ``reserve[level]`` = ``(s_state, s_act)``
    for GPU models without measured rows (plus their context), ``device[level][gpu]`` =
    ``(s_state, s_act, offset)`` for those with."""

    coef: np.ndarray
    coef_job: np.ndarray | None = None
    reserve: dict[str, tuple[float, float]] = field(default_factory=dict)
    device: dict[str, dict[str, Triple]] = field(default_factory=dict)
    # described specs carrying ``slack_bytes``: per GPU model with measured rows,
    # ``(s_peak, w_conv, w_emb, w_seg, base_mib)`` (:func:`calibrate_replayed`)
    replayed: dict[str, Quint] = field(default_factory=dict)
    ctx_mib: dict[str, int] = field(
        default_factory=lambda: {k: g.ctx_mib for k, g in gpus.CATALOGUE.items()}
    )
    version: str = "v1"
    meta: dict = field(default_factory=dict)

    @classmethod
    def fit(
        cls, specs: Sequence[schema.ModelSpec], y_mib: np.ndarray, groups: Sequence[str],
        version: str = "v1", ctx_mib: float | None = None,
    ) -> MemoryModel:
        ctx = float(gpus.get(gpus.DEFAULT_GPU).ctx_mib if ctx_mib is None else ctx_mib)
        coef: dict[str, np.ndarray] = {}
        reserve: dict[str, tuple[float, float]] = {}
        groups_arr = np.asarray(groups)
        for level in LEVELS:
            rows, idx = fit_rows(specs, level)
            y_fit = np.asarray(y_mib, dtype=float)[idx]
            coef[level] = fit_level(level, rows, y_fit, list(groups_arr[idx]))
            reserve[level] = calibrate_reserve(rows, y_fit, list(groups_arr[idx]), ctx, level)
        return cls(coef=coef["described"], coef_job=coef["job"], reserve=reserve,
                   version=version,
                   meta={"n_rows": len(specs), "groups": sorted(set(groups)),
                         "reserve_alpha": RESERVE_ALPHA,
                         "reserve_quantile": reserve_quantile(len(set(groups))),
                         "reserve_ctx_mib": ctx})

    def coef_for(self, level: str) -> np.ndarray:
        coef = self.coef if level == "described" else self.coef_job
        if coef is None:
            raise ValueError(f"this memory model has no {level} level")
        return coef

    def predict_parts(self, specs: Sequence[schema.ModelSpec]) -> np.ndarray:
        """``[state, activations]`` (MiB, no margin, no context), each spec at its level."""
        out = np.empty((len(specs), 2))
        for level in LEVELS:
            idx = [i for i, s in enumerate(specs) if schema.input_level(s) == level]
            if idx:
                out[idx] = parts_level(level, self.coef_for(level),
                                       [features.derive(specs[i]) for i in idx])
        return out

    def predict_train_mib(self, specs: Sequence[schema.ModelSpec]) -> np.ndarray:
        """Estimate of the training-state peak (no margin, no context)."""
        return self.predict_parts(specs).sum(axis=1)

    def reservation(self, gpu_model: str, level: str = "described") -> Triple:
        """``(s_state, s_act, offset_mib)`` booked on ``gpu_model`` at ``level``."""
        measured = self.device.get(level, {})
        if gpu_model in measured:
            return measured[gpu_model]
        s_state, s_act = self.reserve.get(level, (1.0, 1.0))
        return s_state, s_act, float(self.ctx_mib.get(gpu_model, gpus.get(gpu_model).ctx_mib))

    def reserve_parts_mib(self, spec: schema.ModelSpec, parts: np.ndarray) -> int:
        level = schema.input_level(spec)
        if level == "described" and spec.slack_bytes is not None:
            return self.reserve_replayed_mib(spec, parts)
        s_state, s_act, offset = self.reservation(spec.gpu_model, level)
        # the shards of tables sharded over the workers and their optimizer state are what
        # the embedding kernels allocate, whatever the model around them: booked as they are;
        # the scales cover what an unseen model's estimate may miss
        exact = (min(parts[0], features.derive(spec)["shards_mib"])
                 if spec.embedding_sharding is not None else 0.0)
        return int(math.ceil(exact + (parts[0] - exact) * s_state + parts[1] * s_act
                             + offset))

    def reserve_replayed_mib(self, spec: schema.ModelSpec, parts: np.ndarray) -> int:
        """The reservation of a described spec with the allocator replay: the reserved peak
        (parts + slack) and what the trace cannot see (:func:`allowance_columns`) priced by
        the GPU's measured calibration, or, on a GPU without measured rows, the
        CPU-calibrated scales, the slack as replayed and the context. There a negative
        slack (CUDA kernels keeping less than the traced CPU ones) is not taken as credit:
        no measured row of that GPU vouches for it."""
        slack_mib = max(0.0, spec.slack_bytes or 0.0) / 2**20
        if spec.gpu_model in self.replayed:
            cols = allowance_columns(np.asarray(parts).reshape(1, 2),
                                     [features.derive(spec)])[0]
            *coef, base = self.replayed[spec.gpu_model]
            return int(math.ceil(cols @ np.array(coef) + base))
        s_state, s_act, offset = self.reservation(spec.gpu_model, "described")
        return int(math.ceil(parts[0] * s_state + parts[1] * s_act + slack_mib + offset))

    def predict_mib(self, spec: schema.ModelSpec) -> int:
        return self.reserve_parts_mib(spec, self.predict_parts([spec])[0])

    def to_json(self) -> dict:
        def level(lv: str) -> dict:
            coef = self.coef if lv == "described" else self.coef_job
            return {"terms": LAYOUTS[lv].names,
                    "coef": None if coef is None else [float(c) for c in coef],
                    "reserve": [float(v) for v in self.reserve.get(lv, (1.0, 1.0))],
                    "device": {k: [float(v) for v in t]
                               for k, t in self.device.get(lv, {}).items()}}

        return {"format": FORMAT, "version": self.version, "ctx_mib": self.ctx_mib,
                "meta": self.meta, "levels": {lv: level(lv) for lv in LEVELS},
                "replayed": {k: [float(v) for v in q] for k, q in self.replayed.items()}}

    @classmethod
    def from_json(cls, d: dict) -> MemoryModel:
        if d.get("format") not in (FORMAT, *OLD_FORMATS):
            raise ValueError(f"not a memory model artefact (format {d.get('format')!r})")
        levels = d["levels"]
        for lv in LEVELS:
            if levels[lv]["terms"] != LAYOUTS[lv].names:
                raise ValueError(f"memory model terms ({lv}) do not match this code version")

        def coef(lv: str) -> np.ndarray | None:
            c = levels[lv]["coef"]
            return None if c is None else np.array(c, dtype=float)

        return cls(coef=coef("described"), coef_job=coef("job"),
                   reserve={lv: tuple(float(v) for v in levels[lv]["reserve"])
                            for lv in LEVELS},
                   device={lv: {k: tuple(float(v) for v in t)
                                for k, t in levels[lv]["device"].items()} for lv in LEVELS},
                   replayed={k: tuple(float(v) for v in q)
                             for k, q in d.get("replayed", {}).items()}
                   if d["format"] == FORMAT else {},
                   ctx_mib={k: int(v) for k, v in d["ctx_mib"].items()},
                   version=d["version"], meta=d.get("meta", {}))

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> MemoryModel:
        return cls.from_json(json.loads(path.read_text()))
