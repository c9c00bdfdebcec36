"""Interference from the learned pair model, for pods whose solo profiles are known. Pure.

Same quantity as the class matrix's ``placement_loss`` (throughput lost, in GPUs' worth of
work, when a pod using ``f_a`` of a GPU joins a GPU's residents)::

    loss(g) = f_a (1 - prod_b s(a|b)) + sum_b f_b (1 - s(b|a))

with ``s`` the pair model's speed for the two profiles (a profile already says how much of the
GPU a job keeps busy, so no fraction exponent). A resident whose profile is unknown is paired
through the class matrix as before: ``s(a|b) = norm(a|b) ** f_b``, ``s(b|a) = norm(b|a) ** f_a``.
"""

from __future__ import annotations

import numpy as np

from extender.placement.state import ClusterState


def pair_loss(state: ClusterState, uid: str, job_class: str, fraction: float,
              gpus: np.ndarray) -> np.ndarray | None:
    """Loss per GPU in ``gpus``, or None when the pod's own profile is unknown."""
    book = state.profiles
    if book is None:
        return None
    me = book.id_of(uid)
    if me < 0:
        return None
    pods = state.resident_pods
    flat = [(pos, *r) for pos, g in enumerate(gpus.tolist()) for r in pods.get(g, ())]
    loss = np.zeros(len(gpus))
    if not flat:
        return loss
    pos = np.fromiter((f[0] for f in flat), np.int64, len(flat))
    frac = np.fromiter((f[2] for f in flat), np.float64, len(flat))
    cls = np.fromiter((f[3] for f in flat), np.int64, len(flat))
    other = np.fromiter((book.id_of(f[1]) for f in flat), np.int64, len(flat))
    known = other >= 0
    a_cls = state.matrix.index(job_class)
    norm = state.matrix.norm
    keep = np.where(known, book.speed(me, np.maximum(other, 0)), norm[a_cls, cls] ** frac)
    theirs = np.where(known, book.speed(np.maximum(other, 0), me), norm[cls, a_cls] ** fraction)
    log_keep = np.bincount(pos, weights=np.log(np.maximum(keep, 1e-9)), minlength=len(gpus))
    hurt = np.bincount(pos, weights=frac * (1.0 - theirs), minlength=len(gpus))
    return fraction * (1.0 - np.exp(log_keep)) + hurt
