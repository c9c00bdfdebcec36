"""The reservation of described specs carrying the caching-allocator replay, on GPU models
with measured rows: the replayed peak plus an allowance for what the trace cannot see
(memory GPU kernels allocate inside one op, the fragmentation it leaves), above the base the
measured rows pin, times the margin a family it has not seen needs."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from predictor.memory_phases import family_weights, lofo_parts, one_blas_thread
from predictor.reservation import RESERVE_ALPHA, conformal_count

Triple = tuple[float, float, float]
Quad = tuple[float, float, float, float]
Quint = tuple[float, float, float, float, float]


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
    with one_blas_thread():
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
    with one_blas_thread():
        res = linprog(weight @ x, A_ub=-x, b_ub=-t[ok], method="highs",
                      bounds=[(1.0, None), (1.0, None), (0.0, None)])
    if not res.success:
        raise RuntimeError(f"reservation margin: {res.message}")
    m_peak, m_rest, c = (float(v) for v in res.x)
    return m_peak, m_rest, c
