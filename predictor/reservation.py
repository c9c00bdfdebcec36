"""The reservation's scales: how much above the fitted ``[state, activations]`` a GPU
model's booking must be so that a family the fit has not seen stays covered. Families are
the conformal units (:func:`reserve_quantile`); the scales are a linear quantile regression
of the relative error (:func:`fit_scales`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from predictor.memory_phases import family_weights, lofo_parts, one_blas_thread

RESERVE_ALPHA = 0.02  # target share of a held-out family's rows under-reserved


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
    with one_blas_thread():
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
