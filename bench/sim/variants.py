"""Deterministic variants of the openb ``default`` pod list, made the way the upstream lists
derive from it (read from the shipped files, ``bench/data/openb``; upstream does not document
its generator):

    gpushareNN  the same 1,088 CPU-only pods and 7,064 GPU pods; the GPU pods are drawn from
                default's shares and default's whole-GPU pods (one or several GPUs, in their
                own proportion) so that shares make NN % of the GPU request
                (gpushare40 / 60 / 100 ship 4,001 / 5,233 / 7,064 shares; this gives
                3,987 / 5,259 / 7,064)
    multigpuNN  default plus multi-GPU pods drawn from default's own until they make NN % of
                the GPU request (multigpu20 / 30 / 50 ship +1,000 / +2,000 / +5,272 GPUs)
    gpuspecNN   default with a GPU-model list on NN % of its GPU pods (chosen at random);
                each list is drawn from the lists pods of the same shape (share, one GPU,
                several GPUs) carry in the shipped ``gpuspec33``, the production level
    cpuNNN      default's GPU pods, and CPU-only pods drawn from default's: as many as the
                shipped ``cpuNNN`` lists have, interpolated between them by NNN
                (cpu050 375, cpu100 789, cpu250 2,356)

Draws are with replacement and seeded (``seed``), so a name and a seed give the same list on
every machine. The pods are renamed ``openb-pod-NNNN`` in list order, as upstream does.
``summary`` gives the statistics to compare a variant with a shipped list.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from bench.sim.trace import DATA, load_pods

KINDS = ("gpushare", "multigpu", "gpuspec", "cpu")
# CPU-only pods in the upstream cpuNNN lists (data README), by NNN; default has 1,088
CPU_ONLY = {0: 0, 37: 272, 50: 375, 72: 544, 100: 789, 235: 2176, 250: 2356, 300: 3030}
SPEC_SOURCE = "gpuspec33"
MILLI = 1000


def shapes(pods: pd.DataFrame) -> pd.Series:
    """cpu (no GPU), share (one GPU, < 1000 milli), one (a whole GPU), multi (several)."""
    gpu = (pods["num_gpu"] > 0) & (pods["gpu_milli"] > 0)
    share = gpu & (pods["num_gpu"] == 1) & (pods["gpu_milli"] < MILLI)
    multi = gpu & (pods["num_gpu"] > 1)
    out = np.where(~gpu, "cpu", np.where(share, "share", np.where(multi, "multi", "one")))
    return pd.Series(out, index=pods.index)


def gpu_request(pods: pd.DataFrame) -> np.ndarray:
    """Requested GPUs per pod (num_gpu x gpu_milli / 1000)."""
    return (pods["num_gpu"] * pods["gpu_milli"]).to_numpy() / MILLI


def parse(name: str) -> tuple[str, int]:
    match = re.fullmatch(r"(gpushare|multigpu|gpuspec|cpu)(\d+)", name)
    if not match:
        raise ValueError(f"unknown variant {name!r}: gpushareNN, multigpuNN, gpuspecNN or cpuNNN")
    kind, level = match.group(1), int(match.group(2))
    if kind != "cpu" and not 0 <= level <= 100:
        raise ValueError(f"{name}: NN is a percentage, 0-100")
    if kind == "multigpu" and level >= 100:
        raise ValueError(f"{name}: multi-GPU pods cannot make all of the GPU request")
    return kind, level


def generate(name: str, seed: int = 0, base: pd.DataFrame | None = None,
             spec_source: pd.DataFrame | None = None) -> pd.DataFrame:
    """The variant ``name`` (e.g. ``gpushare80``) of ``base`` (default: the shipped default)."""
    kind, level = parse(name)
    base = load_pods(DATA / "openb_pod_list_default.csv") if base is None else base
    rng = np.random.default_rng(seed)
    if kind == "gpushare":
        out = _gpushare(base, level / 100.0, rng)
    elif kind == "multigpu":
        out = _multigpu(base, level / 100.0, rng)
    elif kind == "gpuspec":
        source = (load_pods(DATA / f"openb_pod_list_{SPEC_SOURCE}.csv")
                  if spec_source is None else spec_source)
        out = _gpuspec(base, level / 100.0, source, rng)
    else:
        out = _cpu(base, level, rng)
    out = out.reset_index(drop=True)
    out["name"] = [f"openb-pod-{i:04d}" for i in range(len(out))]
    return out


def _draw(pool: pd.DataFrame, count: int, rng: np.random.Generator) -> pd.DataFrame:
    if count <= 0 or pool.empty:
        return pool.iloc[:0]
    return pool.iloc[rng.integers(len(pool), size=count)]


def _gpushare(base: pd.DataFrame, fraction: float, rng: np.random.Generator) -> pd.DataFrame:
    kind = shapes(base)
    shares, whole = base[kind == "share"], base[kind.isin(["one", "multi"])]
    gpus = int((kind != "cpu").sum())
    mean_share = gpu_request(shares).mean()
    mean_whole = gpu_request(whole).mean() if len(whole) else 1.0
    # s shares and (gpus - s) whole pods with s * mean_share = fraction x the total request
    count = fraction * gpus * mean_whole / (mean_share * (1 - fraction) + fraction * mean_whole)
    count = min(gpus, int(round(count)))
    parts = [base[kind == "cpu"], _draw(shares, count, rng), _draw(whole, gpus - count, rng)]
    return _shuffled(pd.concat(parts), rng)


def _multigpu(base: pd.DataFrame, fraction: float, rng: np.random.Generator) -> pd.DataFrame:
    kind = shapes(base)
    multi = base[kind == "multi"]
    request = gpu_request(base)
    total, multi_total = request.sum(), request[(kind == "multi").to_numpy()].sum()
    pool = gpu_request(multi)
    extra = []
    while multi_total < fraction * total and len(pool):
        i = int(rng.integers(len(pool)))
        extra.append(i)
        total += pool[i]
        multi_total += pool[i]
    return pd.concat([base, multi.iloc[extra]])  # appended after default's pods, as upstream


def _gpuspec(base: pd.DataFrame, fraction: float, source: pd.DataFrame,
             rng: np.random.Generator) -> pd.DataFrame:
    out = base.copy()
    kind = shapes(out)
    gpu = np.flatnonzero((kind != "cpu").to_numpy())
    chosen = rng.choice(gpu, size=int(round(fraction * len(gpu))), replace=False)
    source_kind = shapes(source)
    specs = out["gpu_spec"].to_numpy(dtype=object).copy()
    for shape in ("share", "one", "multi"):
        pool = source["gpu_spec"][(source_kind == shape) & (source["gpu_spec"] != "")]
        pool = pool.to_numpy(dtype=object)
        if not len(pool):  # no list for this shape in the source: any shape's
            pool = source["gpu_spec"][source["gpu_spec"] != ""].to_numpy(dtype=object)
        mine = chosen[(kind.to_numpy()[chosen] == shape)]
        specs[mine] = pool[rng.integers(len(pool), size=len(mine))]
    out["gpu_spec"] = specs.astype(str)
    return out


def cpu_only_count(level: int) -> int:
    """CPU-only pods of ``cpuNNN``: the upstream counts, linear between their levels."""
    known = sorted(CPU_ONLY)
    return int(round(np.interp(level, known, [CPU_ONLY[k] for k in known],
                               right=CPU_ONLY[known[-1]] * level / known[-1])))


def _cpu(base: pd.DataFrame, level: int, rng: np.random.Generator) -> pd.DataFrame:
    kind = shapes(base)
    cpu_only = _draw(base[kind == "cpu"], cpu_only_count(level), rng)
    return _shuffled(pd.concat([base[kind != "cpu"], cpu_only]), rng)


def _shuffled(pods: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    return pods.iloc[rng.permutation(len(pods))]


def summary(pods: pd.DataFrame) -> dict[str, float]:
    """What a list is made of: pods per shape, GPU request and the share of it from shares and
    multi-GPU pods, mean share size, pods with a model list, mean CPU request."""
    kind = shapes(pods)
    request = gpu_request(pods)
    total = request.sum()
    share = (kind == "share").to_numpy()
    return {
        "pods": len(pods),
        "cpu_only": int((kind == "cpu").sum()),
        "shares": int(share.sum()),
        "one_gpu": int((kind == "one").sum()),
        "multi_gpu": int((kind == "multi").sum()),
        "gpu_request": round(float(total), 1),
        "share_of_request": round(float(request[share].sum() / total), 3) if total else 0.0,
        "multi_of_request": round(float(request[(kind == "multi").to_numpy()].sum() / total), 3)
        if total else 0.0,
        "mean_share_milli": round(float(pods["gpu_milli"][share].mean()), 1) if share.any()
        else 0.0,
        "with_model_list": int((pods["gpu_spec"] != "").sum()),
        "mean_cpu_milli": round(float(pods["cpu_milli"].mean()), 1),
    }


def write(name: str, folder: Path, seed: int = 0) -> Path:
    """The variant as a pod-list CSV ``openb_pod_list_gen-<name>.csv`` in ``folder`` (the
    name ``sparse-bench fgd -w PATH`` then reports is ``gen-<name>``)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"openb_pod_list_gen-{name}.csv"
    generate(name, seed).to_csv(path, index=False)
    return path
