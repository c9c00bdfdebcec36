"""Placement policies, one per module, each exporting NAME and a class with ``costs``.

The registry below is the only place policies are listed (no registration side effects).
``sparse``, ``binpack`` and ``spread`` are the extender's policies; the others are baselines
re-implemented for the trace simulator (``bench/``): the FGD paper's Random, BestFit, DotProd,
GpuPacking, GpuClustering and FGD, and models of stock Kubernetes (``kube-exclusive``,
``kube-shared``). Baselines may carry optional, simulator-only extras: ``score_step`` (node
costs are integer scores; round before comparing), ``host_costs`` (scores for pods without
GPUs), ``exclusive`` (shares become whole GPUs), ``reseed`` and ``set_workload``.
"""

from __future__ import annotations

from collections.abc import Callable

from extender.placement.policies import (
    best_fit,
    binpack,
    dot_product,
    fgd,
    gpu_clustering,
    gpu_packing,
    kube_default,
    random_fit,
    sparse,
    spread,
)
from extender.placement.policies.base import Policy

REGISTRY: dict[str, Callable[[], Policy]] = {
    sparse.NAME: sparse.Sparse,
    binpack.NAME: binpack.Binpack,
    spread.NAME: spread.Spread,
    random_fit.NAME: random_fit.RandomFit,
    best_fit.NAME: best_fit.BestFit,
    dot_product.NAME: dot_product.DotProduct,
    gpu_packing.NAME: gpu_packing.GpuPacking,
    gpu_clustering.NAME: gpu_clustering.GpuClustering,
    fgd.NAME: fgd.FGD,
    kube_default.EXCLUSIVE: kube_default.KubeExclusive,
    kube_default.SHARED: kube_default.KubeShared,
}


def make_policy(name: str) -> Policy:
    try:
        return REGISTRY[name]()
    except KeyError:
        known = ", ".join(sorted(REGISTRY))
        raise ValueError(f"unknown placement policy {name!r} (known: {known})") from None


__all__ = ["REGISTRY", "Policy", "make_policy"]
