"""Leave-one-family-out evaluation of both models.

Memory: for each family F, fit OLS on the other families, calibrate the margin by an inner
leave-one-family-out on those families only, predict F. Reported per family and pooled:
R² and MAPE of the raw OLS estimate, and the largest under-estimate ``max((y - ŷ)/y)`` both
raw and after the margin (the number that matters for OOM). The CUDA context constant is not
part of the evaluated quantity (it is not in the CPU label).

Compute: LightGBM fitted on the other families; R², MAE (milli-GPU) on F.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from predictor import dataset, features, memory_model
from predictor.compute_model import ComputeModel, labels

GOALS = {"mem_r2": 0.95, "mem_mape": 0.05, "mem_under": 0.10}


def r2(y: np.ndarray, p: np.ndarray) -> float:
    ss = float(((y - y.mean()) ** 2).sum())
    return 1.0 - float(((y - p) ** 2).sum()) / ss if ss > 0 else float("nan")


def mape(y: np.ndarray, p: np.ndarray) -> float:
    return float(np.mean(np.abs(y - p) / y))


def max_under(y: np.ndarray, p: np.ndarray) -> float:
    return float(max(0.0, np.max((y - p) / y)))


@dataclass
class FamilyResult:
    family: str
    n: int
    mem_r2: float
    mem_mape: float
    mem_under_raw: float
    mem_under: float  # after the margin
    margin: float
    comp_r2: float
    comp_mae: float


def memory_lofo(df):  # noqa: ANN001, ANN201
    specs = dataset.specs(df)
    rows = [features.derive(s) for s in specs]
    y = df["peak_bytes"].to_numpy(dtype=float) / 2**20
    fam = df["family"].to_numpy()
    preds = np.empty(len(y))
    with_margin = np.empty(len(y))
    margins: dict[str, float] = {}
    for f in sorted(set(fam)):
        test, train = fam == f, fam != f
        tr_rows = [r for r, t in zip(rows, train, strict=True) if t]
        te_rows = [r for r, t in zip(rows, test, strict=True) if t]
        coef = memory_model.fit_coef(tr_rows, y[train])
        ratios = memory_model.lofo_ratios(tr_rows, y[train], list(fam[train]))
        m = memory_model.calibrate_margin(ratios)
        margins[f] = m
        preds[test] = memory_model.raw_predict(coef, te_rows)
        with_margin[test] = preds[test] * m
    return preds, with_margin, margins, y, fam


def compute_lofo(df) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # noqa: ANN001
    specs, y, fam_list = labels(df)
    fam = np.array(fam_list)
    preds = np.empty(len(y))
    for f in sorted(set(fam)):
        test = fam == f
        model = ComputeModel.fit([s for s, t in zip(specs, ~test, strict=True) if t], y[~test])
        preds[test] = model.predict_many([s for s, t in zip(specs, test, strict=True) if t])
    return preds, y, fam


def evaluate(csv_path: Path) -> tuple[list[FamilyResult], FamilyResult]:
    df = dataset.load(csv_path)
    mp, mm, margins, my, mf = memory_lofo(df)
    cp, cy, cf = compute_lofo(df)
    out: list[FamilyResult] = []
    for f in sorted(set(mf)):
        a, b = mf == f, cf == f
        out.append(FamilyResult(
            f, int(a.sum()), r2(my[a], mp[a]), mape(my[a], mp[a]), max_under(my[a], mp[a]),
            max_under(my[a], mm[a]), margins[f], r2(cy[b], cp[b]),
            float(np.mean(np.abs(cy[b] - cp[b]))),
        ))
    overall = FamilyResult(
        "overall", len(my), r2(my, mp), mape(my, mp), max_under(my, mp), max_under(my, mm),
        float("nan"), r2(cy, cp), float(np.mean(np.abs(cy - cp))),
    )
    return out, overall


def format_table(results: list[FamilyResult], overall: FamilyResult) -> str:
    head = (f"{'held-out family':16s} {'n':>4s} {'mem R2':>7s} {'MAPE':>7s} {'under(raw)':>10s} "
            f"{'under(+margin)':>14s} {'margin':>7s} {'cmp R2':>7s} {'cmp MAE':>8s}")
    lines = [head, "-" * len(head)]
    for r in [*results, overall]:
        lines.append(
            f"{r.family:16s} {r.n:4d} {r.mem_r2:7.3f} {100 * r.mem_mape:6.1f}% "
            f"{100 * r.mem_under_raw:9.1f}% {100 * r.mem_under:13.1f}% {r.margin:7.3f} "
            f"{r.comp_r2:7.3f} {r.comp_mae:8.1f}"
        )
    g = GOALS
    lines.append(
        f"goals (held-out families): mem R2 >= {g['mem_r2']}, MAPE <= {100 * g['mem_mape']:.0f}%,"
        f" largest under-estimate <= {100 * g['mem_under']:.0f}%. R2/MAPE are of the raw OLS "
        "estimate; compute MAE in milli-GPU of the CPU FLOP-roofline proxy label."
    )
    return "\n".join(lines)
