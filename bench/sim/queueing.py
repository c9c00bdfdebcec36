"""What the time replays (``replay``, ``replay -w rec-mix``, ``locality``) share around their
event loops: the policy set up for a seed, arrival times per mode, the queue order (FIFO, or
by predicted-duration band as the job controller sets it), the retry that skips shapes
already known not to fit, and the run record's JSON form."""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from controller.queue import Waiting, blocks
from extender.placement.policies import REGISTRY
from extender.queueorder import (
    PREDICTION_MARGIN,
    DurationBands,
    gangs_ahead,
    latest_start_come,
    latest_start_due,
    slack_rank,
)

MODES = ("high-load", "continuous")
QUEUE_ORDERS = ("product", "fifo", "bands", "bands-shortest-first", "bands-critical-first",
                "longest-first", "shortest-first-hold", "critical-path", "drain-path",
                "drain-rate", "critical-share", "critical-share-sf",
                "critical-path-bands", "error-bound-path", "error-bound-drain",
                "arrival-drain", "arrival-slack", "gang-share")
# sparse's queue shortest-first (the gang rule included; its banded queue comes with the
# extender's holds, placement/holds.py); ``critical-path`` adds the latest-start promotion
# (``CriticalPath``). The stock schedulers stay FIFO under both, as shipped.
HOLD_ORDERS = ("shortest-first-hold", "critical-path", "drain-path",
               "drain-rate", "critical-share", "critical-share-sf", "critical-path-bands",
               "error-bound-path", "error-bound-drain", "arrival-drain", "arrival-slack",
               "gang-share")
# the orders with latest-start promotion and their margin on the predicted duration:
# ``critical-path`` the predictor's x2, ``drain-path`` the point estimate (a job is promoted
# only once it would otherwise end after everything else)
PATH_MARGINS = {"critical-path": PREDICTION_MARGIN, "drain-path": 1.0, "drain-rate": 1.0,
                "critical-path-bands": PREDICTION_MARGIN, "error-bound-path": None,
                "error-bound-drain": None, "arrival-drain": None, "arrival-slack": None,
                "gang-share": None}
# ``error-bound-path``: each job's margin is its family's (else job class's, else all rows')
# measured bound of the step-time under-estimate (predictor/step_bounds.py), not a global x2;
# ``error-bound-drain``: that, and the drain time from each job's predicted work x its
# family's median error (an unbiased drain, where the others sum the raw predictions)
MEDIAN_DRAIN = ("error-bound-drain", "arrival-drain", "arrival-slack", "gang-share")
# ``arrival-drain``: ``error-bound-drain`` with the drain time of the work submitted so far,
# shrinking at the cluster's GPUs less the work arriving per second over the last drain
# horizon (queueorder.drain_time); ``arrival-slack``: that, the promoted jobs least slack
# (longest predicted x margin) first
ARRIVAL_AWARE = ("arrival-drain", "arrival-slack", "gang-share")
SLACK_ORDER = ("arrival-slack", "gang-share")
# ``gang-share``: ``arrival-slack``, and the long gangs ahead of every band only while the
# GPUs they run on are below their share of the predicted work left (queueorder.gangs_ahead)
GANG_SHARE = ("gang-share",)
# ``critical-path-bands``: only jobs of the critical bands are promoted
BANDS_ONLY = ("critical-path-bands",)
# ``drain-rate``: the drain time at the rate the cluster has really retired predicted work
OBSERVED_RATE = ("drain-rate",)
PRODUCT_BAND_ORDER = "latest-start"  # sparse's band order as shipped (the chart's default)
# what the job controller does with it, in the replay's terms: shortest-first bands with the
# extender's holds, the arrival-aware latest-start promotion, least slack first, and the
# long gangs ahead while below their share of the GPUs
PRODUCT_RULE = "gang-share"


def queue_rule(queue_order: str, policy: str) -> str:
    """The order ``policy``'s queue follows under ``queue_order``: ``product`` is sparse's
    shipped rule (``PRODUCT_RULE``) and the stock schedulers' FIFO; others are themselves."""
    return PRODUCT_RULE if queue_order == "product" and policy == "sparse" else queue_order


def path_margin(queue_order: str, classes: Sequence[object],
                families: Sequence[object] | None = None) -> float | np.ndarray:
    """The promotion margin of ``queue_order`` (one of ``PATH_MARGINS``): a number, or per
    job the shipped step-error bound of its family / job class (``error-bound-path``)."""
    margin = PATH_MARGINS[queue_order]
    if margin is not None:
        return margin
    from predictor.step_bounds import load

    bounds = load()
    fams = [None] * len(classes) if families is None else [str(f) for f in families]
    return np.array([bounds.margin(f, str(c)) for f, c in zip(fams, classes, strict=True)])


def drain_scale(queue_order: str, classes: Sequence[object],
                families: Sequence[object] | None = None) -> float | np.ndarray:
    """Per job, what its predicted work is multiplied by in the drain time: 1, or with
    ``error-bound-drain`` its family's median measured / predicted step time (the same
    rows and rule as the bounds, at the median)."""
    if queue_order not in MEDIAN_DRAIN:
        return 1.0
    from predictor.step_bounds import load_median

    median = load_median()
    fams = [None] * len(classes) if families is None else [str(f) for f in families]
    return np.array([median.margin(f, str(c)) for f, c in zip(fams, classes, strict=True)])


def base_mode(mode: str) -> str:
    """``high-load-bands-shortest-first`` -> ``high-load``: the arrival mode of a run whose
    queue order was forced (reported as ``<mode>-<order>``)."""
    return next((m for m in MODES if mode.startswith(m)), mode)


def banded_queue(queue_order: str, policy: str) -> str | None:
    """The band order ``policy``'s queue uses under ``queue_order`` (None: FIFO). ``product``:
    sparse's as shipped, the stock schedulers FIFO; ``bands``: longest band first;
    ``bands-<order>``: that order; ``fifo`` and ``longest-first`` (an oracle): no bands."""
    if queue_order not in QUEUE_ORDERS:
        raise ValueError(f"queue order {queue_order!r}: one of {', '.join(QUEUE_ORDERS)}")
    if queue_order == "product":
        return PRODUCT_BAND_ORDER if policy == "sparse" else None
    if queue_order == "bands":
        return "longest-first"
    if queue_order in HOLD_ORDERS:
        return "shortest-first" if policy == "sparse" else None
    return queue_order.removeprefix("bands-") if queue_order.startswith("bands-") else None


def band_rank(predicted_s: Sequence[float], bands: DurationBands,
              gang_gpus: Sequence[int] | None = None) -> np.ndarray:
    """Each job's place in the queue (lower first): minus the priority the job controller
    gives its predicted duration (NaN or None: no prediction, the default band) and the whole
    GPUs it needs at once (``gang_gpus``; a long gang goes first)."""
    out = np.empty(len(predicted_s), dtype=np.int64)
    for j, p in enumerate(predicted_s):
        known = p is not None and math.isfinite(p)
        gang = int(gang_gpus[j]) if gang_gpus is not None and known else 0
        out[j] = -bands.queue_class(bands.band(float(p) if known else None), gang)[1]
    return out


class RankedQueue:
    """Waiting jobs by rank, then by when they (re)joined: FIFO within a rank. ``jobs`` is the
    list ``retry_pending`` walks."""

    def __init__(self, rank: np.ndarray) -> None:
        self.rank = rank
        self.seq = np.zeros(len(rank), dtype=np.int64)
        self.count = 0
        self.jobs: list[int] = []

    def wait(self, j: int) -> None:
        self.count += 1
        self.seq[j] = self.count
        bisect.insort(self.jobs, j, key=lambda k: (self.rank[k], self.seq[k]))

    def arrival_order(self, batch: list[int]) -> list[int]:
        """Jobs arriving at one instant, in the order the queue tries them."""
        return sorted(batch, key=lambda k: (self.rank[k], k))


class CriticalPath:
    """Latest-start promotion (extender/queueorder.py ``latest_start_come``): before each pass
    over the queue, every waiting job whose predicted duration x the margin reaches the time
    the cluster needs to drain the predicted work left goes ahead of the whole queue, longest
    predicted first. ``predicted``: per job (NaN: unknown, never promoted); ``gpus``: the
    GPUs it books (a share's fraction); ``margin``: one for all, or per job."""

    def __init__(self, predicted: np.ndarray, gpus: np.ndarray, n_gpus: int,
                 queue: RankedQueue, margin: float | np.ndarray = PREDICTION_MARGIN,
                 observed_rate: bool = False, eligible: np.ndarray | None = None,
                 drain_scale: float | np.ndarray = 1.0, arrive: np.ndarray | None = None,
                 slack_order: bool = False, band_rank: np.ndarray | None = None) -> None:
        self.observed_rate = observed_rate
        # submission times: the drain counts only the work submitted by now, shrinking at
        # the GPUs less the observed arrivals (None: every job's work, at the GPUs)
        self.arrive = None if arrive is None else np.asarray(arrive, dtype=np.float64)
        self.slack_order = slack_order
        self.predicted = np.asarray(predicted, dtype=np.float64)
        # each job's expected work in the drain time: its prediction x this
        self.expected = self.predicted * np.asarray(drain_scale, dtype=np.float64)
        self.margin = np.broadcast_to(np.asarray(margin, dtype=np.float64),
                                      self.predicted.shape)
        self.gpus = np.asarray(gpus, dtype=np.float64)
        self.n_gpus = float(n_gpus)
        self.queue = queue
        self.floor = int(queue.rank.min()) - 1  # ranks below every band's
        self.known = np.isfinite(self.predicted)
        # the jobs that may be promoted (None: every job with a prediction)
        self.eligible = self.known if eligible is None else self.known & np.asarray(eligible)
        self.promoted = np.zeros(len(self.predicted), dtype=bool)
        # the long gangs' share (queueorder.gangs_ahead): each job's rank without the gang
        # class; the long gangs are those whose queue rank differs (None: gangs always ahead)
        self.band_rank = None if band_rank is None else np.asarray(band_rank, dtype=np.int64)
        self.gang_rank = queue.rank.copy()
        self.gang = (self.known & (self.band_rank != self.gang_rank) if band_rank is not None
                     else np.zeros(len(self.predicted), dtype=bool))

    def backlog(self, now: float, started: np.ndarray, done: np.ndarray) -> float:
        """Predicted GPU-seconds left: the waiting jobs' whole expected work and the running
        jobs' expected remainder (none once past their expected end)."""
        running = np.isfinite(started) & ~np.isfinite(done)
        left = np.where(running, np.maximum(self.expected - (now - started), 0.0),
                        self.expected)
        waiting = ~np.isfinite(started)
        use = self.known & (running | waiting)
        if self.arrive is not None:
            use &= self.arrive <= now
        return float((left[use] * self.gpus[use]).sum())

    def drain_rate(self, now: float, started: np.ndarray, done: np.ndarray) -> float:
        """Predicted GPU-seconds the cluster retires per second: its GPUs (a booked GPU-second
        per GPU per second), or with ``observed_rate`` the predicted work of the jobs finished
        since the first start over the time since (it carries the predictor's bias, the
        slowdown of shared GPUs and the GPUs packing leaves idle); the GPUs until one ends."""
        if not self.observed_rate:
            return self.n_gpus
        ran = np.isfinite(started)
        if not ran.any():
            return self.n_gpus
        elapsed = now - float(started[ran].min())
        finished = self.known & np.isfinite(done)
        retired = float((self.predicted[finished] * self.gpus[finished]).sum())
        return retired / elapsed if elapsed > 0 and retired > 0 else self.n_gpus

    def promote(self, now: float, started: np.ndarray, done: np.ndarray) -> int:
        """Promote the waiting jobs whose latest start has come; returns how many."""
        q = self.queue
        if not q.jobs:
            return 0
        if self.arrive is not None:  # the controller's rule, from what it knows
            due = latest_start_due(now, self.n_gpus, self.arrive, self.predicted, self.margin,
                                   self.expected, self.gpus, started, done)
            new = [j for j in q.jobs if due[j] and self.eligible[j] and not self.promoted[j]]
        else:
            backlog = self.backlog(now, started, done)
            rate = self.drain_rate(now, started, done)
            new = [j for j in q.jobs if self.eligible[j] and not self.promoted[j]
                   and latest_start_come(float(self.predicted[j]), backlog, rate,
                                        float(self.margin[j]))]
        for j in new:
            self.promoted[j] = True
            # longest first; with slack_order the longest it may really run (least slack)
            bound = slack_rank(self.predicted[j], self.margin[j] if self.slack_order else 1.0)
            q.rank[j] = self.floor + int(bound)
        if self.share_gangs(now, started, done) or new:
            q.jobs.sort(key=lambda k: (q.rank[k], q.seq[k]))
        return len(new)

    def share_gangs(self, now: float, started: np.ndarray, done: np.ndarray) -> bool:
        """The waiting long gangs not promoted take the gang class while the long gangs are
        below their share of the GPUs (``gangs_ahead``, the controller's rule), their band
        otherwise; True when a rank changed."""
        if self.band_rank is None or not self.gang.any():
            return False
        arrive = np.zeros(len(self.predicted)) if self.arrive is None else self.arrive
        ahead = gangs_ahead(now, self.n_gpus, arrive, self.expected, self.gpus, started, done,
                            self.gang)
        ranks = self.gang_rank if ahead else self.band_rank
        changed = False
        for j in self.queue.jobs:
            if self.gang[j] and not self.promoted[j] and self.queue.rank[j] != ranks[j]:
                self.queue.rank[j] = ranks[j]
                changed = True
        return changed


class CriticalShare:
    """A capacity share for the critical bands: before each pass over the shortest-first
    queue, the waiting jobs of the critical bands (``critical``: per job, the bands a job
    could really belong to the longest of, queueorder.critical_bands) go ahead of the others
    while the GPUs their running jobs book are below their share of the predicted work left
    (waiting and running) x the cluster's GPUs, and behind them otherwise; shortest first
    inside each. Both parts then drain at about the same time (makespan), and the short
    jobs are never starved by the long ones (mean JCT)."""

    def __init__(self, predicted: np.ndarray, gpus: np.ndarray, n_gpus: int,
                 queue: RankedQueue, critical: np.ndarray,
                 critical_rank: np.ndarray | None = None) -> None:
        self.predicted = np.asarray(predicted, dtype=np.float64)
        self.gpus = np.asarray(gpus, dtype=np.float64)
        self.n_gpus = float(n_gpus)
        self.queue = queue
        self.base = queue.rank.copy()
        # the critical part's own order (e.g. critical-first's, longest band first); None:
        # the queue's
        self.critical_rank = self.base if critical_rank is None else np.asarray(critical_rank)
        self.critical = np.asarray(critical, dtype=bool) & np.isfinite(self.predicted)
        self.offset = int(self.base.max() - self.base.min()) + 1
        self.turns = 0  # places in the queue given to the critical bands

    def reorder(self, jobs: list[int], now: float, started: np.ndarray,
                done: np.ndarray) -> None:
        """Rank ``jobs`` (waiting) by merging the two parts, shortest first inside each: the
        next job comes from the part furthest below its share of the GPUs, counting the GPUs
        each job taken would book (predicted work left per part, waiting and running)."""
        if not jobs:
            return
        running = np.isfinite(started) & ~np.isfinite(done)
        waiting = ~np.isfinite(started)
        known = np.isfinite(self.predicted)
        left = np.where(running, np.maximum(self.predicted - (now - started), 0.0),
                        self.predicted) * self.gpus
        left = np.where(known & (running | waiting), left, 0.0)
        total = float(left.sum())
        share = float(left[self.critical].sum()) / total if total > 0 else 0.0
        room = [(1.0 - share) * self.n_gpus - float(self.gpus[running & ~self.critical].sum()),
                share * self.n_gpus - float(self.gpus[running & self.critical].sum())]
        ranks = (self.base, self.critical_rank)
        parts = [sorted((j for j in jobs if self.critical[j] == c),
                        key=lambda k: (ranks[c][k], k), reverse=True) for c in (False, True)]
        floor = int(self.base.min()) - 1 - len(self.base)
        for pos in range(len(jobs)):
            c = int(not parts[0] or (bool(parts[1]) and room[1] > room[0]))
            j = parts[c].pop()
            room[c] -= float(self.gpus[j])
            self.turns += c
            self.queue.rank[j] = floor + pos
        if jobs is self.queue.jobs:
            jobs.sort(key=lambda k: (self.queue.rank[k], self.queue.seq[k]))


def arriving_now(events: list[tuple], t: float, first: int, share: CriticalShare | None,
                 started: np.ndarray, done: np.ndarray) -> list[int]:
    """Every job arriving at ``t`` (``first`` already popped): the arrival events (kind 1) at
    the top of the replay's event heap, popped; ranked by ``share`` when the critical bands
    have a capacity share."""
    batch = [first]
    while events and events[0][0] == t and events[0][1] == 1:
        batch.append(heapq.heappop(events)[2])
    if share is not None:
        share.reorder(batch, t, started, done)
    return batch


def critical_mask(predicted: np.ndarray, bands: DurationBands) -> np.ndarray:
    """Per job: whether its predicted duration is in one of ``bands``' critical bands."""
    first = bands.count - bands.critical_count
    return np.array([math.isfinite(p) and bands.band(float(p)) >= first for p in predicted],
                    dtype=bool)


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


class AdmissionGate:
    """The job controller's bounded backfill (controller/queue.py, its rule): a job behind a
    waiting job may be admitted past it only until that job, if it could fit an empty cluster
    (``ever_fits``), has waited ``max_pass_over_s`` since it was first refused; then the jobs
    behind it wait until it starts, and the GPUs that free up go to it."""

    def __init__(self, ever_fits: np.ndarray, max_pass_over_s: float) -> None:
        self.ever_fits = np.asarray(ever_fits, dtype=bool)
        self.max_pass_over_s = float(max_pass_over_s)
        self.since = np.full(len(self.ever_fits), np.nan)  # first refused; NaN: never
        self.holds = 0  # times a refused job closed the gate on the jobs behind it

    def refused(self, j: int, now: float) -> bool:
        """Job ``j`` stays waiting at ``now``: True when it stops the jobs behind it."""
        if math.isnan(self.since[j]):
            self.since[j] = now
        closed = self._blocks(j, now)
        self.holds += closed
        return closed

    def _blocks(self, j: int, now: float) -> bool:
        """The controller's rule for waiting job ``j`` (refused once at least)."""
        return bool(blocks(Waiting(key=str(j), created=0.0, waiting_since=float(self.since[j]),
                                   ever_fits=bool(self.ever_fits[j])), float(now),
                           self.max_pass_over_s))

    def admits(self, j: int, queue: RankedQueue, now: float) -> bool:
        """Whether job ``j``, just arrived, may try past the jobs ahead of it in ``queue``."""
        key = (queue.rank[j], queue.count + 1)
        for k in queue.jobs:
            if (queue.rank[k], queue.seq[k]) > key:
                break
            if not math.isnan(self.since[k]) and self._blocks(k, now):
                return False
        return True


def retry_pending(pending: list[int], shape: Callable[[int], tuple[Hashable, Sequence[int]]],
                  try_start: Callable[[int], bool],
                  stays: Callable[[int], bool] | None = None) -> None:
    """Try the queue in order, in place; a job whose shape ``(kind, sizes)`` is of a kind that
    already failed this round with every size no larger is skipped: it cannot fit either.
    ``stays(j)``, called for each job left waiting, True: the jobs behind it are not tried
    (the controller's gate)."""
    failed: dict[Hashable, tuple[np.ndarray, list[int]]] = {}  # kind -> (shapes, [count])
    keep = []
    for i, j in enumerate(pending):
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
        else:
            continue
        if stays is not None and stays(j):
            keep.extend(pending[i + 1:])
            break
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
