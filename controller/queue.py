"""Which waiting job may try admission now: by queue band, FIFO within a band, with bounded
backfill. Pure.

Jobs wait in order of their band's priority (extender/queueorder.py: the same PriorityClass
value their pods get; 0 for all when bands are off), then of creation. A job that does not
fit does not stop the jobs behind it from trying (backfill: a small job may start on GPUs the
big one could not use yet), but only for ``max_pass_over_s``: once the first job in that order
that *could* fit an empty cluster has waited that long since it was first refused, no job
behind it is admitted until it is. The GPUs freed by jobs
that finish then go to it, so a large job is passed over for a bounded time, never forever.
A job that does not fit even an empty cluster (``ever_fits`` false: too many GPUs, too much
memory per worker) never blocks anyone; it waits for nodes to be added.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Waiting:
    key: str  # namespace/name
    created: float  # creation time (seconds); ties broken by key
    waiting_since: float | None  # first refused admission of this attempt; None: not tried
    ever_fits: bool = True
    priority: int = 0  # the job's queue band priority: higher waits ahead


def may_try(key: str, waiting: Iterable[Waiting], now: float, max_pass_over_s: float
            ) -> tuple[bool, str]:
    """(True, "") when ``key`` may ask for admission now, else (False, why)."""
    for w in sorted(waiting, key=lambda w: (-w.priority, w.created, w.key)):
        if w.key == key:
            return True, ""
        if blocks(w, now, max_pass_over_s):
            return False, (f"queued behind {w.key}, which has waited"
                           f" {int(now - w.waiting_since)}s for GPUs (jobs may pass a waiting"
                           f" job for at most {int(max_pass_over_s)}s)")
    return True, ""


def blocks(w: Waiting, now: float, max_pass_over_s: float) -> bool:
    """Whether waiting job ``w`` stops every job behind it from being admitted: it could fit an
    empty cluster and was first refused at least ``max_pass_over_s`` ago."""
    return w.ever_fits and w.waiting_since is not None \
        and now - w.waiting_since >= max_pass_over_s
