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

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from controller.status import now_iso
from extender.queueorder import gangs_ahead, latest_start_due, slack_rank


@dataclass(frozen=True, slots=True)
class Waiting:
    key: str  # namespace/name
    created: float  # creation time (seconds); ties broken by key
    waiting_since: float | None  # first refused admission of this attempt; None: not tried
    ever_fits: bool = True
    priority: int = 0  # the job's queue band priority: higher waits ahead
    # a long gang's own band priority (latest-start): its place while the long gangs hold
    # their share of the GPUs (``gang_share``); None: not a long gang
    band_priority: int | None = None


@dataclass(frozen=True, slots=True)
class Load:
    """What the queue knows of one job for the latest-start rule (extender/queueorder.py
    ``latest_start_due``): when it was submitted, its predicted run time (None: unknown),
    its family's error ``margin`` and median error, the GPUs it books, when it started
    (None: waiting) and whether it has finished."""

    key: str
    created: float
    predicted_s: float | None
    margin: float = 1.0
    median: float = 1.0
    gpus: float = 1.0
    started: float | None = None
    finished: bool = False
    due: bool = False  # its latest start came before: it stays ahead until it starts
    gang: bool = False  # a long gang (the class ahead of every band while below its share)


def due_slack(loads: Iterable[Load], now: float, gpus: float) -> dict[str, float]:
    """The waiting jobs whose latest start has come on a cluster of ``gpus`` GPUs (now, or
    before: ``Load.due``), each with its slack rank (lower goes first)."""
    rows = list(loads)
    if not rows:
        return {}
    before = {r.key: slack_rank(r.predicted_s, r.margin) for r in rows
              if r.due and r.started is None and not r.finished and r.predicted_s}
    if not gpus > 0:
        return before
    created, pred, expected, booked, started, finished = _columns(rows)
    margin = np.array([r.margin for r in rows])
    due = latest_start_due(now, gpus, created, pred, margin, expected, booked, started,
                           finished)
    return {**before,
            **{r.key: slack_rank(pred[i], margin[i]) for i, r in enumerate(rows) if due[i]}}


def gang_share(loads: Iterable[Load], now: float, gpus: float) -> bool:
    """Whether the long gangs go ahead of every band now (extender/queueorder.py
    ``gangs_ahead``): while the GPUs the running long gangs book are below their share of
    the predicted work left x the cluster's ``gpus``."""
    rows = list(loads)
    if not rows or not any(r.gang for r in rows):
        return False
    created, _, expected, booked, started, finished = _columns(rows)
    return gangs_ahead(now, gpus, created, expected, booked, started, finished,
                       np.array([r.gang for r in rows]))


def _columns(rows: list[Load]) -> tuple[np.ndarray, ...]:
    """The loads as the pure rules read them: submitted, predicted run time, expected run
    time (predicted x the family's median error), GPUs booked, started and finished (NaN:
    unknown / not yet)."""
    nan = math.nan
    pred = np.array([nan if r.predicted_s is None else r.predicted_s for r in rows])
    return (np.array([r.created for r in rows]), pred,
            pred * np.array([r.median for r in rows]), np.array([r.gpus for r in rows]),
            np.array([nan if r.started is None else r.started for r in rows]),
            np.array([0.0 if r.finished else nan for r in rows]))


def queue_key(w: Waiting, due: Mapping[str, float], gangs_first: bool = True) -> tuple:
    """A waiting job's place: the due jobs first, least slack first; then by band, FIFO; a
    long gang by its own band unless the long gangs go first (``gang_share``)."""
    slack = due.get(w.key)
    if slack is not None:
        return (0, slack, 0.0, w.created, w.key)
    priority = w.priority if gangs_first or w.band_priority is None else w.band_priority
    return (1, 0.0, -priority, w.created, w.key)


def may_try(key: str, waiting: Iterable[Waiting], now: float, max_pass_over_s: float,
            due: Mapping[str, float] | None = None,
            gangs_first: bool = True) -> tuple[bool, str]:
    """(True, "") when ``key`` may ask for admission now, else (False, why). ``due``: the
    jobs whose latest start has come (``due_slack``), ahead of every band; ``gangs_first``:
    whether the long gangs go ahead of every band (``gang_share``) or wait in their bands."""
    due = due or {}
    rows = list(waiting)
    for w in sorted(rows, key=lambda w: queue_key(w, due, gangs_first)):
        if w.key == key:
            return True, ""
        if blocks(w, now, max_pass_over_s):
            # the same words on every pass while nothing changes: one event, not one a pass
            ahead = ("; its latest start has come, it goes ahead of every band"
                     if w.key in due else "")
            return False, (f"queued behind {w.key}, waiting for GPUs since"
                           f" {now_iso(w.waiting_since or 0.0)} (jobs may pass a waiting job"
                           f" for at most {int(max_pass_over_s)}s){ahead}"
                           f"{in_own_band(key, rows, due, gangs_first)}")
    return True, ""


def in_own_band(key: str, waiting: Iterable[Waiting], due: Mapping[str, float],
                gangs_first: bool) -> str:
    """Why a long gang queues behind shorter jobs although its class is above every band:
    the running long gangs hold their share of the GPUs (``gang_share``); "" otherwise."""
    own = next((w for w in waiting if w.key == key), None)
    if gangs_first or own is None or own.band_priority is None or key in due:
        return ""
    return (f"; the running long gangs hold their share of the GPUs, so this gang waits in"
            f" its band (priority {own.band_priority}) until they do not")


def blocks(w: Waiting, now: float, max_pass_over_s: float) -> bool:
    """Whether waiting job ``w`` stops every job behind it from being admitted: it could fit an
    empty cluster and was first refused at least ``max_pass_over_s`` ago."""
    return w.ever_fits and w.waiting_since is not None \
        and now - w.waiting_since >= max_pass_over_s
