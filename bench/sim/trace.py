"""Trace loaders (Alibaba cluster-trace-gpu-v2023 "openb") and pod demands built from them.

Every column is kept (``pandas.DataFrame``); missing optional columns (the ``multigpu*`` lists
have only the first five) are added empty. GPU memory of a share: the trace has none, so a
share of ``gpu_milli`` asks ``gpu_milli / 1000`` of the memory of the smallest GPU model it may
use. On that model memory and compute bind together, on larger ones compute binds first, so the
core's two-dimensional fit reproduces the FGD simulator's one-dimensional milli-GPU accounting.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from extender.demand import ContainerRequest, PodDemand
from extender.inventory import Gpu, Inventory, NodeGpus

DATA = Path(__file__).resolve().parent.parent / "data" / "openb"
NODE_LIST = DATA / "openb_node_list_gpu_node.csv"
WORKLOADS = (
    "default", "cpu050", "cpu100", "cpu250", "gpushare40", "gpushare60", "gpushare100",
    "gpuspec10", "gpuspec20", "gpuspec33", "multigpu20", "multigpu30", "multigpu50",
)
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos",
               "pod_phase", "creation_time", "deletion_time", "scheduled_time")
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")

# GPU memory per model (MiB). G1/G2/G3 are undisclosed; these are assumptions. With the
# proportional share memory above they never change a fit in the `fgd` experiment.
MODEL_MEMORY_MIB = {
    "P100": 16384, "T4": 16384, "V100M16": 16384, "V100M32": 32768, "A10": 24576,
    "G1": 16384, "G2": 32768, "G3": 32768,
    "H200": 143771,  # the GPU the predictor's measured rows (rec-mix workload) come from
}
DEFAULT_MEMORY_MIB = 16384


def workload_path(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.suffix == ".csv" and path.exists():
        return path
    candidate = DATA / f"openb_pod_list_{name_or_path}.csv"
    if not candidate.exists():
        raise FileNotFoundError(f"unknown workload {name_or_path!r} (known: {', '.join(WORKLOADS)}"
                                " or a path to a pod-list CSV)")
    return candidate


def workload_name(name_or_path: str) -> str:
    stem = Path(name_or_path).stem
    return stem.removeprefix("openb_pod_list_") if stem.startswith("openb_pod_list_") else stem


def load_pods(path: str | Path) -> pd.DataFrame:
    df = pd.read_csv(path, dtype={"gpu_spec": str, "qos": str, "pod_phase": str})
    for col in POD_COLUMNS:
        if col not in df.columns:
            df[col] = np.nan if col.endswith("_time") else ""
    for col in ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli"):
        df[col] = df[col].fillna(0).astype(np.int64)
    for col in ("gpu_spec", "qos", "pod_phase"):
        df[col] = df[col].fillna("").astype(str)
    df["gpu_milli"] = df["gpu_milli"].clip(upper=1000)  # per-GPU milli, capped as upstream
    return df


TIME_COLUMNS = ("creation_time", "scheduled_time", "deletion_time")


def with_times(pods: pd.DataFrame) -> pd.DataFrame:
    """``pods`` with creation, scheduling and deletion times, for the replays that run jobs
    over time. A list without any (the ``multigpu*`` lists of the FGD study give shapes only)
    borrows them from the default trace: each GPU pod takes the times of a default-trace GPU
    pod with as many GPUs (of any GPU pod where none has as many), drawn with a generator
    seeded by the list's length, so every run sees the same times. Lists with times, and the
    packing experiments (which read no times), are left as they are."""
    if pods["creation_time"].notna().any():
        return pods
    src = load_pods(DATA / "openb_pod_list_default.csv")
    src = src[(src["num_gpu"] > 0) & (src["gpu_milli"] > 0) & src["creation_time"].notna()
              & src["deletion_time"].notna()]
    rng = np.random.default_rng(len(pods))
    out = pods.copy()
    gpu = out[(out["num_gpu"] > 0) & (out["gpu_milli"] > 0)]
    for n, idx in gpu.groupby("num_gpu").groups.items():
        pool = src[src["num_gpu"] == n]
        pool = pool if len(pool) else src
        pick = rng.integers(len(pool), size=len(idx))
        for col in TIME_COLUMNS:
            out.loc[idx, col] = pool[col].to_numpy(dtype=np.float64)[pick]
    return out


def load_nodes(path: str | Path = NODE_LIST) -> pd.DataFrame:
    df = pd.read_csv(path, dtype={"model": str})
    df["model"] = df["model"].fillna("").astype(str)
    for col in ("cpu_milli", "memory_mib", "gpu"):
        df[col] = df[col].fillna(0).astype(np.int64)
    return df


def node_names(nodes: pd.DataFrame, seed: int | None) -> list[str]:
    """The FGD simulator's seed-dependent name prefix ``%04d-<sn>`` (it fixes the tie-break
    order: smallest name first); ``seed=None`` keeps the trace order."""
    n = len(nodes)
    perm = np.arange(n) if seed is None else np.random.default_rng(seed).permutation(n)
    return [f"{int(p):04d}-{sn}" for p, sn in zip(perm, nodes["sn"], strict=True)]


def inventory(nodes: pd.DataFrame, names: list[str]) -> Inventory:
    out = []
    for name, count, model in zip(names, nodes["gpu"], nodes["model"], strict=True):
        mem = MODEL_MEMORY_MIB.get(model, DEFAULT_MEMORY_MIB)
        gpus = tuple(Gpu(f"{name}/gpu{i}", i, model or "none", mem) for i in range(int(count)))
        out.append(NodeGpus(name=name, gpus=gpus))
    return Inventory.of(out)


def parse_spec(spec: str) -> frozenset[str] | None:
    models = frozenset(m for m in (spec or "").split("|") if m)
    return models or None


@dataclass(frozen=True, slots=True)
class TraceDemand(PodDemand):
    """A PodDemand with what the baselines read (per-GPU milli and GPU count as the trace
    states them; CPU and host memory are the PodDemand's)."""

    gpu_milli: int = 0  # per GPU, as in the trace
    num_gpu: int = 0

    @property
    def gpu_request(self) -> int:
        """num_gpu x gpu_milli: the pod's requested milli-GPU."""
        return self.num_gpu * self.gpu_milli if self.gpu_milli else 0


def min_memory(models: frozenset[str] | None, cluster_models: set[str]) -> int:
    usable = [m for m in cluster_models if models is None or m in models] or list(cluster_models)
    return min(MODEL_MEMORY_MIB.get(m, DEFAULT_MEMORY_MIB) for m in usable)


def make_demand(
    uid: str, cpu: int, mem: int, num_gpu: int, gpu_milli: int, spec: str,
    cluster_models: set[str], *, exclusive: bool = False, job_class: str = "unknown",
    predicted_s: float | None = None,
) -> TraceDemand:
    allowed = parse_spec(spec)
    whole = milli = share_mem = 0
    shares: tuple[ContainerRequest, ...] = ()
    if num_gpu > 0 and gpu_milli > 0:
        if num_gpu == 1 and gpu_milli < 1000 and not exclusive:
            milli = int(gpu_milli)
            share_mem = max(1, milli * min_memory(allowed, cluster_models) // 1000)
            shares = (ContainerRequest("main", 0, milli, share_mem),)
        else:
            whole = int(num_gpu)
    return TraceDemand(
        uid=uid, namespace="trace", name=uid,
        containers=(ContainerRequest("main", whole, milli, share_mem),),
        whole_gpus=whole, share_milli=milli, share_mem_mib=share_mem,
        allowed_models=allowed, job_class=job_class, share_containers=shares,
        cpu_milli=int(cpu), host_mem_mib=int(mem), gpu_milli=int(gpu_milli) if num_gpu else 0,
        num_gpu=int(num_gpu) if gpu_milli else 0, predicted_s=predicted_s,
    )
