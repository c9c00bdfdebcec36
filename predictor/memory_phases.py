"""The two-phase fit of a training step's memory peak: the terms of each input level
(:class:`Layout`), one non-negative coefficient per term fitted on the larger of the
optimizer-step and backward phases (:func:`fit_phases`), the ``[state, activations]`` split
of a prediction, and leave-one-family-out estimates for the calibrations. See
``predictor.memory_model`` for the whole model."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec
import numpy as np

from predictor import features, schema


@dataclass(frozen=True)
class Layout:
    """The terms of one input level: those of the optimizer-step phase, of the backward
    phase, those counted in both (``shared``), which of them are activations (``act``; the
    rest, and the constant, are state), the physical starting coefficients (const + step +
    bwd + shared), the weight of an under-estimate in the fit, and the terms held at their
    physical coefficient (``fixed``: exact memory, nothing to fit)."""

    step: tuple[str, ...]
    bwd: tuple[str, ...]
    shared: tuple[str, ...]
    act: frozenset[str]
    init: tuple[float, ...]
    under_weight: float = 1.0
    fixed: frozenset[str] = frozenset()

    @property
    def names(self) -> list[str]:
        return ["const", *self.step, *self.bwd, *self.shared]


# described: the phase sizes ``describe`` measured (features.derive)
DESCRIBED = Layout(step=("step_mib",), bwd=("hold_mib", "saved_mib", "grad_mib"),
                   shared=("io_mib", "gathered_mib"),
                   act=frozenset({"saved_mib", "io_mib", "gathered_mib"}),
                   init=(0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0), under_weight=3.0)
# job fields: the same state terms (from params, tables, optimizer, dtype: weights, gradients,
# optimizer state and step temporaries are physics, held at 1) and activations bounded from the
# MACs, or stated by the optional leaf-module outputs (activations.job_activation_terms)
JOB = Layout(step=("step_mib",),
             bwd=("hold_mib", "grad_mib", "mlp_act_mib", "reuse_width_mib", "reuse_dim_mib",
                  "leaf_act_mib"),
             shared=("io_mib",),
             act=frozenset({"mlp_act_mib", "reuse_width_mib", "reuse_dim_mib", "leaf_act_mib",
                            "io_mib"}),
             init=(0.0, 1.0, 1.0, 1.0, 5.0, 5.0, 1.0, 1.0, 1.0),
             fixed=frozenset({"step_mib", "hold_mib", "grad_mib"}))
LAYOUTS = {"described": DESCRIBED, "job": JOB}
LEVELS = ("described", "job")
TERMS = DESCRIBED.names[1:]
JOB_TERMS = JOB.names[1:]


# The job-field views one job-level fit learns from, stacked: the required fields alone, with
# the tables' gradient layout and ids per sample, and with every optional field; so that one
# set of coefficients serves whatever a job states.
JOB_FIT_VIEWS: tuple[tuple[str, ...], ...] = (
    (), schema.OPTIONAL_LAYOUT, schema.OPTIONAL_JOB_FIELDS)


def job_view(spec: schema.ModelSpec,
             optional: bool | tuple[str, ...] = False) -> schema.ModelSpec:
    """What the job fields of ``spec`` say (the annotation a job controller writes); with
    ``optional`` the optional fields too (all, or those named: ``sparseGradients``,
    ``idsPerSample``, ``leafActivations``)."""
    job = msgspec.convert(schema.to_job_fields(spec, optional), schema.JobFields)
    return schema.job_fields_spec(job, spec.gpu_model)


def _terms(rows: Sequence[dict[str, float]], layout: Layout) -> np.ndarray:
    names = layout.names[1:]
    return np.array([[r[t] for t in names] for r in rows], dtype=float).reshape(
        len(rows), len(names))


def _designs(terms: np.ndarray, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """Each phase's design over all coefficients (zeros where a term is not in the phase)."""
    n, n_step, n_bwd = len(terms), len(layout.step), len(layout.bwd)
    ones = np.ones((n, 1))
    x_step = np.hstack([ones, terms[:, :n_step], np.zeros((n, n_bwd)),
                        terms[:, n_step + n_bwd:]])
    x_bwd = np.hstack([ones, np.zeros((n, n_step)), terms[:, n_step:]])
    return x_step, x_bwd


def family_weights(groups: np.ndarray | None, n: int) -> np.ndarray:
    """Row weights summing to 1, every family weighing the same (uniform without families),
    so that one family with many configurations does not buy the others' safety."""
    if groups is None:
        return np.full(n, 1.0 / max(n, 1))
    _, inv, counts = np.unique(groups, return_inverse=True, return_counts=True)
    return 1.0 / (len(counts) * counts[inv])


def one_blas_thread() -> contextlib.AbstractContextManager:
    """The fits are many small problems: a threaded BLAS only spins (20x slower on a loaded
    machine). threadpoolctl is optional; without it the BLAS keeps its threads."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


def fit_phases(rows: Sequence[dict[str, float]], y_mib: np.ndarray,
               layout: Layout, groups: Sequence[str] | None = None) -> np.ndarray:
    """Which phase a row's peak was in is not known at prediction time, so the fit minimises
    the relative error of ``max(step, backward)`` itself (smoothed absolute error, an
    under-estimate weighted ``layout.under_weight`` times, L-BFGS-B), from the physical
    coefficients and with every coefficient >= 0: each term is memory that exists. With
    ``groups`` every family weighs the same, so the coefficients describe how families
    differ rather than the families with the most configurations."""
    from scipy.optimize import minimize

    terms = _terms(rows, layout)
    y = np.asarray(y_mib, dtype=float)
    scale = np.maximum(np.concatenate([[1.0], terms.max(axis=0, initial=0.0)]), 1e-9)
    scale = np.maximum(scale / np.maximum(y.max(), 1.0), 1e-12)  # conditioning only
    x_step, x_bwd = (x / scale for x in _designs(terms, layout))
    fam_w = (family_weights(np.asarray(groups), len(y)) * len(y)
             if groups is not None else np.ones(len(y)))

    # products as element-wise sums: a threaded BLAS call for a few hundred rows costs far
    # more than it saves, badly so on a loaded machine
    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        step, bwd = (x_step * theta).sum(axis=1), (x_bwd * theta).sum(axis=1)
        in_step = step >= bwd
        rel = (np.where(in_step, step, bwd) - y) / y
        w = np.where(rel < 0, layout.under_weight, 1.0) * fam_w
        root = np.sqrt(rel * rel + 1e-4)
        d = w * rel / root / y / len(y)
        grad = (np.where(in_step[:, None], x_step, x_bwd) * d[:, None]).sum(axis=0)
        return float(np.mean(w * root)), grad

    with one_blas_thread():
        init = np.array(layout.init) * scale
        bounds = [(v, v) if name in layout.fixed else (0.0, None)
                  for name, v in zip(layout.names, init, strict=True)]
        res = minimize(loss, init, jac=True, method="L-BFGS-B", bounds=bounds,
                       options={"maxiter": 300, "ftol": 1e-10})
    return res.x / scale


def phase_parts(coef: np.ndarray, rows: Sequence[dict[str, float]],
                layout: Layout) -> np.ndarray:
    """``[state, activations]`` (MiB) of the larger fitted phase of every row."""
    terms = _terms(rows, layout)
    x_step, x_bwd = _designs(terms, layout)
    is_act = np.array([n in layout.act for n in layout.names])
    step_act, bwd_act = x_step[:, is_act] @ coef[is_act], x_bwd[:, is_act] @ coef[is_act]
    step, bwd = x_step @ coef, x_bwd @ coef
    in_step = step >= bwd
    act = np.where(in_step, step_act, bwd_act)
    state = np.where(in_step, step, bwd) - act
    state = np.maximum(state, 1.0 - act)  # at least 1 MiB in all
    return np.column_stack([state, act])


def fit_level(level: str, rows: Sequence[dict[str, float]], y_mib: np.ndarray,
              groups: Sequence[str] | None = None) -> np.ndarray:
    return fit_phases(rows, y_mib, LAYOUTS[level], groups)


def parts_level(level: str, coef: np.ndarray, rows: Sequence[dict[str, float]]) -> np.ndarray:
    return phase_parts(coef, rows, LAYOUTS[level])


def lofo_parts(
    rows: Sequence[dict[str, float]], y_mib: np.ndarray, groups: Sequence[str],
    eval_rows: Sequence[dict[str, float]], eval_groups: Sequence[str],
    level: str = "described",
) -> np.ndarray:
    """``[state, activations]`` of each of ``eval_rows`` by a fit on ``rows`` without the
    eval row's group (NaN where nothing else is left to fit on)."""
    groups_arr, eval_arr = np.asarray(groups), np.asarray(eval_groups)
    out = np.full((len(eval_rows), 2), np.nan)
    for g in sorted(set(eval_groups)):
        train, test = groups_arr != g, eval_arr == g
        if not train.any():
            continue
        coef = fit_level(level, [r for r, t in zip(rows, train, strict=True) if t],
                         y_mib[train], list(groups_arr[train]))
        out[test] = parts_level(level, coef,
                                [r for r, t in zip(eval_rows, test, strict=True) if t])
    return out


def fit_rows(specs: Sequence[schema.ModelSpec],
             level: str) -> tuple[list[dict[str, float]], np.ndarray]:
    """The rows a ``level`` fit learns from and, for each, the index of its spec: the
    described rows as they are; at the job level every spec once per :data:`JOB_FIT_VIEWS`."""
    if level != "job":
        return level_rows(specs, level), np.arange(len(specs))
    rows: list[dict[str, float]] = []
    for view in JOB_FIT_VIEWS:
        rows += level_rows(specs, level, view)
    return rows, np.tile(np.arange(len(specs)), len(JOB_FIT_VIEWS))


def level_rows(specs: Sequence[schema.ModelSpec], level: str,
               optional: bool | tuple[str, ...] = False) -> list[dict[str, float]]:
    """Derived features of ``specs`` as ``level`` sees them (``job``: the job fields, with
    the optional ones when asked)."""
    if level == "job":
        specs = [job_view(s, optional) for s in specs]
    return [features.derive(s) for s in specs]
