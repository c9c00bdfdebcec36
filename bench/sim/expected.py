"""The FGD authors' cached results (``bench/data/fgd-expected``, Apache-2.0): per workload,
policy and seed, allocation / fragmentation curves over arrived workload 0..130 %."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

EXPECTED = Path(__file__).resolve().parent.parent / "data" / "fgd-expected"
THEIRS = {
    "random-fit": "01-Random",
    "dot-product": "02-DotProd",
    "gpu-clustering": "03-GpuClustering",
    "gpu-packing": "04-GpuPacking",
    "best-fit": "05-BestFit",
    "fgd": "06-FGD",
}
BASELINES = tuple(THEIRS)
FILES = {"alloc": "analysis_allo_discrete.csv", "frag": "analysis_frag_discrete.csv",
         "frag_rate": "analysis_frag_ratio_discrete.csv"}


@lru_cache(maxsize=3)
def table(metric: str = "alloc") -> pd.DataFrame:
    df = pd.read_csv(EXPECTED / FILES[metric])
    df["workload"] = df["workload"].str.removeprefix("openb_pod_list_")
    return df


def curves(workload: str, policy: str, seeds: list[int] | None = None,
           metric: str = "alloc") -> np.ndarray | None:
    """(seeds, 131) array of the authors' values, or None when they have no such run."""
    if policy not in THEIRS:
        return None
    df = table(metric)
    sel = df[(df["workload"] == workload) & (df["sc_policy"] == THEIRS[policy])]
    if seeds is not None:
        sel = sel[sel["seed"].isin(seeds)]
    if sel.empty:
        return None
    return sel[[str(i) for i in range(131)]].to_numpy(dtype=np.float64)
