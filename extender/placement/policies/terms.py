"""A policy's per-GPU costs as a sum of terms, each saying what it reads. Pure.

A term reads part of the demand (``key``: e.g. only the share size and the pod's CPU, not its
job class), the candidate GPUs' and nodes' own state, and some global inputs (``epoch``:
objects compared by identity, such as the fragmentation model that the learned pod mix
replaces now and then, or the interference matrix). A cost cache can then keep each term
apart: pods that differ only in what a term does not read share its values, and a new
fragmentation model makes only the fragmentation term stale, not the interference term.
``add_terms`` sums the values in the policy's own order, so the total is bit for bit what
the policy computes in one go.

A term may also come in two steps, ``raw`` then ``finish``: values per GPU that do not depend
on what changes often (sparse's fragmentation per typical task, before the learned
popularities weigh them), and the cheap step that makes the term's values of them. A cache
then keeps the raw values, and they stay valid while only the cheap step's inputs change
(the popularities, re-read every few hundred pods). ``finish(raw(...))`` equals ``compute``
up to rounding (the weighted sum is taken in another order).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import NamedTuple

import numpy as np

from extender.demand import PodDemand
from extender.placement.fit import GpuMasks
from extender.placement.state import ClusterState

# (share, whole) per GPU of the masks; whole None: the term adds nothing to whole-GPU slots.
TermValues = tuple[np.ndarray, np.ndarray | None]


class CostTerm(NamedTuple):
    """One addend of the costs. ``compute(state, demand, masks)`` answers every GPU of
    ``masks.gpus`` from that GPU's and its node's state alone (never from which other nodes
    are candidates, nor from ``masks.share``/``masks.free``), so it can be filled node by
    node. ``key`` None: computed every time (cheap, or not cacheable); ``epoch`` None: not
    cacheable, it reads more than the nodes' own state (e.g. other pods' profiles). A named
    tuple: a policy makes a few per pod, and a frozen dataclass costs several times more to
    make."""

    key: Hashable | None
    epoch: tuple[object, ...] | None
    compute: Callable[[ClusterState, PodDemand, GpuMasks], TermValues]
    # Optional two-step form for caches: raw arrays per GPU (a leading GPU axis; ``epoch``
    # then says what they depend on), and the step from raw rows to the term's values.
    raw: Callable[[ClusterState, PodDemand, GpuMasks], TermValues] | None = None
    finish: Callable[[np.ndarray | None, np.ndarray | None], TermValues] | None = None
    finish_epoch: tuple[object, ...] = ()  # what ``finish`` reads, compared by identity
    # ``carry(old epoch, new epoch)``: the order in which the raw arrays' columns (their
    # second axis) made with the old epoch are the raw values with the new one, or None
    # (they are made again); -1 for a column the old arrays lack, made by
    # ``raw(state, demand, masks, columns=<their positions>)``.
    carry: Callable[[tuple[object, ...], tuple[object, ...]], np.ndarray | None] | None = None


def add_terms(size: int, values: list[TermValues]) -> tuple[np.ndarray, np.ndarray]:
    """The costs: each term's values added in order, starting from zeros."""
    share = whole = None  # 0 + x is x: the first term's values are copied, not added
    for term_share, term_whole in values:
        share = term_share.copy() if share is None else np.add(share, term_share, out=share)
        if term_whole is not None:
            whole = (term_whole.copy() if whole is None
                     else np.add(whole, term_whole, out=whole))
    return (np.zeros(size) if share is None else share,
            np.zeros(size) if whole is None else whole)
