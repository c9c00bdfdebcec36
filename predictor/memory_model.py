"""GPU-memory model: least squares on degree-2 polynomial features, calibrated per GPU model.

``predict_mib(spec) = ceil(ols(spec) * scale + offset)`` where, for a GPU model with measured
rows, ``(scale, offset) = device[gpu_model]`` and otherwise ``(margin, ctx_mib[gpu_model])``.

* ``ols`` — statsmodels weighted least squares on degree-2 polynomial terms (``TERMS``):
  analytic memory-phase sizes (optimizer step / backward, see :func:`term_pairs`) times the
  indicator of the phase that is larger, plus lookup I/O terms. A prediction is the larger
  of the two fitted phases (:func:`raw_predict`).
  Weights are ``1/y²``, i.e. ordinary least squares on relative error (a 20 MiB job counts
  as much as a 20 GiB one).
  Target: measured peak training bytes (params, grads, optimizer state, activations,
  temporaries) in MiB, without the CUDA context.
* ``margin`` — a multiplicative safety margin calibrated on leave-one-family-out residuals:
  the ``MARGIN_QUANTILE`` quantile of ``y / ols`` over held-out predictions.
* ``ctx_mib`` — per-GPU-model constant, see :mod:`predictor.gpus`.
* ``device`` — for GPU models the generator measured: ``(scale, offset_mib)`` fitted so that
  ``ols * scale + offset`` covers the process's NVML-measured memory (context, library
  workspaces, allocator slack included) in ``MARGIN_QUANTILE`` of held-out predictions
  (:func:`fit_device`). The CPU label has none of those, and a context constant alone left
  half of the H200 rows under-estimated.

Prediction needs numpy only; fitting needs statsmodels.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

from predictor import features, gpus

MARGIN_QUANTILE = 0.98
FORMAT = "sparse-predictor/memory-ols/6"
DEVICE_MIN_ROWS = 20  # fewer measured rows than this: keep the margin and context constant


def term_pairs() -> list[tuple[str, str | None]]:
    """Degree-2 terms: analytic memory phases times the regime indicator.

    The peak of a training step is the larger of two phases (see ``features.derive``):

    * optimizer step: params x (1 + optimizer-state multiplier) + gradients + the step's
      parameter-sized temporaries (``step_mib``);
    * backward: params x (1 + state multiplier) + gradients being produced + activations kept
      for backward (``hold_mib``, ``grad_mib``, ``saved_mib``).

    ``step_regime`` / ``bwd_regime`` say which one the analytic sizes make larger; each phase
    size enters multiplied by its indicator, so the fit learns one coefficient per physical
    term instead of a max(). Lookup I/O (``io_mib``) and the gathered embedding rows
    (``gathered_mib``, the embedding backward's intermediate) enter in both regimes.
    """
    return [
        ("step_mib", "step_regime"),
        ("hold_mib", "bwd_regime"),
        ("saved_mib", "bwd_regime"),
        ("grad_mib", "bwd_regime"),
        ("io_mib", None),
        ("gathered_mib", None),
    ]


TERMS = [a if b is None else f"{a}*{b}" for a, b in term_pairs()]
_PAIRS = term_pairs()
# Both levels price the peak as the larger of two phases, optimizer step and backward
# (``features.derive``), each a sum of memory terms; terms in ``shared`` count in both. The
# job-fields level (macs, params, batch, tables, optimizer, dtype only) bounds the
# activations kept for backward from the MACs (``act_width_mib``, ``act_dim_mib``) instead
# of counting them.
@dataclass(frozen=True)
class Layout:
    step: tuple[str, ...]
    bwd: tuple[str, ...]
    shared: tuple[str, ...]
    init: tuple[float, ...]  # const + step + bwd + shared: the physical coefficients
    level: str = "described"

    @property
    def names(self) -> list[str]:
        return ["const", *self.step, *self.bwd, *self.shared]


DESCRIBED = Layout(step=("step_mib",), bwd=("hold_mib", "saved_mib", "grad_mib"),
                   shared=("io_mib", "gathered_mib"), init=(0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0))
JOB = Layout(step=("step_mib",), bwd=("hold_mib", "grad_mib", "act_width_mib", "act_dim_mib"),
             shared=("io_mib",), init=(0.0, 1.0, 1.0, 1.0, 0.5, 0.05, 1.0), level="job")
LAYOUTS = {"described": DESCRIBED, "job": JOB}
JOB_TERMS = JOB.names[1:]
LEVELS = ("described", "job")
UNDER_WEIGHT = {"described": 3.0, "job": 1.0}  # an under-estimate costs this much more


def job_view(spec: features.ModelSpec) -> features.ModelSpec:
    """What the job fields of ``spec`` say (the annotation a job controller writes)."""
    job = msgspec.convert(features.to_job_fields(spec), features.JobFields)
    return features.job_fields_spec(job, spec.gpu_model)


def _terms(rows: Sequence[dict[str, float]], layout: Layout) -> np.ndarray:
    names = layout.names[1:]
    return np.array([[r[t] for t in names] for r in rows], dtype=float).reshape(
        len(rows), len(names))


def _phases(coef: np.ndarray, terms: np.ndarray,
            layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    n_step, n_bwd = len(layout.step), len(layout.bwd)
    shared = terms[:, n_step + n_bwd:] @ coef[1 + n_step + n_bwd:]
    step = coef[0] + terms[:, :n_step] @ coef[1:1 + n_step] + shared
    bwd = coef[0] + terms[:, n_step:n_step + n_bwd] @ coef[1 + n_step:1 + n_step + n_bwd] \
        + shared
    return step, bwd


def fit_phases(rows: Sequence[dict[str, float]], y_mib: np.ndarray,
               layout: Layout) -> np.ndarray:
    """Which phase a row's peak was in is not known at prediction time, so the fit minimises
    the relative error of ``max(step, backward)`` itself (smoothed absolute error, an
    under-estimate weighted ``UNDER_WEIGHT`` times, L-BFGS-B), from the physical coefficients
    (1 for every counted term) and with every coefficient >= 0: each term is memory that
    exists."""
    from scipy.optimize import minimize

    terms = _terms(rows, layout)
    y = np.asarray(y_mib, dtype=float)
    scale = np.maximum(np.concatenate([[1.0], terms.max(axis=0, initial=0.0)]), 1e-9)
    scale = np.maximum(scale / np.maximum(y.max(), 1.0), 1e-12)  # conditioning only

    n_step, n_bwd = len(layout.step), len(layout.bwd)
    ones = np.ones((len(y), 1))
    # design of each phase over all coefficients (zeros where a term is not in the phase)
    x_step = np.hstack([ones, terms[:, :n_step], np.zeros((len(y), n_bwd)),
                        terms[:, n_step + n_bwd:]]) / scale
    x_bwd = np.hstack([ones, np.zeros((len(y), n_step)), terms[:, n_step:]]) / scale

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        step, bwd = x_step @ theta, x_bwd @ theta
        in_step = step >= bwd
        rel = (np.where(in_step, step, bwd) - y) / y
        w = np.where(rel < 0, UNDER_WEIGHT[layout.level], 1.0)
        root = np.sqrt(rel * rel + 1e-4)
        d = w * rel / root / y / len(y)
        grad = np.where(in_step[:, None], x_step, x_bwd).T @ d
        return float(np.mean(w * root)), grad

    res = minimize(loss, np.array(layout.init) * scale, jac=True, method="L-BFGS-B",
                   bounds=[(0.0, None)] * len(layout.init),
                   options={"maxiter": 300, "ftol": 1e-10})
    return res.x / scale


def predict_phases(coef: np.ndarray, rows: Sequence[dict[str, float]],
                   layout: Layout) -> np.ndarray:
    step, bwd = _phases(coef, _terms(rows, layout), layout)
    return np.maximum(np.maximum(step, bwd), 1.0)


def fit_coef_job(rows: Sequence[dict[str, float]], y_mib: np.ndarray) -> np.ndarray:
    return fit_phases(rows, y_mib, JOB)


def raw_predict_job(coef: np.ndarray, rows: Sequence[dict[str, float]]) -> np.ndarray:
    return predict_phases(coef, rows, JOB)


def fit_coef_described(rows: Sequence[dict[str, float]], y_mib: np.ndarray) -> np.ndarray:
    return fit_phases(rows, y_mib, DESCRIBED)


def raw_predict_described(coef: np.ndarray, rows: Sequence[dict[str, float]]) -> np.ndarray:
    return predict_phases(coef, rows, DESCRIBED)


def design(rows: Sequence[dict[str, float]]) -> np.ndarray:
    """Design matrix (const + degree-2 terms) for derived feature dicts."""
    cols = [np.ones(len(rows))]
    for a, b in _PAIRS:
        cols.append(np.array([r[a] * (1.0 if b is None else r[b]) for r in rows], dtype=float))
    return np.column_stack(cols)


def fit_coef(rows: Sequence[dict[str, float]], y_mib: np.ndarray) -> np.ndarray:
    import warnings

    import statsmodels.api as sm

    x = design(rows)
    with warnings.catch_warnings():  # indicator columns can be collinear: pinv handles it
        warnings.simplefilter("ignore")
        res = sm.WLS(y_mib, x, weights=1.0 / np.maximum(y_mib, 1.0) ** 2).fit(method="pinv")
    return np.asarray(res.params)


REGIMES = ("step_regime", "bwd_regime")


def phase_sizes(coef: np.ndarray, rows: Sequence[dict[str, float]]) -> np.ndarray:
    """Fitted size of each phase (columns in ``REGIMES`` order) for every row: the constant,
    the phase's own terms and the terms shared by both phases."""
    terms = np.array([[r[a] for a, _ in _PAIRS] for r in rows], dtype=float).reshape(
        len(rows), len(_PAIRS))
    in_phase = np.array([[b is None or b == regime for _, b in _PAIRS] for regime in REGIMES])
    return coef[0] + terms @ (coef[1:, None] * in_phase.T)


def raw_predict(coef: np.ndarray, rows: Sequence[dict[str, float]]) -> np.ndarray:
    """The peak is the larger fitted phase. The regime indicators only choose which phase
    a training row measures; at prediction time both phases are evaluated, so a job near the
    boundary of the analytic regimes is not priced by the smaller one."""
    return np.maximum(phase_sizes(coef, rows).max(axis=1), 1.0)


FIT = {"described": fit_coef_described, "job": fit_coef_job}
PREDICT = {"described": raw_predict_described, "job": raw_predict_job}


def lofo_raw(
    rows: Sequence[dict[str, float]], y_mib: np.ndarray, groups: Sequence[str],
    eval_rows: Sequence[dict[str, float]], eval_groups: Sequence[str],
    level: str = "described",
) -> np.ndarray:
    """OLS estimate for each of ``eval_rows`` by a model fitted on ``rows`` without the eval
    row's group."""
    groups_arr, eval_arr = np.asarray(groups), np.asarray(eval_groups)
    out = np.empty(len(eval_rows))
    for g in sorted(set(eval_groups)):
        train, test = groups_arr != g, eval_arr == g
        if not train.any():  # a single group: nothing to hold it out against
            out[test] = np.nan
            continue
        coef = FIT[level]([r for r, t in zip(rows, train, strict=True) if t], y_mib[train])
        out[test] = PREDICT[level](
            coef, [r for r, t in zip(eval_rows, test, strict=True) if t])
    return out


def lofo_ratios(
    rows: Sequence[dict[str, float]], y_mib: np.ndarray, groups: Sequence[str],
    level: str = "described",
) -> np.ndarray:
    """``y / prediction`` for every row, predicted by a model fitted without its group."""
    return y_mib / lofo_raw(rows, y_mib, groups, rows, groups, level)


def calibrate_margin(ratios: np.ndarray, q: float = MARGIN_QUANTILE) -> float:
    ratios = np.asarray(ratios, dtype=float)
    ratios = ratios[np.isfinite(ratios)]
    return max(1.0, float(np.quantile(ratios, q))) if len(ratios) else 1.0


def calibrate_device(
    rows: Sequence[dict[str, float]], y_mib: np.ndarray, groups: Sequence[str],
    gpu_rows: Sequence[dict[str, float]], gpu_groups: Sequence[str], used_mib: np.ndarray,
    level: str = "described",
) -> tuple[float, float]:
    """:func:`fit_device` for one GPU model's measured rows, each estimated by an OLS fitted on
    ``rows`` without the GPU row's group."""
    return fit_device(lofo_raw(rows, y_mib, groups, gpu_rows, gpu_groups, level), used_mib)


def fit_device(raw_mib: np.ndarray, used_mib: np.ndarray,
               q: float = MARGIN_QUANTILE) -> tuple[float, float]:
    """``(scale, offset_mib)`` such that ``raw * scale + offset >= used`` for a ``q`` share
    of rows: a linear quantile regression of the relative error (each row's constraint
    divided by its measured memory, so small jobs count as much as large ones). ``raw``
    should be held-out estimates, so the calibration covers the model's own error too."""
    import warnings

    import statsmodels.api as sm

    used = np.asarray(used_mib, dtype=float)
    x = np.column_stack([raw_mib, np.ones(len(used))]) / used[:, None]
    with warnings.catch_warnings():  # QuantReg warns on slow convergence; the fit stays valid
        warnings.simplefilter("ignore")
        scale, offset = sm.QuantReg(np.ones(len(used)), x).fit(q=q, max_iter=5000).params
    return max(1.0, float(scale)), max(0.0, float(offset))


@dataclass
class MemoryModel:
    """Both input levels: ``coef``/``margin``/``device`` for described specs, the ``*_job``
    ones for specs built from job fields only (:func:`features.input_level`)."""

    coef: np.ndarray
    margin: float = 1.0
    ctx_mib: dict[str, int] = field(
        default_factory=lambda: {k: g.ctx_mib for k, g in gpus.CATALOGUE.items()}
    )
    version: str = "v1"
    meta: dict = field(default_factory=dict)
    device: dict[str, tuple[float, float]] = field(default_factory=dict)
    coef_job: np.ndarray | None = None
    margin_job: float = 1.0
    device_job: dict[str, tuple[float, float]] = field(default_factory=dict)

    @classmethod
    def fit(
        cls, specs: Sequence[features.ModelSpec], y_mib: np.ndarray, groups: Sequence[str],
        version: str = "v1",
    ) -> MemoryModel:
        rows = [features.derive(s) for s in specs]
        job_rows = [features.derive(job_view(s)) for s in specs]
        return cls(
            coef=fit_coef(rows, y_mib),
            margin=calibrate_margin(lofo_ratios(rows, y_mib, groups)),
            coef_job=fit_coef_job(job_rows, y_mib),
            margin_job=calibrate_margin(lofo_ratios(job_rows, y_mib, groups, "job")),
            version=version,
            meta={"n_rows": len(rows), "groups": sorted(set(groups)),
                  "margin_quantile": MARGIN_QUANTILE})

    def predict_train_mib(self, specs: Sequence[features.ModelSpec]) -> np.ndarray:
        """OLS estimate of the training-state peak (no margin, no context), each spec at its
        input level."""
        out = np.empty(len(specs))
        for level in LEVELS:
            idx = [i for i, s in enumerate(specs) if features.input_level(s) == level]
            if idx:
                coef = self.coef if level == "described" else self.coef_job
                if coef is None:
                    raise ValueError("this memory model has no job-fields level")
                out[idx] = PREDICT[level](coef, [features.derive(specs[i]) for i in idx])
        return out

    def predict_mib(self, spec: features.ModelSpec) -> int:
        return self.reserve_mib(spec, float(self.predict_train_mib([spec])[0]))

    def reserve_mib(self, spec: features.ModelSpec, train_mib: float) -> int:
        scale, offset = self.scale_offset(spec.gpu_model, features.input_level(spec))
        return int(math.ceil(train_mib * scale + offset))

    def scale_offset(self, gpu_model: str, level: str = "described") -> tuple[float, float]:
        device = self.device if level == "described" else self.device_job
        if gpu_model in device:
            return device[gpu_model]
        margin = self.margin if level == "described" else self.margin_job
        return margin, float(self.ctx_mib.get(gpu_model, gpus.get(gpu_model).ctx_mib))

    def to_json(self) -> dict:
        return {
            "format": FORMAT, "version": self.version, "terms": ["const", *TERMS],
            "coef": [float(c) for c in self.coef], "margin": self.margin,
            "ctx_mib": self.ctx_mib, "meta": self.meta,
            "device": {k: [float(a), float(b)] for k, (a, b) in self.device.items()},
            "job_terms": ["const", *JOB_TERMS],
            "coef_job": None if self.coef_job is None else [float(c) for c in self.coef_job],
            "margin_job": self.margin_job,
            "device_job": {k: [float(a), float(b)] for k, (a, b) in self.device_job.items()},
        }

    @classmethod
    def from_json(cls, d: dict) -> MemoryModel:
        if d.get("format") != FORMAT:
            raise ValueError(f"not a memory model artefact (format {d.get('format')!r})")
        if d["terms"] != ["const", *TERMS] or d.get("job_terms") != ["const", *JOB_TERMS]:
            raise ValueError("memory model terms do not match this code version")
        pairs = {k: (float(a), float(b)) for k, (a, b) in d.get("device", {}).items()}
        return cls(coef=np.array(d["coef"], dtype=float), margin=float(d["margin"]),
                   ctx_mib={k: int(v) for k, v in d["ctx_mib"].items()},
                   version=d["version"], meta=d.get("meta", {}), device=pairs,
                   coef_job=None if d.get("coef_job") is None
                   else np.array(d["coef_job"], dtype=float),
                   margin_job=float(d.get("margin_job", 1.0)),
                   device_job={k: (float(a), float(b))
                               for k, (a, b) in d.get("device_job", {}).items()})

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> MemoryModel:
        return cls.from_json(json.loads(path.read_text()))
