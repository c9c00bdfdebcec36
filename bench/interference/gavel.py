"""Gavel's measured pairs (bench/data/gavel) as a pair table in the model's profile columns.

Gavel publishes throughputs only: steps/s of each job alone and next to each other job, on K80,
P100 and V100, and no utilisation. Each job's profile columns are therefore *estimated from the
pairs of the training split only* (a held-out pair never informs them), as Bubble-Up does with
a probe (Mars et al., MICRO '11):

* ``gpu_util`` = 100 (1 - exp(-pressure)), pressure = mean log-slowdown the job inflicts on its
  co-runners: the share of a co-runner's time it takes, in utilisation units;
* ``mem_util`` = 100 (1 - exp(-sensitivity)), sensitivity = mean log-slowdown it suffers: the
  contention it feels beyond GPU time (in Gavel mostly memory and input pipeline);
* ``mem_mib`` is unknown (NaN; the model treats it as missing).

A job is one (GPU, job variant); ``a_speed`` = A's co-located throughput / A's solo throughput,
clipped to 1 upstream. Pairs that ran out of memory (``[0, 0]``) and multi-GPU entries are left
out.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

DATA = Path(__file__).resolve().parent.parent / "data" / "gavel" / "simulation_throughputs.json"
GPUS = ("k80", "p100", "v100")
COLUMNS = ("a_gpu_util", "a_mem_util", "a_mem_mib", "b_gpu_util", "b_mem_util", "b_mem_mib",
           "a_speed")


def family(job: str) -> str:
    return re.sub(r" \(batch size \d+\)$", "", job)


def measured_pairs(path: Path = DATA) -> pd.DataFrame:
    """One row per ordered single-GPU pair: gpu, job_a, job_b, a_speed, pair (unordered key)."""
    doc = json.loads(Path(path).read_text())
    rows = []
    for gpu in GPUS:
        for key, entry in doc[gpu].items():
            a, scale = _parse_key(key)
            if scale != 1:
                continue
            solo = float(entry["null"])
            for other, value in entry.items():
                if other == "null":
                    continue
                b, scale_b = _parse_key(other)
                if scale_b != 1 or value == [0.0, 0.0] or solo <= 0:
                    continue
                rows.append((gpu, a, b, min(1.0, float(value[0]) / solo)))
    df = pd.DataFrame(rows, columns=["gpu", "job_a", "job_b", "a_speed"])
    df["pair"] = [f"{g}|" + "|".join(sorted((a, b)))
                  for g, a, b in zip(df["gpu"], df["job_a"], df["job_b"], strict=True)]
    df["family_pair"] = ["|".join(sorted((family(a), family(b))))
                         for a, b in zip(df["job_a"], df["job_b"], strict=True)]
    return df


def _parse_key(key: str) -> tuple[str, int]:
    m = re.fullmatch(r"\('(.+)', (\d+)\)", key.strip())
    if not m:
        raise ValueError(f"unexpected Gavel key {key!r}")
    return m.group(1), int(m.group(2))


def split_pairs(df: pd.DataFrame, heldout: float = 0.2, seed: int = 0,
                group: str = "pair") -> np.ndarray:
    """Boolean mask of held-out rows: whole unordered pairs (both directions) at random."""
    groups = np.array(sorted(df[group].unique()))
    rng = np.random.default_rng(seed)
    out = set(rng.choice(groups, size=max(1, round(heldout * len(groups))), replace=False))
    return df[group].isin(out).to_numpy()


def profiles(train: pd.DataFrame) -> pd.DataFrame:
    """Profile columns per (gpu, job) from training pairs (module docstring)."""
    y = np.log(1.0 / np.clip(train["a_speed"].to_numpy(), 0.02, 1.0))
    t = train.assign(y=y, ka=train["gpu"] + "|" + train["job_a"],
                     kb=train["gpu"] + "|" + train["job_b"])
    sens = t.groupby("ka")["y"].mean()
    pres = t.groupby("kb")["y"].mean()
    keys = sorted(set(sens.index) | set(pres.index))
    sens = sens.reindex(keys).fillna(sens.mean())
    pres = pres.reindex(keys).fillna(pres.mean())
    return pd.DataFrame({"gpu_util": 100.0 * (1.0 - np.exp(-pres.to_numpy())),
                         "mem_util": 100.0 * (1.0 - np.exp(-sens.to_numpy())),
                         "mem_mib": np.nan}, index=keys)


def pair_table(rows: pd.DataFrame, prof: pd.DataFrame) -> pd.DataFrame:
    """``rows`` in the model's columns, profiles looked up (unknown jobs get the mean)."""
    mean = prof.mean()
    ka = rows["gpu"] + "|" + rows["job_a"]
    kb = rows["gpu"] + "|" + rows["job_b"]
    out = pd.DataFrame(index=rows.index)
    for side, key in (("a", ka), ("b", kb)):
        p = prof.reindex(key.to_numpy())
        for col in ("gpu_util", "mem_util", "mem_mib"):
            values = p[col].to_numpy()
            if col != "mem_mib":
                values = np.where(np.isnan(values), mean[col], values)
            out[f"{side}_{col}"] = np.round(values, 3)
    out["a_speed"] = rows["a_speed"].round(5).to_numpy()
    for col in ("gpu", "job_a", "job_b"):
        out[col] = rows[col].to_numpy()
    return out.reset_index(drop=True)
