"""What the time replays (``replay``, ``replay -w rec-mix``, ``locality``) share around their
event loops: the policy set up for a seed, arrival times per mode, the FIFO retry that skips
shapes already known not to fit, and the run record's JSON form."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from extender.placement.policies import REGISTRY

MODES = ("high-load", "continuous")


def placement_policy(name: str, seed: int | None, tasks: object, **kwargs: object) -> object:
    """The registry's policy ``name``, reseeded with ``seed`` (None: left as built) and told
    the workload's typical tasks when it wants them (FGD)."""
    pol = REGISTRY[name](**kwargs)
    if seed is not None and hasattr(pol, "reseed"):
        pol.reseed(seed)
    if hasattr(pol, "set_workload"):
        pol.set_workload(tasks)
    return pol


def arrival_times(mode: str, created: np.ndarray, gpu_work: float, n_gpus: int,
                  load: float) -> np.ndarray:
    """``high-load``: every job at t = 0. ``continuous``: in creation order, the creation times
    compressed linearly so that the offered load (``gpu_work`` GPU-seconds over ``n_gpus`` x
    the submission span) is ``load``."""
    if mode == "high-load":
        return np.zeros(len(created))
    if mode != "continuous":
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    created = np.asarray(created, dtype=np.float64)
    created = created - created.min()
    span = gpu_work / (n_gpus * load)
    return created / max(created.max(), 1.0) * span


def retry_pending(pending: list[int], shape: Callable[[int], tuple[Hashable, Sequence[int]]],
                  try_start: Callable[[int], bool]) -> None:
    """Try the queue in order, in place; a job whose shape ``(kind, sizes)`` is of a kind that
    already failed this round with every size no larger is skipped: it cannot fit either."""
    failed: dict[Hashable, tuple[np.ndarray, list[int]]] = {}  # kind -> (shapes, [count])
    keep = []
    for j in pending:
        kind, sizes = shape(j)
        row = np.asarray(sizes, dtype=np.int64)
        seen = failed.get(kind)
        if seen is not None and (seen[0][:seen[1][0]] <= row).all(axis=1).any():
            keep.append(j)
        elif not try_start(j):
            if seen is None:
                seen = failed[kind] = (np.empty((len(pending), row.size), np.int64), [0])
            seen[0][seen[1][0]] = row
            seen[1][0] += 1
            keep.append(j)
    pending[:] = keep


def co_location_slowdown(j: int, members: Sequence[int], norm: np.ndarray,
                         cls_idx: Sequence[int], shapes: Sequence[Sequence[int]]) -> float:
    """Job ``j``'s slowdown beside the other ``members`` of its GPU: per co-runner, the class
    matrix entry raised to the co-runner's share of the GPU (``shapes[k][1]`` milli-GPU)."""
    s = 1.0
    for k in members:
        if k != j:
            s *= norm[cls_idx[j], cls_idx[k]] ** (shapes[k][1] / 1000.0)
    return s


class JctRun:
    """Mixin for a run record with ``row()`` and a ``jct`` list: its JSON line form."""

    jct: list

    def row(self) -> dict:
        raise NotImplementedError

    def to_json(self) -> dict:
        return {**self.row(), "jct": self.jct}


@dataclass
class PolicyRun(JctRun):
    """The leading fields (and columns, in this order) of every policy replay's run record."""

    workload: str
    policy: str
    seed: int
    mode: str
    jobs: int
    gpus: int
    makespan: float
    jct_mean: float
    jct_p95: float
    queue_mean: float
    alloc_mean: float  # % of cluster GPU, time-averaged
