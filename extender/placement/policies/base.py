"""The policy interface: per-GPU costs for the pod's slots; lower is better. Pure."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from extender.demand import PodDemand
from extender.placement.fit import GpuMasks
from extender.placement.state import ClusterState


class Policy(Protocol):
    name: str

    def costs(
        self, state: ClusterState, demand: PodDemand, masks: GpuMasks
    ) -> tuple[np.ndarray, np.ndarray]:
        """(share_cost, whole_cost), one value per GPU in ``masks.gpus``. Only entries where
        ``masks.share`` (resp. ``masks.free``) is true are ever used."""
        ...


def gpu_free_after(state: ClusterState, demand: PodDemand, gpus: np.ndarray) -> np.ndarray:
    """Mean of the memory and compute fractions a GPU would have left after taking the share."""
    mem_cap, milli_cap = state.mem_cap[gpus], state.milli_cap[gpus]
    mem = (mem_cap - state.mem_used[gpus] - demand.share_mem_mib) / mem_cap
    milli = (milli_cap - state.milli_used[gpus] - demand.share_milli) / milli_cap
    return (mem + milli) / 2.0


def node_free_fraction(state: ClusterState, masks: GpuMasks) -> np.ndarray:
    """Per candidate GPU: the fraction of its node's GPUs that are completely free."""
    idle = (state.mem_used[masks.gpus] == 0) & (state.milli_used[masks.gpus] == 0)
    per_node = np.bincount(masks.owner, weights=idle, minlength=masks.owner.max(initial=-1) + 1)
    size = np.bincount(masks.owner, minlength=len(per_node))
    return (per_node / np.maximum(size, 1))[masks.owner]
