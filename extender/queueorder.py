"""Queue order by predicted duration: a job's predicted run time -> a priority band. Pure.

kube-scheduler's queue pops pods by priority, then by arrival, so a small fixed set of
PriorityClasses (non-preempting, far below the system classes) turns "longest first" into
"FIFO within a duration band". Bands are log-spaced between two durations: band 0 holds the
shortest jobs, band ``n - 1`` the longest. With ``longest-first`` (a long job queued last
sets the makespan, so starting long jobs first packs the tail) band ``i`` gets priority
``base + i``; with ``shortest-first`` (better mean JCT, worse makespan) ``base + n - 1 - i``.
``critical-first`` (the chart's default) serves both: only jobs whose length is a sizeable part of a
drain set the makespan (a job started late adds its whole length to it), so the *critical*
bands go first, longest first; the others follow shortest first, which minimises mean JCT
among them. Critical are the longest band and every band a job could really belong to if the
predictor under-estimates its duration by up to ``PREDICTION_MARGIN`` (the structural step
estimate is within x2 of the measured step for 85 % of the dataset rows): band ``i`` whose
upper edge x the margin exceeds the longest band's lower edge. With the default 4 bands
that is the longest two (a band spans x3.9): priorities, bands 0..3, ``base + 1, base, base +
2, base + 3``. ``critical`` sets the count instead. A job whose duration cannot be predicted
goes to ``default_band``. ``latest-start``: the bands shortest first, and a waiting job whose
latest start has come (``latest_start_due``: it may really run longer than the submitted work
takes to drain, arrivals counted) goes ahead of them all, least slack first (``slack_rank``):
the job controller's admission queue applies it (controller/queue.py ``due_slack``).

Gangs: a job that needs several whole GPUs at once (``gang_gpus``: whole GPUs per worker x
workers, 2 or more) cannot backfill into GPUs as they free one by one; behind a backlog of
smaller jobs that refill every GPU as it frees, it starves until the backlog ends, and a long
one then sets the makespan alone. So a gang whose band is critical (as above, in every order)
goes ahead of every band: class ``<prefix>-gang``, priority ``base + count``. Short gangs keep
their band. With ``latest-start`` the long gangs stay ahead only while the GPUs they run on
are below their share of the predicted work left (``gangs_ahead``); otherwise they wait in
their bands (the job controller's admission queue, controller/queue.py ``gang_share``).

The job controller (controller/reconcile.py) and the simulator (bench/sim/recmix_replay.py)
both call :meth:`DurationBands.band` and :meth:`DurationBands.priority`; the chart installs the
classes with the same rule (charts/sparse/templates/priorityclasses.yaml).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ORDERS = ("longest-first", "shortest-first", "critical-first", "latest-start")
DEFAULT_BANDS = 4
DEFAULT_RANGE_S = (60.0, 14_400.0)  # 1 min .. 4 h: bands < 4 min, < 15 min, < 1 h, longer
DEFAULT_BASE = 1000
DEFAULT_PREFIX = "sparse-duration"
MAX_PRIORITY = 1_000_000_000  # user classes stay at or below 1e9; system classes are 2e9+
PREDICTION_MARGIN = 2.0  # the predictor's step estimate: within x2 for 85 % of rows


def _finite_positive(value: float, what: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{what} must be a finite number > 0, got {value!r}")
    return v


@dataclass(frozen=True)
class DurationBands:
    """``edges_s``: ascending band edges in seconds (``n - 1`` of them for ``n`` bands)."""

    edges_s: tuple[float, ...]
    order: str = "longest-first"
    default_band: int | None = None  # None: the middle band (rounded up)
    base_priority: int = DEFAULT_BASE
    prefix: str = DEFAULT_PREFIX
    critical: int | None = None  # critical-first: longest bands taken first; None: by margin

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise ValueError(f"queue order must be one of {', '.join(ORDERS)}, "
                             f"got {self.order!r}")
        edges = [_finite_positive(e, "band edge") for e in self.edges_s]
        if any(b <= a for a, b in zip(edges, edges[1:], strict=False)):
            raise ValueError(f"band edges must increase strictly, got {list(self.edges_s)}")
        if self.default_band is not None and not 0 <= self.default_band < self.count:
            raise ValueError(f"default band {self.default_band} is not one of 0.."
                             f"{self.count - 1}")
        if self.critical is not None and (isinstance(self.critical, bool)
                                          or not 1 <= self.critical <= self.count):
            raise ValueError(f"critical bands must be 1..{self.count}, got {self.critical!r}")
        if not 0 <= self.base_priority <= MAX_PRIORITY - self.count:
            raise ValueError(f"base priority must be in 0..{MAX_PRIORITY - self.count}, "
                             f"got {self.base_priority}")

    @classmethod
    def log_spaced(cls, lo_s: float, hi_s: float, count: int = DEFAULT_BANDS,
                   **kwargs: object) -> DurationBands:
        """``count`` bands whose edges split ``[lo_s, hi_s]`` evenly on a log scale."""
        lo = _finite_positive(lo_s, "shortest band duration")
        hi = _finite_positive(hi_s, "longest band duration")
        if hi <= lo:
            raise ValueError(f"band range {lo_s}..{hi_s}: the end must exceed the start")
        if not isinstance(count, int) or not 1 <= count <= 16:
            raise ValueError(f"band count must be an integer in 1..16, got {count!r}")
        edges = tuple(lo * (hi / lo) ** (k / count) for k in range(1, count))
        return cls(edges, **kwargs)  # type: ignore[arg-type]

    @property
    def count(self) -> int:
        return len(self.edges_s) + 1

    @property
    def critical_count(self) -> int:
        """How many of the longest bands critical-first takes first (longest first)."""
        if self.critical is not None:
            return self.critical
        return critical_bands(self.edges_s)

    @property
    def fallback(self) -> int:
        return self.count // 2 if self.default_band is None else self.default_band

    def band(self, duration_s: float | None) -> int:
        """0 (shortest) .. count - 1 (longest); None -> the default band. Monotone."""
        if duration_s is None:
            return self.fallback
        d = _finite_positive(duration_s, "predicted duration (seconds)")
        return sum(1 for e in self.edges_s if d >= e)

    def priority(self, band: int) -> int:
        """The PriorityClass value of ``band``: higher is popped first."""
        if not 0 <= band < self.count:
            raise ValueError(f"band {band} is not one of 0..{self.count - 1}")
        return self.base_priority + self.rank(band)

    def rank(self, band: int) -> int:
        """0 (taken last) .. count - 1 (taken first): ``band``'s place in the queue order."""
        last = self.count - 1
        if self.order == "longest-first":
            return band
        if self.order in ("shortest-first", "latest-start"):  # latest-start: promotion aside
            return last - band
        first = self.count - self.critical_count  # critical-first: bands first.. go first
        return band if band >= first else first - 1 - band

    def is_critical_gang(self, band: int, gang_gpus: int = 0) -> bool:
        """Whether a job in ``band`` that needs ``gang_gpus`` whole GPUs at once goes ahead of
        every band (module doc)."""
        return gang_gpus >= 2 and band >= self.count - self.critical_count

    def gang_priority(self) -> int:
        """The priority of the critical gangs' class: above every band."""
        return self.base_priority + self.count

    def gang_class_name(self) -> str:
        return f"{self.prefix}-gang"

    def queue_class(self, band: int, gang_gpus: int = 0) -> tuple[str, int]:
        """(PriorityClass name, value) of a job in ``band`` needing ``gang_gpus`` whole GPUs."""
        if self.is_critical_gang(band, gang_gpus):
            return self.gang_class_name(), self.gang_priority()
        return self.class_name(band), self.priority(band)

    def class_name(self, band: int) -> str:
        if not 0 <= band < self.count:
            raise ValueError(f"band {band} is not one of 0..{self.count - 1}")
        return f"{self.prefix}-{band}"

    def describe(self, band: int) -> str:
        """Human range of ``band``, e.g. ``3.9 min - 15.5 min``."""
        lo = self.edges_s[band - 1] if band > 0 else 0.0
        hi = self.edges_s[band] if band < len(self.edges_s) else math.inf
        if hi == math.inf:
            return f">= {_human(lo)}"
        return f"< {_human(hi)}" if lo == 0 else f"{_human(lo)} - {_human(hi)}"


def critical_bands(edges_s: tuple[float, ...], margin: float = PREDICTION_MARGIN) -> int:
    """The longest band plus every band whose upper edge x ``margin`` exceeds the longest
    band's lower edge: a job predicted there may really run as long as the longest band's."""
    if not edges_s:
        return 1
    top = edges_s[-1]
    return 1 + sum(1 for e in edges_s if e * margin > top)


def latest_start_come(predicted_s: float, backlog_gpu_s: float, gpus: float,
                      margin: float = PREDICTION_MARGIN, arriving: float = 0.0) -> bool:
    """Whether a waiting job predicted to run ``predicted_s`` is on the critical path: the
    cluster (``gpus`` GPUs) needs ``drain_time`` to drain the predicted work left of every
    running and waiting job (while work keeps ``arriving``, GPU-seconds per second), and a
    job that may really run ``predicted_s x margin`` must start now or end after the rest
    (its latest start has come). Such a job goes ahead of every band, whatever the band
    order (shortest-first keeps mean JCT low until then)."""
    if not predicted_s > 0 or not gpus > 0:
        return False
    return predicted_s * margin >= drain_time(backlog_gpu_s, gpus, arriving)


def drain_time(backlog_gpu_s: float, gpus: float, arriving: float = 0.0) -> float:
    """Seconds until ``backlog_gpu_s`` of work is gone on ``gpus`` GPUs while work keeps
    arriving at ``arriving`` GPU-seconds per second: the backlog shrinks only at the
    difference, and never (inf) while arrivals keep up with the service; then no job is
    the last one yet, and the end of the run is set by arrivals, not by the backlog."""
    backlog = max(float(backlog_gpu_s), 0.0)
    net = float(gpus) - max(float(arriving), 0.0)
    if backlog == 0.0:
        return 0.0
    return backlog / net if net > 0 else math.inf


def arrival_rate(arrive_s: np.ndarray, work_gpu_s: np.ndarray, now: float,
                 horizon_s: float) -> float:
    """GPU-seconds of work per second submitted over the last ``horizon_s`` (the drain
    horizon: the arrivals seen over it are what the next one is expected to bring), counted
    from the first submission on: the jobs present at that instant are a backlog, not a flow
    (a batch submitted at once arrives at rate 0). ``arrive_s``: each job's submission time
    (those after ``now`` not yet known, not counted); ``work_gpu_s``: its work."""
    arrive = np.asarray(arrive_s, dtype=np.float64)
    if arrive.size == 0:
        return 0.0
    window = min(float(horizon_s), float(now) - float(arrive.min()))
    if not window > 0:
        return 0.0
    inside = (arrive > now - window) & (arrive <= now)
    return float(np.asarray(work_gpu_s, dtype=np.float64)[inside].sum()) / window


def latest_start_due(now: float, gpus: float, submitted: np.ndarray, predicted: np.ndarray,
                     margin: np.ndarray | float, expected: np.ndarray, booked: np.ndarray,
                     started: np.ndarray, finished: np.ndarray) -> np.ndarray:
    """Per job: whether it waits and its latest start has come, from what a job controller
    knows at ``now``: each job's submission time, predicted run time (NaN: unknown, never
    due), error ``margin`` (it may really run ``predicted x margin``), ``expected`` run
    time (the prediction x its median error), the GPUs it books (``booked``, a share's
    fraction), and its start and end (NaN: not yet). The drain time is that of the expected
    work submitted so far and not yet done, on ``gpus`` GPUs, less the work arriving per
    second over the last drain horizon (``drain_time``, ``arrival_rate``): with everything
    submitted at once, the backlog over the GPUs; while arrivals keep up, no job is due."""
    predicted = np.asarray(predicted, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    submitted = np.asarray(submitted, dtype=np.float64)
    started = np.asarray(started, dtype=np.float64)
    booked = np.asarray(booked, dtype=np.float64)
    known = np.isfinite(predicted) & (predicted > 0)
    if not gpus > 0 or not known.any():
        return np.zeros(len(predicted), dtype=bool)
    here = submitted <= now
    ended = np.isfinite(np.asarray(finished, dtype=np.float64))
    running = np.isfinite(started) & ~ended
    waiting = here & ~np.isfinite(started) & ~ended
    left = np.where(running, np.maximum(expected - (now - started), 0.0), expected)
    use = known & (running | waiting)
    backlog = float((left[use] * booked[use]).sum())
    arriving = arrival_rate(submitted[known], (expected * booked)[known], now, backlog / gpus)
    drain = drain_time(backlog, gpus, arriving)
    bound = np.where(known, predicted, 0.0) * np.asarray(margin, dtype=np.float64)
    return waiting & known & (bound >= drain)


def gangs_ahead(now: float, gpus: float, submitted: np.ndarray, expected: np.ndarray,
                booked: np.ndarray, started: np.ndarray, finished: np.ndarray,
                gang: np.ndarray) -> bool:
    """Whether the long gangs (``gang``: per job, a gang in a critical band, the class ahead
    of every band) go ahead of every band now: only while the GPUs the running long gangs
    book are below the long gangs' share of the predicted work left x the cluster's
    ``gpus``. The work is counted as ``latest_start_due``'s drain counts it: each job's
    ``expected`` run time (NaN: unknown, not counted; a running job's remainder) x the GPUs
    it ``booked``, of the jobs submitted by ``now``, waiting or running (``started``,
    ``finished``: NaN when not yet). Otherwise a waiting long gang waits in its own band:
    where long gangs are most of the work, taking them all first would run the queue
    longest first for most of it (mean JCT); holding their share they drain with the rest
    (makespan). No long gang, no work left: False; nothing running: True while any long
    gang has work left."""
    gang = np.asarray(gang, dtype=bool)
    if not gpus > 0 or not gang.any():
        return False
    expected = np.asarray(expected, dtype=np.float64)
    started = np.asarray(started, dtype=np.float64)
    booked = np.asarray(booked, dtype=np.float64)
    known = np.isfinite(expected) & (expected > 0)
    ended = np.isfinite(np.asarray(finished, dtype=np.float64))
    running = np.isfinite(started) & ~ended
    waiting = ~np.isfinite(started) & ~ended & (np.asarray(submitted, np.float64) <= now)
    left = np.where(running, np.maximum(np.where(known, expected, 0.0) - (now - started), 0.0),
                    np.where(known, expected, 0.0))
    work = np.where(known & (running | waiting), left * booked, 0.0)
    total = float(work.sum())
    if not total > 0:
        return False
    share = float(work[gang].sum()) / total
    return float(booked[running & gang].sum()) < share * float(gpus)


def slack_rank(predicted: float, margin: float) -> float:
    """Among jobs whose latest start has come, the one with the least slack goes first: the
    longest it may really run (``predicted x margin``); lower ranks go first."""
    return -float(predicted) * float(margin)


@dataclass(frozen=True)
class StepErrorBounds:
    """How far the predictor's step time may under-estimate, per model family and per job
    class: an upper quantile of measured / predicted step time over the predictor's
    GPU-measured evaluation rows (written by ``sparse-predictor step-bounds``, shipped in
    ``predictor/models/step-error-bounds.json``). ``margin`` is the bound of the job's family
    when the rows have it, else of its job class, else the pooled bound of all rows: a job
    may really run up to ``predicted x margin`` (with the quantile's confidence)."""

    pooled: float
    families: tuple[tuple[str, float], ...] = ()
    classes: tuple[tuple[str, float], ...] = ()
    quantile: float = 0.9

    def __post_init__(self) -> None:
        _finite_positive(self.pooled, "pooled step-error bound")
        for name, v in (*self.families, *self.classes):
            _finite_positive(v, f"step-error bound of {name!r}")
        if not 0 < self.quantile < 1:
            raise ValueError(f"bound quantile must be in (0, 1), got {self.quantile!r}")

    @classmethod
    def from_dict(cls, data: dict) -> StepErrorBounds:
        """The JSON form ``{"quantile", "pooled", "families": {..}, "classes": {..}}``."""
        try:
            return cls(float(data["pooled"]),
                       tuple(sorted((str(k), float(v)) for k, v in data["families"].items())),
                       tuple(sorted((str(k), float(v)) for k, v in data["classes"].items())),
                       float(data["quantile"]))
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"step-error bounds need quantile, pooled, families, classes: "
                             f"{e}") from None

    def margin(self, family: str | None = None, job_class: str | None = None) -> float:
        """The bound for a job of ``family`` / ``job_class`` (either may be unknown)."""
        for key, table in ((family, self.families), (job_class, self.classes)):
            if key is not None:
                hit = next((v for k, v in table if k == key), None)
                if hit is not None:
                    return hit
        return self.pooled


def predicted_duration(steps: object, step_s: float | None) -> float | None:
    """Declared training steps x predicted seconds per step; None when either is unknown.
    A declared value that is not a positive whole number raises ValueError naming it."""
    if steps is None or step_s is None or not step_s > 0:
        return None
    if isinstance(steps, bool) or not isinstance(steps, int | float) or steps != int(steps) \
            or not 1 <= steps <= 10**12:
        raise ValueError(f"spec.steps must be a whole number in 1..10^12, got {steps!r}")
    return float(steps) * float(step_s)


def _human(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"
