"""Leave-one-family-out evaluation of both models, in three tables.

Memory (CPU-measured label): for each family F, fit OLS on the other families, calibrate the
margin by an inner leave-one-family-out on those families only, predict F. Reported per family
and pooled: R² and MAPE of the raw OLS estimate, and the largest under-estimate
``max((y - ŷ)/y)`` both raw and after the margin.

Memory as deployed on a measured GPU: the whole ``gpu_mem_mib`` (OLS fitted without F, times
the GPU model's scale plus its offset, both calibrated on the other families' GPU rows only)
against the process memory NVML measured for F's configs. This is the number that matters for
out-of-memory: how many jobs would be under-reserved, by how much, and what the reservations
cost in over-provisioning.

Compute: LightGBM fitted on the other families; R², MAE (milli-GPU) on F, on GPU-measured SM
activity when GPU rows exist, else on the CPU FLOP-roofline proxy (and then said so).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from predictor import dataset, features, memory_model, training
from predictor.compute_model import LABEL_GPU, LABEL_PROXY, ComputeModel, labels

GOALS = {"mem_r2": 0.95, "mem_mape": 0.05, "mem_under": 0.10, "cmp_r2": 0.90}


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
    mem_under: float  # after the margin
    margin: float


@dataclass
class DeviceResult:
    family: str
    n: int
    under_share: float  # share of jobs reserved less than they used
    under_max: float  # largest (used - reserved) / used
    over_mean: float  # mean (reserved - used) / used


@dataclass
class ComputeResult:
    family: str
    n: int
    r2: float
    mae: float


@dataclass
class Evaluation:
    memory: list[MemoryResult]
    device: dict[str, list[DeviceResult]] = field(default_factory=dict)  # per GPU model
    compute: list[ComputeResult] = field(default_factory=list)
    compute_label: str = LABEL_PROXY


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


def device_memory_lofo(df, grp):  # noqa: ANN001, ANN201
    """(reserved, used, family) for one GPU model's rows ``grp``: each family's reservation
    comes from an OLS and a device calibration that never saw that family."""
    rows = [features.derive(s) for s in dataset.specs(df)]
    y, fam = training.memory_target_mib(df), df["family"].to_numpy()
    g_rows = [features.derive(s) for s in dataset.specs(grp)]
    g_fam = grp["family"].to_numpy()
    used = training.used_mib(grp)
    reserved = np.empty(len(used))
    for f in sorted(set(g_fam)):
        train, test, others = fam != f, g_fam == f, g_fam != f
        tr_rows = [r for r, t in zip(rows, train, strict=True) if t]
        coef = memory_model.fit_coef(tr_rows, y[train])
        scale, offset = memory_model.calibrate_device(
            tr_rows, y[train], list(fam[train]),
            [r for r, t in zip(g_rows, others, strict=True) if t], list(g_fam[others]),
            used[others])
        raw = memory_model.raw_predict(coef, [r for r, t in zip(g_rows, test, strict=True) if t])
        reserved[test] = np.ceil(raw * scale + offset)
    return reserved, used, g_fam


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
    return DeviceResult(name, len(used), float(np.mean(rel > 0)), float(max(0.0, rel.max())),
                        float(np.mean((reserved - used) / used)))


def evaluate(csv_path: Path = dataset.DEFAULT_CSV,
             gpu_csv: Path | None = dataset.DEFAULT_GPU_CSV) -> Evaluation:
    df, gdf = dataset.load_datasets(csv_path, gpu_csv)
    mp, mm, margins, my, mf = memory_lofo(df)
    out = Evaluation(memory=[
        MemoryResult(f, int(a.sum()), r2(my[a], mp[a]), mape(my[a], mp[a]),
                     max_under(my[a], mp[a]), max_under(my[a], mm[a]), margins[f])
        for f in sorted(set(mf)) for a in [mf == f]
    ])
    out.memory.append(MemoryResult("overall", len(my), r2(my, mp), mape(my, mp),
                                   max_under(my, mp), max_under(my, mm), float("nan")))
    gpu_labelled = dataset.gpu_labelled(gdf)
    if gpu_labelled:
        for name, grp in training.used_rows(gdf).groupby("gpu_model"):
            if len(grp) < memory_model.DEVICE_MIN_ROWS:
                continue
            reserved, used, g_fam = device_memory_lofo(df, grp)
            out.device[str(name)] = [
                _device_result(f, reserved[g_fam == f], used[g_fam == f])
                for f in sorted(set(g_fam))
            ] + [_device_result("overall", reserved, used)]
        out.compute_label = LABEL_GPU
    cp, cy, cf = compute_lofo(gdf if gpu_labelled else df)
    out.compute = [ComputeResult(f, int(b.sum()), r2(cy[b], cp[b]),
                                 float(np.mean(np.abs(cy[b] - cp[b]))))
                   for f in sorted(set(cf)) for b in [cf == f]]
    out.compute.append(ComputeResult("overall", len(cy), r2(cy, cp),
                                     float(np.mean(np.abs(cy - cp)))))
    return out


def format_table(ev: Evaluation) -> str:
    g = GOALS
    head = (f"{'held-out family':16s} {'n':>4s} {'mem R2':>7s} {'MAPE':>7s} {'under(raw)':>10s} "
            f"{'under(+margin)':>14s} {'margin':>7s}")
    lines = ["Memory: training-state peak measured on CPU (leave one family out)", head,
             "-" * len(head)]
    for r in ev.memory:
        lines.append(
            f"{r.family:16s} {r.n:4d} {r.mem_r2:7.3f} {100 * r.mem_mape:6.1f}% "
            f"{100 * r.mem_under_raw:9.1f}% {100 * r.mem_under:13.1f}% {r.margin:7.3f}")
    lines.append(
        f"goals: mem R2 >= {g['mem_r2']}, MAPE <= {100 * g['mem_mape']:.0f}%, largest "
        f"under-estimate <= {100 * g['mem_under']:.0f}% (R2/MAPE of the raw OLS estimate)")
    for gpu_model, results in ev.device.items():
        head = (f"{'held-out family':16s} {'n':>4s} {'under-reserved':>14s} "
                f"{'largest under':>13s} {'mean over':>9s}")
        lines += ["", f"Memory as reserved (gpu_mem_mib) vs NVML-measured process memory on "
                  f"{gpu_model}", head, "-" * len(head)]
        lines += [f"{r.family:16s} {r.n:4d} {100 * r.under_share:13.1f}% "
                  f"{100 * r.under_max:12.1f}% {100 * r.over_mean:8.1f}%" for r in results]
    label = ("SM activity measured with NVML on the GPU (milli-GPU = 10 x %)"
             if ev.compute_label.startswith("gpu") else
             "CPU FLOP-roofline PROXY (no GPU-measured rows; not GPU utilisation)")
    head = f"{'held-out family':16s} {'n':>4s} {'cmp R2':>7s} {'cmp MAE':>8s}"
    lines += ["", f"Compute: {label}", head, "-" * len(head)]
    lines += [f"{r.family:16s} {r.n:4d} {r.r2:7.3f} {r.mae:8.1f}" for r in ev.compute]
    lines.append(f"goal: compute R2 >= {g['cmp_r2']} on GPU-measured labels")
    return "\n".join(lines)
