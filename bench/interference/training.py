"""Fit, export and score the pairwise interference model (needs lightgbm and pandas).

``train`` builds Gavel's pair table, holds out 20 % of the unordered pairs (both directions of a
pair stay together), estimates the jobs' profiles from the training pairs only, fits gradient-
boosted trees on the profile features and exports them in the numpy-only format of
``extender.interference.pairmodel``. The held-out score is computed with that exported model,
the one the extender loads. Cross-validation repeats the whole procedure per fold: folds of
unordered pairs (pairs never measured, jobs known) and folds of family pairs (e.g. no
Recommendation x ResNet-50 pair of any batch size in training).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from bench.interference import gavel
from extender.interference.pairmodel import (
    FEATURES,
    FORMAT,
    PairModel,
    derive,
    flatten_lightgbm,
    tree_depth,
)

PARAMS = {
    "objective": "regression", "learning_rate": 0.05, "num_leaves": 15, "min_data_in_leaf": 10,
    "feature_fraction": 0.9, "bagging_fraction": 0.8, "bagging_freq": 1, "lambda_l2": 1.0,
    "verbose": -1, "seed": 0, "num_threads": 2, "deterministic": True, "force_row_wise": True,
}
NUM_ROUNDS = 300
REQUIRED = gavel.COLUMNS


UTIL_COLUMNS = ("a_gpu_util", "a_mem_util", "b_gpu_util", "b_mem_util")
MIB_COLUMNS = ("a_mem_mib", "b_mem_mib")
NEEDED = ("a_gpu_util", "b_gpu_util", "a_speed")  # may not be empty; the others may (unknown)
MAX_SPEED = 2.0  # a co-runner never doubles a job's throughput: above this it is not a ratio


def _rows(mask: pd.Series) -> str:
    lines = [str(i + 2) for i in np.flatnonzero(mask.to_numpy())]  # header is line 1
    return ", ".join(lines[:5]) + (f" (+{len(lines) - 5} more)" if len(lines) > 5 else "")


def read_pairs(path: str | Path) -> pd.DataFrame:
    """A pair CSV with the columns ``REQUIRED`` (others are ignored): utilisations in % as
    nvidia-smi / DCGM report them measured solo, memory in MiB (either may be empty =
    unknown), ``a_speed`` = A's throughput next to B / A's solo throughput. Anything else
    raises ValueError naming the file, the column and the CSV lines."""
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a readable CSV ({str(exc).splitlines()[0]})") from None
    df.columns = [str(c).strip() for c in df.columns]
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)} (need "
                         f"{', '.join(REQUIRED)})")
    out = pd.DataFrame(index=df.index)
    for c in REQUIRED:
        text = df[c].astype(str).str.strip()
        empty = text.isin(["", "nan", "NaN", "NA"])
        value = pd.to_numeric(text.where(~empty), errors="coerce")
        bad = value.isna() & ~empty
        if bad.any():
            raise ValueError(f"{path}: column {c} is not a number on line(s) {_rows(bad)}")
        if c in NEEDED and empty.any():
            raise ValueError(f"{path}: column {c} is empty on line(s) {_rows(empty)}")
        out[c] = value.astype(float)
    for c in UTIL_COLUMNS:
        bad = ~out[c].between(0, 100) & out[c].notna()
        if bad.any():
            raise ValueError(f"{path}: {c} must be a percentage in 0..100, not on line(s) "
                             f"{_rows(bad)}")
    for c in MIB_COLUMNS:
        bad = out[c] < 0
        if bad.any():
            raise ValueError(f"{path}: {c} must be >= 0 MiB, not on line(s) {_rows(bad)}")
    bad = ~((out["a_speed"] > 0) & (out["a_speed"] <= MAX_SPEED))
    if bad.any():
        raise ValueError(f"{path}: a_speed (A's throughput next to B / alone) must be in "
                         f"(0, {MAX_SPEED:g}], not on line(s) {_rows(bad)}")
    utils = out[["a_gpu_util", "b_gpu_util"]].to_numpy()
    if len(out) and np.nanmax(utils) <= 1.0:
        raise ValueError(f"{path}: every GPU utilisation is <= 1: give them in % (0..100), "
                         "as nvidia-smi reports them, not as fractions")
    if len(out) < 2 or out["a_speed"].nunique() < 2:
        raise ValueError(f"{path}: R2 needs at least 2 rows with different a_speed "
                         f"({len(out)} row(s))")
    return out.reset_index(drop=True)


def profiles_of(df: pd.DataFrame, side: str) -> np.ndarray:
    return df[[f"{side}_gpu_util", f"{side}_mem_util", f"{side}_mem_mib"]].to_numpy(float)


def fit(table: pd.DataFrame, rounds: int = NUM_ROUNDS) -> dict:
    import lightgbm as lgb

    x = derive(profiles_of(table, "a"), profiles_of(table, "b"))
    booster = lgb.train(PARAMS, lgb.Dataset(x, table["a_speed"].to_numpy(float),
                                            feature_name=list(FEATURES)), rounds)
    trees = flatten_lightgbm(booster.dump_model())
    return {"format": FORMAT, "features": list(FEATURES), "rows": int(len(table)),
            "depth": tree_depth(trees), "trees": trees}


def score(y: np.ndarray, pred: np.ndarray) -> dict:
    y = np.asarray(y, float)
    pred = np.asarray(pred, float)
    ss = float(((y - y.mean()) ** 2).sum())
    return {"n": int(len(y)), "r2": 1.0 - float(((y - pred) ** 2).sum()) / ss if ss else 0.0,
            "mae": float(np.abs(y - pred).mean())}


def evaluate(model: PairModel, table: pd.DataFrame) -> dict:
    pred = model.predict(profiles_of(table, "a"), profiles_of(table, "b"))
    return score(table["a_speed"].to_numpy(float), pred)


def cross_validate(pairs: pd.DataFrame, group: str, folds: int = 5, seed: int = 0) -> dict:
    keys = np.array(sorted(pairs[group].unique()))
    order = np.random.default_rng(seed).permutation(len(keys))
    fold_of = {k: i % folds for i, k in zip(range(len(keys)), keys[order], strict=True)}
    fold = pairs[group].map(fold_of).to_numpy()
    pred = np.zeros(len(pairs))
    for i in range(folds):
        train = pairs[fold != i]
        prof = gavel.profiles(train)
        model = PairModel.from_json(fit(gavel.pair_table(train, prof)))
        test = gavel.pair_table(pairs[fold == i], prof)
        pred[fold == i] = model.predict(profiles_of(test, "a"), profiles_of(test, "b"))
    return score(pairs["a_speed"].to_numpy(float), pred)


def train(out: Path, seed: int = 0, heldout: float = 0.2, cv: bool = True) -> dict:
    """Fit on Gavel, write model + train/held-out tables under ``out``; returns the report."""
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    pairs = gavel.measured_pairs()
    held = gavel.split_pairs(pairs, heldout, seed)
    prof = gavel.profiles(pairs[~held])
    train_table = gavel.pair_table(pairs[~held], prof)
    test_table = gavel.pair_table(pairs[held], prof)
    doc = fit(train_table)
    model = PairModel.from_json(doc)
    report = {
        "data": "Gavel simulation_throughputs.json (K80, P100, V100), single-GPU pairs",
        "pairs": int(len(pairs)), "train_rows": int(len(train_table)),
        "heldout_rows": int(len(test_table)), "seed": seed,
        "train": evaluate(model, train_table), "heldout": evaluate(model, test_table),
    }
    if cv:
        report["cv_unseen_pairs"] = cross_validate(pairs, "pair", seed=seed)
        report["cv_unseen_family_pairs"] = cross_validate(pairs, "family_pair", seed=seed)
    doc["trained"] = {k: v for k, v in report.items() if k != "data"}
    (out / "pair_model.json").write_text(json.dumps(doc, separators=(",", ":")))
    train_table.to_csv(out / "gavel_pairs_train.csv", index=False)
    test_table.to_csv(out / "gavel_pairs_heldout.csv", index=False)
    report["seconds"] = round(time.perf_counter() - t0, 1)
    (out / "report.json").write_text(json.dumps(report, indent=1))
    return report
