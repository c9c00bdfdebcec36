"""Leave-one-family-out evaluation of both models, at both input levels.

Memory, per input level (``described``: the annotation ``describe`` writes; ``job``: only the
job fields a ``RecommendDLJob`` carries, and for information ``job+optional``: the same plus
the optional ``sparseGradients`` and ``idsPerSample``): for each family F, fit on the other
families, calibrate the reservation by an inner leave-one-family-out on those families only,
predict F. Reported per family and pooled: R², MAPE and largest under-estimate
``max((y - ŷ)/y)`` of the raw training-state estimate ``train_mib`` against the CPU label, and
the reservation as booked on a GPU without measured rows (``s_state x state + s_act x
activations + context``) against the allocator peak plus the same context: share of jobs
under-reserved, largest under-reservation, median over-reservation.

Memory as deployed on a measured GPU: the whole ``gpu_mem_mib`` (fit without F, its two
scales and offset calibrated on the other families' GPU rows only) against the process memory
NVML measured for F's configs.

Compute: LightGBM fitted on the other families; R², MAE (milli-GPU) on F, on GPU-measured SM
activity when GPU rows exist, else on the CPU FLOP-roofline proxy (and then said so).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from predictor import (
    allowance,
    dataset,
    gpus,
    memory_model,
    memory_phases,
    reservation,
    schema,
    training,
)
from predictor.compute_model import LABEL_GPU, LABEL_PROXY, ComputeModel, labels

GOALS = {"described": {"r2": 0.98, "mape": 0.05, "under": 0.05},
         "job": {"r2": 0.90, "mape": 0.15},
         "reservation": {"under_share": 0.02, "over_median": 0.15}, "cmp_r2": 0.92}
Step = Callable[[str], None]


def r2(y: np.ndarray, p: np.ndarray) -> float:
    ss = float(((y - y.mean()) ** 2).sum())
    return 1.0 - float(((y - p) ** 2).sum()) / ss if ss > 0 else float("nan")


def mape(y: np.ndarray, p: np.ndarray) -> float:
    return float(np.mean(np.abs(y - p) / y))


def max_under(y: np.ndarray, p: np.ndarray) -> float:
    return float(max(0.0, np.max((y - p) / y)))


@dataclass
class MemoryResult:
    family: str
    n: int
    mem_r2: float
    mem_mape: float
    mem_under_raw: float
    res_under_share: float  # reservation (x margin + context) vs allocator peak + context
    res_under_max: float
    res_over_median: float
    margin: str  # the reservation's scales (state / activations) calibrated without F


@dataclass
class DeviceResult:
    family: str
    n: int
    under_share: float  # share of jobs reserved less than they used
    under_max: float  # largest (used - reserved) / used
    over_median: float  # median (reserved - used) / used
    over_mean: float


@dataclass
class AllocatorResult:
    family: str
    n: int
    mape: float  # predicted reserved peak vs torch.cuda.max_memory_reserved()
    under_share: float
    under_max: float
    mape_alloc: float  # the same for the allocated peak (max_memory_allocated)


@dataclass
class MarginFold:
    """One held-out family of the replayed reservation: the scalar margin the family rule
    chose, the calibration rows' held-out needs it chose from, the family's rows (allowance
    without margin, measured memory, pinned base) to price any other margin on, and what
    the shipped margin books for them."""

    family: str
    margin: float  # one factor on the whole allowance, the family-conformal scalar rule
    needs: np.ndarray
    allowance: np.ndarray
    used: np.ndarray
    base: float
    shipped: np.ndarray  # what the shipped margin (allowance.fit_margin) books

    def reserved(self, margin: float) -> np.ndarray:
        return np.ceil(margin * self.allowance + self.base)


@dataclass
class MarginRow:
    setting: str  # "m = 1.05", or a rule
    margins: str  # the margin per held-out family (min-max)
    under_share: float  # held-out rows under-reserved, pooled
    under_worst: float  # the worst family's share
    over_median: float


@dataclass
class ComputeResult:
    family: str
    n: int
    r2: float
    mae: float


@dataclass
class Evaluation:
    memory: dict[str, list[MemoryResult]]  # per input level
    device: dict[str, dict[str, list[DeviceResult]]] = field(default_factory=dict)  # level, GPU
    compute: list[ComputeResult] = field(default_factory=list)
    allocator: dict[str, list[AllocatorResult]] = field(default_factory=dict)  # per GPU
    # per GPU: the replayed reservation's margin against what it costs (held-out families)
    margin_tradeoff: dict[str, list[MarginRow]] = field(default_factory=dict)
    # per GPU: (measured reserved peak, replayed + constant, family), for the plot
    allocator_points: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(
        default_factory=dict)
    compute_label: str = LABEL_PROXY
    points: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)


# name shown -> (input level, the optional job fields it states)
VIEWS: dict[str, tuple[str, tuple[str, ...]]] = {
    "described": ("described", ()), "job": ("job", ()),
    "job+optional": ("job", schema.OPTIONAL_LAYOUT),
    "job+optional+leaf": ("job", schema.OPTIONAL_JOB_FIELDS)}


class HeldOutFits:
    """The fit (and the reservation scales calibrated by an inner leave-one-family-out) of
    one input level without one family, computed once for every view of that level: the
    job-level fit learns from all job-field views stacked, as the shipped model does
    (:func:`memory_phases.fit_rows`), never from the held-out family's rows."""

    def __init__(self, df, ctx: float) -> None:  # noqa: ANN001
        self.specs = dataset.specs(df)
        self.y = training.memory_target_mib(df)
        self.fam = df["family"].to_numpy()
        self.ctx = ctx
        self._rows: dict[str, tuple[list[dict[str, float]], np.ndarray]] = {}
        self._fits: dict[tuple[str, str, bool], tuple] = {}

    def rows(self, level: str) -> tuple[list[dict[str, float]], np.ndarray]:
        if level not in self._rows:
            self._rows[level] = memory_phases.fit_rows(self.specs, level)
        return self._rows[level]

    def fit(self, level: str, family: str, reserve: bool = True) -> tuple:
        """``(coef, s_state, s_act)`` without ``family`` (scales 1 unless ``reserve``)."""
        key = (level, family, reserve)
        if key not in self._fits:
            tr_rows, y_tr, fam_tr = self.fit_data(level, family)
            plain = (level, family, False)
            coef = (self._fits[plain][0] if plain in self._fits
                    else memory_phases.fit_level(level, tr_rows, y_tr, fam_tr))
            scales = (reservation.calibrate_reserve(tr_rows, y_tr, fam_tr, self.ctx, level)
                      if reserve else (1.0, 1.0))
            self._fits[key] = (coef, *scales)
        return self._fits[key]

    def fit_data(self, level: str, family: str) -> tuple[list[dict[str, float]], np.ndarray,
                                                         list[str]]:
        """The rows, labels and families a fit without ``family`` learns from."""
        rows, idx = self.rows(level)
        train = self.fam[idx] != family
        return ([r for r, t in zip(rows, train, strict=True) if t], self.y[idx][train],
                list(self.fam[idx][train]))


def memory_lofo(df, view: str = "described", ctx_mib: float | None = None,  # noqa: ANN001, ANN201
                fits: HeldOutFits | None = None):
    """(raw estimate, reservation, scales, label, family, context) for every CPU row."""
    level, optional = VIEWS[view]
    ctx = float(gpus.get(gpus.DEFAULT_GPU).ctx_mib if ctx_mib is None else ctx_mib)
    fits = fits or HeldOutFits(df, ctx)
    rows = training.level_rows(fits.specs, level, optional)
    y, fam = fits.y, fits.fam
    preds = np.empty(len(y))
    reserved = np.empty(len(y))
    scales: dict[str, str] = {}
    for f in sorted(set(fam)):
        test = fam == f
        te_rows = [r for r, t in zip(rows, test, strict=True) if t]
        coef, s_state, s_act = fits.fit(level, f)
        scales[f] = f"{s_state:.2f}/{s_act:.2f}"
        parts = memory_phases.parts_level(level, coef, te_rows)
        preds[test] = parts.sum(axis=1)
        # a described spec with the allocator replay books its slack on top (as predicted)
        slack = np.maximum(0.0, np.array([r["slack_mib"] for r in te_rows]))
        reserved[test] = np.ceil(parts[:, 0] * s_state + parts[:, 1] * s_act + slack + ctx)
    return preds, reserved, scales, y, fam, ctx


def device_memory_lofo(df, grp, view: str = "described",  # noqa: ANN001, ANN201
                       fits: HeldOutFits | None = None,
                       margins: list[MarginFold] | None = None):
    """(reserved, used, family) for one GPU model's rows ``grp``: each family's reservation
    comes from a fit and a device calibration that never saw that family. ``margins``
    collects, per held-out family, what the replayed reservation's margin was chosen from."""
    level, optional = VIEWS[view]
    fits = fits or HeldOutFits(df, float(gpus.get(gpus.DEFAULT_GPU).ctx_mib))
    g_rows = training.level_rows(dataset.specs(grp), level, optional)
    g_fam = grp["family"].to_numpy()
    used = training.used_mib(grp)
    reserved = np.empty(len(used))
    # described specs with the allocator replay: reserved peak + the GPU's constant + margin
    replayed = (training.replayed_mask(grp) if level == "described"
                else np.zeros(len(used), dtype=bool))
    for f in sorted(set(g_fam)):
        test, others = g_fam == f, g_fam != f
        coef = fits.fit(level, f, reserve=False)[0]
        tr_rows, y_tr, fam_tr = fits.fit_data(level, f)
        cal = others & replayed
        if (test & replayed).any() and cal.sum() >= memory_model.DEVICE_MIN_ROWS:
            # allowance.calibrate_replayed, kept apart so the margin's trade-off shows
            cal_rows = [r for r, t in zip(g_rows, cal, strict=True) if t]
            cal_cols = allowance.allowance_columns(
                memory_phases.lofo_parts(tr_rows, y_tr, fam_tr, cal_rows, list(g_fam[cal])),
                cal_rows)
            base = training.device_base(df, grp[cal])
            quad = np.array(allowance.fit_allowance(cal_cols, used[cal], list(g_fam[cal]),
                                                       base))
            held = allowance.held_out_allowance(cal_cols, used[cal], list(g_fam[cal]),
                                                   base)
            margin = allowance.fit_margin(held, used[cal] - base, list(g_fam[cal]))
            sel = test & replayed
            sel_rows = [r for r, t in zip(g_rows, sel, strict=True) if t]
            cols = allowance.allowance_columns(
                memory_phases.parts_level(level, coef, sel_rows), sel_rows)
            reserved[sel] = np.ceil(
                cols @ np.array(allowance.with_margin(quad, margin)) + base)
            if margins is not None:
                needs = (used[cal] - base) / held.sum(axis=1)
                scalar = allowance.conformal_margin(
                    list(allowance.family_scores(needs, list(g_fam[cal])).values()))
                margins.append(MarginFold(f, scalar, needs[np.isfinite(needs)], cols @ quad,
                                          used[sel], base, reserved[sel]))
            test = test & ~replayed
            if not test.any():
                continue
        s_state, s_act, offset = reservation.calibrate_device(
            tr_rows, y_tr, fam_tr,
            [r for r, t in zip(g_rows, others, strict=True) if t], list(g_fam[others]),
            used[others], level)
        parts = memory_phases.parts_level(
            level, coef, [r for r, t in zip(g_rows, test, strict=True) if t])
        reserved[test] = np.ceil(parts[:, 0] * s_state + parts[:, 1] * s_act + offset)
    return reserved, used, g_fam


def allocator_lofo(df, grp):  # noqa: ANN001, ANN201
    """The caching-allocator replay against one GPU model's measured peaks: the traced
    step's peak + the replayed slack (= the replayed reserved peak) + the GPU's workspace
    constant (the median gap, from the other families' rows), against
    ``max_memory_reserved``; the replayed allocated peak + the same kind of constant against
    ``max_memory_allocated``. Returns (results per family and overall, points)."""
    cpu = df.set_index("row_id")
    keep = grp["row_id"].map(lambda r: r in cpu.index and cpu.loc[r, "cuda_reserved_bytes"]
                             == cpu.loc[r, "cuda_reserved_bytes"]).to_numpy(dtype=bool)
    grp = grp[keep & grp["gpu_max_reserved_bytes"].notna().to_numpy()]
    if grp.empty:
        return [], None
    mib = 2.0**20
    rep_res = grp["row_id"].map(cpu["cuda_reserved_bytes"]).to_numpy(dtype=float) / mib
    rep_all = grp["row_id"].map(cpu["cuda_allocated_bytes"]).to_numpy(dtype=float) / mib
    res = grp["gpu_max_reserved_bytes"].to_numpy(dtype=float) / mib
    alloc = grp["gpu_max_allocated_bytes"].to_numpy(dtype=float) / mib
    fam = grp["family"].to_numpy()
    pred_res, pred_all = np.empty(len(res)), np.empty(len(res))
    for f in sorted(set(fam)):
        test, others = fam == f, fam != f
        pred_res[test] = rep_res[test] + np.median(res[others] - rep_res[others])
        pred_all[test] = rep_all[test] + np.median(alloc[others] - rep_all[others])

    def result(name: str, m: np.ndarray) -> AllocatorResult:
        rel = (res[m] - pred_res[m]) / res[m]
        return AllocatorResult(name, int(m.sum()), mape(res[m], pred_res[m]),
                               float(np.mean(rel > 0)), float(max(0.0, rel.max())),
                               mape(alloc[m], pred_all[m]))

    return ([result(f, fam == f) for f in sorted(set(fam))]
            + [result("overall", np.ones(len(fam), dtype=bool))]), (res, pred_res, fam)


MARGIN_GRID = (1.0, 1.02, 1.04, 1.06, 1.08, 1.10, 1.12, 1.15, 1.20, 1.30)
# row-level quantiles of the calibration needs, shown next to the shipped family rule
NEED_LEVELS = (0.90, 0.95, 0.98)


def _margin_row(setting: str, folds: list[MarginFold], margins: list[float],
                booked: list[np.ndarray] | None = None) -> MarginRow:
    booked = booked or [f.reserved(m) for f, m in zip(folds, margins, strict=True)]
    under = [b < f.used for f, b in zip(folds, booked, strict=True)]
    over = np.concatenate([(b - f.used) / f.used for f, b in zip(folds, booked, strict=True)])
    return MarginRow(setting, f"{min(margins):.3f}-{max(margins):.3f}",
                     float(np.mean(np.concatenate(under))), max(float(np.mean(u)) for u in under),
                     float(np.median(over)))


def margin_tradeoff(folds: list[MarginFold]) -> list[MarginRow]:
    """Rows under against median over on the held-out families as the margin varies: one
    factor for every fold (a grid), row-level quantiles of each fold's calibration needs
    (split-conformal over rows: ``(1 - a)(1 + 1/n)``), the family-conformal factor
    (:func:`allowance.allowance_margin`) and the shipped family-conformal margin
    (:func:`allowance.fit_margin`)."""
    rows = [_margin_row(f"m = {m:.2f}", folds, [m] * len(folds)) for m in MARGIN_GRID]
    for level in NEED_LEVELS:
        ms = [max(1.0, float(np.quantile(f.needs, min(1.0, level * (1 + 1 / len(f.needs))))))
              if len(f.needs) else 1.0 for f in folds]
        rows.append(_margin_row(f"rows q{100 * level:.0f}", folds, ms))
    rows.append(_margin_row("families, one factor", folds, [f.margin for f in folds]))
    # the shipped margin: two factors and a constant; its "per family" column is the
    # factor it amounts to on the held-out rows' whole allowance (median)
    eff = [float(np.median((f.shipped - f.base) / f.allowance)) for f in folds]
    rows.append(_margin_row("families (shipped)", folds, eff, [f.shipped for f in folds]))
    return rows


def compute_lofo(df) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # noqa: ANN001
    specs, y, fam_list = labels(df)
    fam = np.array(fam_list)
    preds = np.empty(len(y))
    for f in sorted(set(fam)):
        test = fam == f
        model = ComputeModel.fit([s for s, t in zip(specs, ~test, strict=True) if t], y[~test])
        preds[test] = model.predict_many([s for s, t in zip(specs, test, strict=True) if t])
    return preds, y, fam


def _device_result(name: str, reserved: np.ndarray, used: np.ndarray) -> DeviceResult:
    rel = (used - reserved) / used
    over = (reserved - used) / used
    return DeviceResult(name, len(used), float(np.mean(rel > 0)), float(max(0.0, rel.max())),
                        float(np.median(over)), float(np.mean(over)))


def _memory_result(name: str, y: np.ndarray, p: np.ndarray, reserved: np.ndarray, ctx: float,
                   margin: str) -> MemoryResult:
    truth = y + ctx
    over = (reserved - truth) / truth
    return MemoryResult(name, len(y), r2(y, p), mape(y, p), max_under(y, p),
                        float(np.mean(reserved < truth)), max_under(truth, reserved),
                        float(np.median(over)), margin)


def evaluate(csv_path: Path = dataset.DEFAULT_CSV,
             gpu_csv: Path | None = dataset.DEFAULT_GPU_CSV, compute: bool = True,
             step: Step = lambda _s: None, views: tuple[str, ...] = tuple(VIEWS)) -> Evaluation:
    df, gdf = dataset.load_datasets(csv_path, gpu_csv)
    out = Evaluation(memory={})
    fits = HeldOutFits(df, float(gpus.get(gpus.DEFAULT_GPU).ctx_mib))
    for level in views:
        step(f"memory, {level} level: leave one family out")
        p, res, margins, y, fam, ctx = memory_lofo(df, level, fits=fits)
        out.points[level] = (y, p, fam)
        out.memory[level] = [
            _memory_result(f, y[a], p[a], res[a], ctx, margins[f])
            for f in sorted(set(fam)) for a in [fam == f]
        ] + [_memory_result("overall", y, p, res, ctx, "")]
    gpu_labelled = dataset.gpu_labelled(gdf)
    if gpu_labelled:
        for name, grp in gdf[gdf["label_source"] == "gpu"].groupby("gpu_model"):
            rows, points = allocator_lofo(df, grp)
            if rows:
                out.allocator[str(name)] = rows
                out.allocator_points[str(name)] = points
        for level in views:
            for name, grp in training.used_rows(gdf).groupby("gpu_model"):
                if len(grp) < memory_model.DEVICE_MIN_ROWS:
                    continue
                step(f"reservation on {name}, {level} level")
                folds: list[MarginFold] = []
                reserved, used, g_fam = device_memory_lofo(df, grp, level, fits=fits,
                                                           margins=folds)
                if folds:
                    out.margin_tradeoff[str(name)] = margin_tradeoff(folds)
                out.device.setdefault(level, {})[str(name)] = [
                    _device_result(f, reserved[g_fam == f], used[g_fam == f])
                    for f in sorted(set(g_fam))
                ] + [_device_result("overall", reserved, used)]
        out.compute_label = LABEL_GPU
    if compute:
        step("compute: leave one family out (LightGBM)")
        cp, cy, cf = compute_lofo(gdf if gpu_labelled else df)
        out.compute = [ComputeResult(f, int(b.sum()), r2(cy[b], cp[b]),
                                     float(np.mean(np.abs(cy[b] - cp[b]))))
                       for f in sorted(set(cf)) for b in [cf == f]]
        out.compute.append(ComputeResult("overall", len(cy), r2(cy, cp),
                                         float(np.mean(np.abs(cy - cp)))))
    return out
