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

Prediction needs numpy only; fitting needs scipy.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

from predictor import features, gpus, schema

RESERVE_ALPHA = 0.02  # target share of a held-out family's rows under-reserved
FORMAT = "sparse-predictor/memory-phases/10"
# loaded when their terms match; format 7 has no replayed calibration, formats 8 and 9 one
# of another meaning (8: scales of state, activations and slack; 9: a fitted offset, times
# the margin), which is dropped
OLD_FORMATS = ("sparse-predictor/memory-phases/7", "sparse-predictor/memory-phases/8",
               "sparse-predictor/memory-phases/9")
DEVICE_MIN_ROWS = 20  # fewer measured rows than this: the CPU calibration and the context


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


def _one_blas_thread() -> contextlib.AbstractContextManager:
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

    with _one_blas_thread():
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


def predict_phases(coef: np.ndarray, rows: Sequence[dict[str, float]],
                   layout: Layout) -> np.ndarray:
    return phase_parts(coef, rows, layout).sum(axis=1)


def fit_level(level: str, rows: Sequence[dict[str, float]], y_mib: np.ndarray,
              groups: Sequence[str] | None = None) -> np.ndarray:
    return fit_phases(rows, y_mib, LAYOUTS[level], groups)


def parts_level(level: str, coef: np.ndarray, rows: Sequence[dict[str, float]]) -> np.ndarray:
    return phase_parts(coef, rows, LAYOUTS[level])


def predict_level(level: str, coef: np.ndarray, rows: Sequence[dict[str, float]]) -> np.ndarray:
    return predict_phases(coef, rows, LAYOUTS[level])


FIT = {lv: (lambda rows, y, lv=lv: fit_level(lv, rows, y)) for lv in LEVELS}
PREDICT = {lv: (lambda coef, rows, lv=lv: predict_level(lv, coef, rows)) for lv in LEVELS}


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


def lofo_raw(rows: Sequence[dict[str, float]], y_mib: np.ndarray, groups: Sequence[str],
             eval_rows: Sequence[dict[str, float]], eval_groups: Sequence[str],
             level: str = "described") -> np.ndarray:
    return lofo_parts(rows, y_mib, groups, eval_rows, eval_groups, level).sum(axis=1)


def reserve_quantile(n_units: int, alpha: float = RESERVE_ALPHA) -> float:
    """The split-conformal level for ``n_units`` exchangeable calibration units (families):
    ``(1 - alpha)(1 + 1/n)``, capped at 1. Below ``1/alpha - 1`` units (49 for 2 %) it is 1:
    no quantile short of covering every calibration family's held-out rows is honest about a
    family nobody has seen."""
    if n_units <= 0:
        return 1.0
    return min(1.0, (1.0 - alpha) * (1.0 + 1.0 / n_units))


def conformal_count(n_units: int, alpha: float = RESERVE_ALPHA) -> int:
    """How many of ``n_units`` calibration scores, smallest first, the conformal level covers
    (``ceil(q n)`` of :func:`reserve_quantile`; at least 1, at most all)."""
    return min(n_units, max(1, math.ceil(reserve_quantile(n_units, alpha) * n_units)))


def family_weights(groups: np.ndarray | None, n: int) -> np.ndarray:
    """Row weights summing to 1, every family weighing the same (uniform without families),
    so that one family with many configurations does not buy the others' safety."""
    if groups is None:
        return np.full(n, 1.0 / max(n, 1))
    _, inv, counts = np.unique(groups, return_inverse=True, return_counts=True)
    return 1.0 / (len(counts) * counts[inv])


def fit_reserve(parts: np.ndarray, target_mib: np.ndarray, q: float | None = None,
                offset: float | None = None, groups: Sequence[str] | None = None,
                ) -> tuple[float, float, float]:
    """``(s_state, s_act, offset)`` with ``s_state x state + s_act x act + offset >= target``
    in a ``q`` share of rows: the linear quantile regression of the relative error (each
    row's constraint divided by its target, so small jobs count as much as large ones), rows
    weighted so that every family of ``groups`` counts the same, both scales >= 1 and the
    offset >= 0, or fixed when given. ``q`` defaults to :func:`reserve_quantile` of the
    number of families; at 1 every row is covered and the over-reservation minimised.
    ``parts`` should be held-out estimates, so the calibration covers the model's own error
    on a family it has not seen."""
    scales, off = fit_scales(parts, target_mib, q, offset, groups)
    return float(scales[0]), float(scales[1]), off


def fit_scales(parts: np.ndarray, target_mib: np.ndarray, q: float | None = None,
               offset: float | None = None, groups: Sequence[str] | None = None,
               ) -> tuple[np.ndarray, float]:
    """:func:`fit_reserve` for any number of parts (columns of ``parts``): one scale >= 1
    per part and the offset; returns ``(scales, offset)``."""
    from scipy.optimize import linprog

    parts = np.asarray(parts, dtype=float)
    t = np.asarray(target_mib, dtype=float)
    ok = np.isfinite(parts).all(axis=1) & (t > 0)
    parts, t = parts[ok], t[ok]
    n, n_parts = len(t), parts.shape[1]
    if n == 0:
        return np.ones(n_parts), 0.0 if offset is None else float(offset)
    fam = None if groups is None else np.asarray(groups)[ok]
    if q is None:
        q = reserve_quantile(n if fam is None else len(set(fam)))
    weight = family_weights(fam, n)
    fixed = offset is not None
    x = np.column_stack([parts, np.ones(n)]) / t[:, None]
    rhs = np.ones(n) - (float(offset) / t if fixed else 0.0)
    if fixed:
        x = x[:, :n_parts]
    k = x.shape[1]
    # variables: beta (k), under u (n), over v (n); x beta + u - v = rhs. At q = 1 no row
    # may be under (u = 0) and the weighted over-reservation is what is minimised.
    cover_all = q >= 1.0
    cost = np.concatenate([np.zeros(k), q * weight,
                           weight if cover_all else (1.0 - q) * weight])
    eq = np.hstack([x, np.eye(n), -np.eye(n)])
    under = (0.0, 0.0) if cover_all else (0.0, None)
    bounds = ([(1.0, None)] * n_parts + [(0.0, None)])[:k] + [under] * n + [(0.0, None)] * n
    with _one_blas_thread():
        res = linprog(cost, A_eq=eq, b_eq=rhs, bounds=bounds, method="highs")
    if not res.success:
        raise RuntimeError(f"reservation calibration failed: {res.message}")
    beta = res.x[:k]
    return beta[:n_parts], float(offset) if fixed else float(beta[n_parts])


def calibrate_reserve(rows: Sequence[dict[str, float]], y_mib: np.ndarray,
                      groups: Sequence[str], ctx_mib: float,
                      level: str = "described") -> tuple[float, float]:
    """``(s_state, s_act)`` for GPU models without measured rows: held-out parts of every
    row against its label plus ``ctx_mib``, the context fixed as the offset."""
    parts = lofo_parts(rows, y_mib, groups, rows, groups, level)
    s_state, s_act, _ = fit_reserve(parts, np.asarray(y_mib) + ctx_mib, offset=ctx_mib,
                                    groups=groups)
    return s_state, s_act


def calibrate_device(
    rows: Sequence[dict[str, float]], y_mib: np.ndarray, groups: Sequence[str],
    gpu_rows: Sequence[dict[str, float]], gpu_groups: Sequence[str], used_mib: np.ndarray,
    level: str = "described",
) -> tuple[float, float, float]:
    """:func:`fit_reserve` for one GPU model's measured rows, each estimated by a fit on
    ``rows`` without the GPU row's group, against the NVML-measured process memory."""
    parts = lofo_parts(rows, y_mib, groups, gpu_rows, gpu_groups, level)
    return fit_reserve(parts, used_mib, groups=gpu_groups)


def allowance_columns(parts: np.ndarray, rows: Sequence[dict[str, float]]) -> np.ndarray:
    """``[replayed reserved peak, conv layer, embedding backward, 1]`` (MiB) of described
    specs carrying the allocator replay: the fitted parts plus the replayed slack
    (``slack_mib``); a convolutional model's mean layer output (``conv_layer_mib``: batch x
    activations / layers), the size cuDNN's convolution workspaces follow; the uncoalesced
    lookups of tables with dense gradients (``gathered_mib``), which the CUDA embedding
    backward sorts and reduces into buffers of its own; and a column of ones, the segments
    such buffers add on any model. The last three are what a traced step cannot see: memory
    allocated inside GPU kernels, and the fragmentation it leaves between traced tensors."""
    parts = np.asarray(parts, dtype=float).reshape(len(rows), 2)
    slack = np.array([r["slack_mib"] for r in rows], dtype=float)
    conv = np.array([r["conv_layer_mib"] for r in rows], dtype=float)
    emb = np.array([r["gathered_mib"] * (1.0 - r["sparse"]) for r in rows], dtype=float)
    return np.column_stack([parts.sum(axis=1) + slack, conv, emb, np.ones(len(rows))])


def fit_allowance(cols: np.ndarray, used_mib: np.ndarray,
                  groups: Sequence[str] | None = None, base_mib: float = 0.0) -> Quad:
    """``(s_peak, w_conv, w_emb, w_seg)`` with ``base_mib + cols @ coef`` at least the
    measured memory on every calibration row (families as conformal units, fewer than 49 of
    them: cover all) and the family-weighted mean over-reservation in MiB the least.
    ``base_mib`` is what the data pins and is not fitted: the largest CUDA context measured
    and the BLAS workspaces (:func:`device_base_mib`). ``s_peak >= 1`` prices the
    fragmentation the replay misses, ``w_conv``, ``w_emb``, ``w_seg >= 0`` the kernels' own
    buffers. MiB rather than relative error: a MiB booked idle on a large job blocks a
    co-runner as much as one on a small job."""
    from scipy.optimize import linprog

    x = np.asarray(cols, dtype=float)
    t = np.asarray(used_mib, dtype=float) - base_mib
    ok = np.isfinite(x).all(axis=1) & np.isfinite(t)
    x, t = x[ok], t[ok]
    if len(t) == 0:
        return 1.0, 0.0, 0.0, 0.0
    weight = family_weights(None if groups is None else np.asarray(groups)[ok], len(t))
    with _one_blas_thread():
        res = linprog(weight @ x, A_ub=-x, b_ub=-t, method="highs",
                      bounds=[(1.0, None), (0.0, None), (0.0, None), (0.0, None)])
    if not res.success:
        raise RuntimeError(f"reservation calibration failed: {res.message}")
    s_peak, w_conv, w_emb, w_seg = (float(v) for v in res.x)
    return s_peak, w_conv, w_emb, w_seg


def device_base_mib(ctx_mib: np.ndarray, blas_mib: np.ndarray) -> float:
    """What a GPU's measured rows pin of every reservation on it: the largest CUDA context
    (``NVML - max_memory_reserved``: driver, kernel images, handles; it varies by some
    50 MiB between processes, and the largest is the safe one) plus the BLAS workspaces
    (``max_memory_allocated`` - the replayed allocated peak, median: cuBLAS and cuBLASLt
    keep one workspace each per handle, 32 MiB each on Hopper, allocated through the
    caching allocator as segments of their own)."""
    ctx = np.asarray(ctx_mib, dtype=float)
    blas = np.asarray(blas_mib, dtype=float)
    ctx, blas = ctx[np.isfinite(ctx)], blas[np.isfinite(blas)]
    return float(np.ceil((ctx.max() if len(ctx) else 0.0)
                         + max(0.0, float(np.median(blas)) if len(blas) else 0.0)))


def calibrate_replayed(
    rows: Sequence[dict[str, float]], y_mib: np.ndarray, groups: Sequence[str],
    gpu_rows: Sequence[dict[str, float]], gpu_groups: Sequence[str], used_mib: np.ndarray,
    base_mib: float = 0.0,
) -> Quint:
    """``(s_peak, w_conv, w_emb, w_seg, base_mib)`` for one GPU model's measured rows of
    described specs that carry the allocator replay: each row's parts estimated by a fit
    without its family, the allowance (:func:`fit_allowance`) with the margin of
    :func:`fit_margin` folded in; the pinned base is not scaled."""
    parts = lofo_parts(rows, y_mib, groups, gpu_rows, gpu_groups)
    cols = allowance_columns(parts, gpu_rows)
    quad = fit_allowance(cols, used_mib, gpu_groups, base_mib)
    held = held_out_allowance(cols, used_mib, gpu_groups, base_mib)
    margin = fit_margin(held, np.asarray(used_mib, dtype=float) - base_mib, gpu_groups)
    return (*with_margin(quad, margin), float(base_mib))


def with_margin(quad: Sequence[float], margin: Triple) -> Quad:
    """The allowance ``(s_peak, w_conv, w_emb, w_seg)`` with the margin ``(m_peak, m_rest,
    c_mib)`` of :func:`fit_margin` folded in."""
    s_peak, w_conv, w_emb, w_seg = quad
    m_peak, m_rest, c = margin
    return m_peak * s_peak, m_rest * w_conv, m_rest * w_emb, m_rest * w_seg + c


def held_out_allowance(cols: np.ndarray, used_mib: np.ndarray, groups: Sequence[str],
                       base_mib: float = 0.0) -> np.ndarray:
    """Each calibration row's allowance as a family it has not seen would get it: ``[s_peak x
    replayed peak, w_conv x conv + w_emb x lookups + w_seg]`` of :func:`fit_allowance`
    fitted on the other calibration families (MiB). A family that alone exercises a term
    (the only convolutional family left, say) is scored by a fit that cannot price that
    term at all: its score is pessimistic, and kept. Leaving such families out was tried:
    the other convolutional family was then priced from one family's workspaces alone and
    one of its rows fell under (ResNet, 0.8 %)."""
    x = np.asarray(cols, dtype=float)
    t = np.asarray(used_mib, dtype=float) - base_mib
    g = np.asarray(groups)
    out = np.full((len(t), 2), np.nan)
    ok = np.isfinite(x).all(axis=1) & np.isfinite(t)
    fams = sorted(set(g[ok]))
    if len(fams) < 2:
        return out
    for fam in fams:
        held, rest = ok & (g == fam), ok & (g != fam)
        priced = x[held] * np.array(fit_allowance(x[rest], t[rest], list(g[rest])))
        out[held] = np.column_stack([priced[:, 0], priced[:, 1:].sum(axis=1)])
    return out


def allowance_needs(cols: np.ndarray, used_mib: np.ndarray, groups: Sequence[str],
                    base_mib: float = 0.0) -> np.ndarray:
    """Each calibration row's *need*: the factor its held-out allowance
    (:func:`held_out_allowance`) must be multiplied by to cover it, ``(measured - base) /
    allowance`` (NaN where it cannot be computed)."""
    held = held_out_allowance(cols, used_mib, groups, base_mib)
    return (np.asarray(used_mib, dtype=float) - base_mib) / held.sum(axis=1)


def family_scores(needs: np.ndarray, groups: Sequence[str]) -> dict[str, float]:
    """A scored family's conformal score: the largest need among its rows, the smallest
    margin that leaves none of them under. (Covering all but 2 % of a family's rows is
    the same thing below 50 rows a family.)"""
    n, g = np.asarray(needs, dtype=float), np.asarray(groups)
    return {str(f): float(np.max(n[g == f])) for f in sorted(set(g))
            if np.isfinite(n[g == f]).any()}


def conformal_margin(scores: Sequence[float], alpha: float = RESERVE_ALPHA) -> float:
    """The split-conformal margin over K exchangeable family scores: the
    ``ceil(q K)``-th smallest, ``q = (1 - alpha)(1 + 1/K)`` (:func:`reserve_quantile`);
    at least 1. Below 49 families that is the largest score."""
    s = np.sort(np.asarray([v for v in scores if math.isfinite(v)], dtype=float))
    if len(s) == 0:
        return 1.0
    k = conformal_count(len(s), alpha)
    return max(1.0, float(s[k - 1]))


def allowance_margin(cols: np.ndarray, used_mib: np.ndarray, groups: Sequence[str],
                     base_mib: float = 0.0, alpha: float = RESERVE_ALPHA) -> float:
    """One relative margin (>= 1) on the whole allowance of :func:`fit_allowance`: the
    split-conformal quantile (:func:`conformal_margin`) of the calibration families' scores
    (:func:`family_scores` of :func:`allowance_needs`). Families, not rows, are the
    exchangeable units: a new architecture brings all its rows' errors at once (its
    kernels buffer more per traced MiB on every row), so a row-level quantile would let
    one family fall under wholesale. Shown next to :func:`fit_margin`, which ships."""
    needs = allowance_needs(cols, used_mib, groups, base_mib)
    if np.isinf(needs).any():
        raise RuntimeError("reservation margin: a calibration family is not covered")
    scores = family_scores(needs, groups)
    if len(set(np.asarray(groups))) >= 2 and not scores:
        raise RuntimeError("reservation margin: no calibration family could be scored")
    return conformal_margin(list(scores.values()), alpha)


def fit_margin(held: np.ndarray, target_mib: np.ndarray, groups: Sequence[str],
               alpha: float = RESERVE_ALPHA) -> Triple:
    """The margin ``(m_peak, m_rest, c_mib)`` booked on top of the allowance: ``m_peak x
    (s_peak x replayed peak) + m_rest x (the kernel-buffer terms) + c_mib``, the least
    family-weighted MiB (:func:`fit_allowance`'s objective) that covers the held-out
    allowance (:func:`held_out_allowance`) of every row of the calibration families inside
    the conformal level: with K scored families, the ``ceil(q K)`` with the smallest
    scalar scores (:func:`family_scores`), ``q`` of :func:`reserve_quantile` (all of them
    below 49 families). Two multipliers and a constant rather than one factor: what a new
    family adds is partly fragmentation, proportional to the replayed peak (about 1 % on
    the largest recommendation jobs), and partly kernel buffers of a fixed size (up to
    190 MiB on small BERT jobs), and one factor on the whole peak books the second kind
    on every large job."""
    from scipy.optimize import linprog

    a = np.asarray(held, dtype=float)
    t = np.asarray(target_mib, dtype=float)
    g = np.asarray(groups)
    ok = np.isfinite(a).all(axis=1) & np.isfinite(t)
    if not ok.any():
        return 1.0, 1.0, 0.0
    scores = family_scores(t / a.sum(axis=1), g)
    keep = sorted(scores, key=scores.__getitem__)
    k = conformal_count(len(keep), alpha)
    ok &= np.isin(g, keep[:k])
    x = np.column_stack([a[ok], np.ones(int(ok.sum()))])
    weight = family_weights(g[ok], int(ok.sum()))
    with _one_blas_thread():
        res = linprog(weight @ x, A_ub=-x, b_ub=-t[ok], method="highs",
                      bounds=[(1.0, None), (1.0, None), (0.0, None)])
    if not res.success:
        raise RuntimeError(f"reservation margin: {res.message}")
    m_peak, m_rest, c = (float(v) for v in res.x)
    return m_peak, m_rest, c


Triple = tuple[float, float, float]
Quad = tuple[float, float, float, float]
Quint = tuple[float, float, float, float, float]


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
        return int(math.ceil(parts[0] * s_state + parts[1] * s_act + offset))

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
