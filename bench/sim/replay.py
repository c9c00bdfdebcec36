"""Experiment ``replay``: jobs arrive, queue, retry, run for their recorded durations and slow
each other down when they share a GPU.

Rules (all seeded by the run's seed):

* Jobs: ``n_jobs`` GPU pods sampled from the pod list (CPU-only pods left out). Duration =
  ``deletion_time - scheduled_time`` (``creation_time`` when never scheduled), clipped to
  [60 s, the 95th percentile] so one months-long pod cannot set the makespan alone.
* Job classes: every job is ``recommendation`` with probability ``rec_share``, otherwise one of
  the other classes of the interference matrix, uniformly.
* Cluster: nodes sampled uniformly from the node list until the cluster has
  ``GPU-seconds of all jobs / (overload x longest duration)`` GPUs (``overload`` 4 by
  default): run back to back on whole GPUs the jobs would take ~4 longest jobs, so queueing,
  not the single longest job, sets the makespan.
* Modes: ``high-load``: every job submitted at t = 0. ``continuous``: jobs submitted in their
  trace creation order, arrival times compressed linearly so that the offered load (GPU-seconds
  of work / (cluster GPUs x submission span)) is ``load`` (1.0 by default).
* Scheduling: a job is tried when it arrives and again after every departure, in queue order
  (jobs whose shape dominates one that already failed in the same round are skipped, they
  cannot fit either). The placement itself is the core's (``SimCluster``).
* Queue order (``queue_order``): ``product`` (default) is what each scheduler does: the stock
  schedulers (every policy but ``sparse``) queue FIFO; ``sparse`` queues as its job controller
  sets it (extender/queueorder.py, the function the controller calls): by the band of the
  job's predicted duration, shortest first, FIFO within a band, a job whose latest start has
  come ahead of them all (the chart's ``latest-start``: ``gang-share`` below). The
  predicted duration is what the product could know, declared steps x the predictor's step
  time, so it carries the predictor's measured step-time error (bench/sim/duration_error.py);
  a job that declares no steps (probability ``1 - declared_share``) gets the controller's
  default band.
  A long job that needs several whole GPUs at once goes ahead of every band while the long
  gangs run on fewer GPUs than their share of the predicted work left (the controller's gang
  rule, extender/queueorder.py ``gangs_ahead``). ``queue_bands`` bands, log-spaced over [60 s, the
  duration cap]. ``pass_over_s``: the controller's bounded backfill (controller/queue.py),
  off by default; with it, a job that could fit the empty cluster and has waited that long
  since first refused stops every job behind it in sparse's queue. ``fifo`` and ``bands*``
  force one order on every policy, ``longest-first`` is an oracle (true durations, longest
  first); each is reported as mode ``<mode>-<order>``. ``shortest-first-hold``: sparse
  shortest-first with the gang rule, the stock schedulers FIFO; ``critical-path``: that, and
  a waiting job whose latest start has come goes ahead of the queue (``CriticalPath``,
  extender/queueorder.py); ``drain-path`` / ``drain-rate``: promotion on the point estimate,
  the drain time at the cluster's GPUs / at the predicted work really retired per second;
  ``critical-path-bands``: ``critical-path`` promoting only jobs of the critical bands;
  ``critical-share`` (``-sf``): the critical bands get the GPUs in proportion to their share
  of the predicted work left, longest band first (shortest first) inside, the others
  shortest first (``CriticalShare``); ``error-bound-path`` / ``-drain``: promotion at each
  job family's error bound (and its median in the drain); ``arrival-drain``: that, the drain
  of the work submitted so far, net of the arrivals (``latest_start_due``);
  ``arrival-slack``: that, least slack first; ``gang-share``: that, with the long gangs'
  share. Wherever sparse's queue is banded (``product``
  included) it has
  the extender's hold (extender/placement/holds.py: the first gang the queue cannot place
  holds the node where it starts soonest; other jobs take GPUs there only if predicted, x
  the margin, to end before; ``holds=False`` turns it off).
* Speed: a job alone on its GPUs runs at 1; a share of class a next to co-runners of classes
  b1..bk holding m1..mk milli runs at prod_i norm(a|b_i) ** (m_i / 1000): the measured pair
  slowdown (two jobs each using a whole GPU) scaled, in log space, by how much of the GPU the
  co-runner uses. Whole GPUs are never shared.
* ``kube-exclusive`` gives a share a whole GPU (so never slows down).

Metrics: makespan, mean and p95 JCT (completion - submission), mean queueing delay, time-
averaged GPU allocation, useful work per GPU-hour (solo GPU-seconds of the jobs / (cluster GPUs
x makespan)), and the stretch of GPU-sharing jobs (mean run time / solo run time: what
co-location cost them, the quantity interference-aware placement minimises).
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field

import numpy as np

from bench.sim.bounds import work_bound
from bench.sim.cluster import SimCluster
from bench.sim.duration_error import predicted_durations
from bench.sim.fgd import typical_tasks
from bench.sim.queueing import (
    ARRIVAL_AWARE,
    BANDS_ONLY,
    GANG_SHARE,
    OBSERVED_RATE,
    PATH_MARGINS,
    SLACK_ORDER,
    AdmissionGate,
    CriticalPath,
    CriticalShare,
    PolicyRun,
    RankedQueue,
    arrival_times,
    arriving_now,
    band_rank,
    banded_queue,
    co_location_slowdown,
    critical_mask,
    drain_scale,
    path_margin,
    placement_policy,
    queue_rule,
    retry_pending,
)
from bench.sim.replay_explain import WaitLog, summarize
from bench.sim.trace import (
    NODE_LIST,
    load_nodes,
    load_pods,
    parse_spec,
    with_times,
    workload_name,
    workload_path,
)
from extender.interference.matrix import default_matrix
from extender.placement.holds import MIN_GANG, HoldBook
from extender.queueorder import DEFAULT_BANDS, DurationBands

ANCHORS = {  # makespan vs kube-exclusive in the original system
    ("high-load", "sparse"): 0.78, ("continuous", "sparse"): 0.85,
    ("high-load", "kube-shared"): 0.92, ("continuous", "kube-shared"): 0.89,
}


@dataclass
class ReplayRun(PolicyRun):
    work_per_gpu_hour: float
    seconds: float
    jct: list = field(default_factory=list)
    # makespan ratio no policy beats against an ideal exclusive one (bench/sim/bounds.py)
    work_bound: float = float("nan")
    # GPU-sharing jobs: mean of run time / solo run time (1 = never slowed by a co-runner)
    share_stretch: float = float("nan")
    # what bounds the makespan and where the time went (bench/sim/replay_explain.py)
    explain: dict = field(default_factory=dict)

    def row(self) -> dict:
        return {k: getattr(self, k) for k in (
            "workload", "policy", "seed", "mode", "jobs", "gpus", "makespan", "jct_mean",
            "jct_p95", "queue_mean", "alloc_mean", "work_per_gpu_hour", "seconds",
            "work_bound", "share_stretch")}

    def to_json(self) -> dict:
        return {**super().to_json(), "explain": self.explain}


MIN_DURATION_S = 60.0
# The job controller's bounded backfill (controller/queue.py; its default is 300 s): off unless
# asked for (``pass_over_s``). At 300 s it costs sparse makespan and mean JCT in this replay:
# a blocked queue leaves GPUs idle while a node drains (bench/README.md).
DEFAULT_PASS_OVER_S = math.inf


def duration_cap(gpu) -> float:  # noqa: ANN001
    """The longest duration a job keeps: the 95th percentile of the GPU pods' durations."""
    start = gpu["scheduled_time"].where(gpu["scheduled_time"].notna(), gpu["creation_time"])
    dur = (gpu["deletion_time"] - start).fillna(0).to_numpy(dtype=np.float64)
    return max(MIN_DURATION_S, float(np.nanpercentile(dur, 95)))


def sample_jobs(pods, n_jobs: int, rng: np.random.Generator):
    """``n_jobs`` GPU pods of the trace (all: 0) in creation order, each with its duration
    (clipped to [60 s, p95]); a list without times borrows them (``trace.with_times``)."""
    pods = with_times(pods)
    gpu = pods[(pods["num_gpu"] > 0) & (pods["gpu_milli"] > 0)].copy()
    start = gpu["scheduled_time"].where(gpu["scheduled_time"].notna(), gpu["creation_time"])
    dur = (gpu["deletion_time"] - start).fillna(0).to_numpy(dtype=np.float64)
    gpu["duration"] = np.clip(dur, MIN_DURATION_S, duration_cap(gpu))
    if n_jobs and n_jobs < len(gpu):
        gpu = gpu.iloc[np.sort(rng.choice(len(gpu), n_jobs, replace=False))]
    return gpu.sort_values("creation_time", kind="stable").reset_index(drop=True)


def sample_nodes(nodes, gpus_wanted: float, rng: np.random.Generator):
    order = rng.permutation(len(nodes))
    counts = nodes["gpu"].to_numpy()[order]
    k = int(np.searchsorted(np.cumsum(counts), gpus_wanted) + 1)
    return nodes.iloc[np.sort(order[:k])].reset_index(drop=True)


def run_replay(
    workload: str, policy: str, seed: int, *, mode: str = "high-load", n_jobs: int = 2000,
    rec_share: float = 0.3, overload: float = 4.0, load: float = 1.0,
    nodes_path: str | None = None, queue_order: str = "product",
    queue_bands: int = DEFAULT_BANDS, declared_share: float = 1.0,
    queue_critical: int | None = None, pass_over_s: float = DEFAULT_PASS_OVER_S,
    holds: bool | None = None,
) -> ReplayRun:
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    matrix = default_matrix()
    pods = load_pods(workload_path(workload))
    jobs = sample_jobs(pods, n_jobs, rng)
    others = [c for c in matrix.classes if c not in ("recommendation", "unknown")]
    classes = np.where(rng.random(len(jobs)) < rec_share, "recommendation",
                       rng.choice(others, len(jobs)))
    request = (jobs["num_gpu"] * jobs["gpu_milli"]).to_numpy() / 1000.0
    work = jobs["duration"].to_numpy()
    whole = np.where(jobs["gpu_milli"].to_numpy() >= 1000, jobs["num_gpu"].to_numpy(), 0)
    cap = duration_cap(pods[(pods["num_gpu"] > 0) & (pods["gpu_milli"] > 0)])
    rule = queue_rule(queue_order, policy)  # product: sparse's shipped rule
    rank = queue_rank(rule, policy, work, classes, seed, whole, queue_bands=queue_bands,
                      declared_share=declared_share, critical=queue_critical, cap_s=cap)
    gpu_seconds = float((work * np.ceil(request)).sum())
    nodes = sample_nodes(load_nodes(nodes_path or NODE_LIST),
                         gpu_seconds / (overload * work.max()), rng)
    pol = placement_policy(policy, seed, typical_tasks(jobs))
    sim = SimCluster(nodes, list(nodes["sn"]), pol, matrix)
    # the extender's hold for the first gang its queue cannot place (placement/holds.py):
    # sparse's (the extender always holds; its predicted durations come with the controller's
    # banded queue), unless asked otherwise; the stock schedulers have none
    banded = banded_queue(rule, policy) is not None
    path = rule in PATH_MARGINS and policy == "sparse"
    if holds is None:
        holds = banded and policy == "sparse"
    pred = (predicted_durations(work, classes, seed, declared_share=declared_share)
            if banded else np.full(len(work), np.nan))
    hold_book = sim.holds = HoldBook() if holds else None
    held_jobs: set[int] = set()
    n_gpus = sim.total_milli // 1000
    cols = {c: jobs[c].to_numpy() for c in ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli")}
    specs = jobs["gpu_spec"].to_numpy()
    shapes = [(int(a), int(b), int(c), int(d), e) for a, b, c, d, e in zip(
        cols["num_gpu"], cols["gpu_milli"], cols["cpu_milli"], cols["memory_mib"], specs,
        strict=True)]
    arrive = arrival_times(mode, jobs["creation_time"].to_numpy(dtype=np.float64),
                           (work * request).sum(), n_gpus, load)
    norm = matrix.norm
    cls_idx = np.array([matrix.index(c) for c in classes])

    remaining = work.copy()
    speed = np.zeros(len(jobs))
    last = np.zeros(len(jobs))  # time of the last speed change
    version = np.zeros(len(jobs), dtype=np.int64)
    started = np.full(len(jobs), np.nan)
    done = np.full(len(jobs), np.nan)
    gpu_jobs: dict[int, set[int]] = {}  # share GPU index -> running jobs on it
    job_gpu: dict[int, int] = {}
    events: list[tuple[float, int, int, int]] = []  # (time, kind 0=finish 1=arrive, job, ver)
    for j in range(len(jobs)):
        heapq.heappush(events, (float(arrive[j]), 1, j, 0))
    queue = RankedQueue(rank)
    pending = queue.jobs
    booked_gpus = np.where(whole > 0, whole, request)
    critical = (CriticalPath(pred, booked_gpus, n_gpus, queue,
                             path_margin(rule, classes),
                             rule in OBSERVED_RATE,
                             critical_mask(pred, DurationBands.log_spaced(
                                 MIN_DURATION_S, max(cap, 2 * MIN_DURATION_S), queue_bands))
                             if rule in BANDS_ONLY else None,
                             drain_scale=drain_scale(rule, classes),
                             arrive=arrive if rule in ARRIVAL_AWARE else None,
                             slack_order=rule in SLACK_ORDER,
                             # each job's rank without the gang class: a long gang's band
                             band_rank=queue_rank(
                                 rule, policy, work, classes, seed, None,
                                 queue_bands=queue_bands, declared_share=declared_share,
                                 critical=queue_critical, cap_s=cap)
                             if rule in GANG_SHARE else None)
                if path else None)
    share = None
    if rule.startswith("critical-share") and policy == "sparse":
        cf = DurationBands.log_spaced(MIN_DURATION_S, max(cap, 2 * MIN_DURATION_S), queue_bands,
                                      order="critical-first")
        share = CriticalShare(pred, booked_gpus, n_gpus, queue, critical_mask(pred, cf),
                              None if rule.endswith("-sf") else band_rank(pred, cf, whole))
    # the job controller's admission queue goes with its bands; the stock schedulers have none
    gate = (AdmissionGate(fits_empty(nodes, shapes), pass_over_s)
            if banded_queue(rule, policy) and math.isfinite(pass_over_s) else None)
    alloc_area = 0.0
    waiting = WaitLog(sim)
    t_prev = 0.0
    now = 0.0

    def set_speed(j: int, value: float) -> None:
        remaining[j] -= (now - last[j]) * speed[j]
        last[j] = now
        speed[j] = value
        version[j] += 1
        eta = now + max(remaining[j], 0.0) / value
        heapq.heappush(events, (eta, 0, j, int(version[j])))

    def refresh(g: int) -> None:
        members = gpu_jobs.get(g, ())
        for j in members:
            s = co_location_slowdown(j, members, norm, cls_idx, shapes)
            if s != speed[j]:
                set_speed(j, s)

    def try_start(j: int) -> bool:
        num, milli, cpu, mem, spec = shapes[j]
        p = float(pred[j]) if math.isfinite(pred[j]) else None
        d = sim.demand(f"job-{j}", cpu, mem, num, milli, spec, job_class=str(classes[j]),
                       predicted_s=p)
        placed = sim.schedule(d, now)
        if placed is None:
            waiting.failed(shapes[j])
            if hold_book is not None and hold_book.hold is None and d.whole_gpus >= MIN_GANG \
                    and hold_book.place(sim.state, d.uid, d.whole_gpus, now,
                                        eligible_nodes(j)) is not None:
                held_jobs.add(j)
            return False
        if hold_book is not None:
            hold_book.started(d.uid, now, p)
        started[j] = now
        last[j] = now
        if d.has_share:
            g = sim.state.gpu_index[placed.reservation.allocations[0].gpu]
            gpu_jobs.setdefault(g, set()).add(j)
            job_gpu[j] = g
            speed[j] = 0.0
            refresh(g)
        else:
            set_speed(j, 1.0)
        return True

    eligible_cache: dict[int, np.ndarray] = {}

    def eligible_nodes(j: int) -> np.ndarray:
        """The nodes (state order) that could host job ``j`` empty."""
        if j not in eligible_cache:
            eligible_cache[j] = node_fits(sim, nodes, shapes[j])
        return eligible_cache[j]

    def retry() -> None:
        if critical is not None:
            critical.promote(now, started, done)
        if share is not None:
            share.reorder(pending, now, started, done)
        if hold_book is not None:
            hold_book.clear()  # the first gang refused on this pass holds again
        retry_pending(pending, lambda j: (shapes[j][4], shapes[j][:4]), try_start,
                      None if gate is None else lambda j: gate.refused(j, now))

    while events:
        t, kind, j, ver = heapq.heappop(events)
        if kind == 0 and (ver != version[j] or not np.isnan(done[j])):
            continue  # superseded by a speed change
        alloc_area += sim.allocated_milli * (t - t_prev)
        waiting.advance(t - t_prev, pending, shapes)
        t_prev = now = t
        if kind == 1:  # every job arriving now, tried in queue order
            batch = arriving_now(events, t, j, share, started, done)
            for k in queue.arrival_order(batch):
                if gate is not None and not gate.admits(k, queue, now):
                    queue.wait(k)
                elif not try_start(k):
                    if gate is not None:
                        gate.refused(k, now)
                    queue.wait(k)
        else:
            done[j] = now
            sim.release(f"job-{j}")
            if hold_book is not None:
                hold_book.finished(f"job-{j}")
            g = job_gpu.pop(j, None)
            if g is not None:
                gpu_jobs[g].discard(j)
                refresh(g)
            retry()
    makespan = float(np.nanmax(done) - arrive.min())
    jct = done - arrive
    gpu_work = float((work * request).sum())
    shared = np.array([shapes[j][0] == 1 and shapes[j][1] < 1000 for j in range(len(jobs))])
    stretch = (done - started)[shared] / work[shared]
    explain = summarize(waiting, shapes=shapes, work=work, arrive=arrive, started=started,
                        done=done, n_gpus=n_gpus, rank=rank)
    explain["gate_holds"] = 0 if gate is None else int(gate.holds)
    if hold_book is not None:  # gangs that held a node, and placements the holds refused
        explain["node_holds"] = {"gangs": len(held_jobs), "refused": hold_book.refusals}
    if critical is not None:  # jobs whose latest start came (ahead of every band)
        explain["promoted"] = int(critical.promoted.sum())
    return ReplayRun(
        workload=workload_name(workload), policy=policy, seed=seed,
        mode=mode if queue_order == "product" else f"{mode}-{queue_order}", jobs=len(jobs),
        gpus=n_gpus, makespan=makespan, jct_mean=float(np.nanmean(jct)),
        jct_p95=float(np.nanpercentile(jct, 95)),
        queue_mean=float(np.nanmean(started - arrive)),
        alloc_mean=alloc_area / max(t_prev, 1e-9) / sim.total_milli * 100.0,
        work_per_gpu_hour=gpu_work / (n_gpus * makespan) if makespan else 0.0,
        seconds=time.perf_counter() - t0,
        jct=[round(float(x), 1) for x in np.sort(jct)],
        work_bound=work_bound(request, work),
        share_stretch=float(np.nanmean(stretch)) if len(stretch) else float("nan"),
        explain=explain,
    )


def queue_rank(queue_order: str, policy: str, work: np.ndarray, classes: np.ndarray, seed: int,
               whole_gpus: np.ndarray | None = None, *, queue_bands: int = DEFAULT_BANDS,
               declared_share: float = 1.0, critical: int | None = None,
               cap_s: float | None = None) -> np.ndarray:
    """Each job's place in ``policy``'s queue (lower first; all equal: FIFO). Banded queues
    rank by the predicted duration (true duration x the predictor's measured step-time
    error) and, for a long job of ``whole_gpus`` >= 2, ahead of every band (the controller's
    rule); ``longest-first`` by the true duration (an oracle)."""
    if queue_order == "longest-first":
        return np.argsort(np.argsort(-work, kind="stable"), kind="stable").astype(np.int64)
    order = banded_queue(queue_order, policy)
    if order is None:
        return np.zeros(len(work), dtype=np.int64)
    cap = float(work.max()) if cap_s is None else cap_s
    bands = DurationBands.log_spaced(MIN_DURATION_S, max(cap, 2 * MIN_DURATION_S), queue_bands,
                                     order=order, critical=critical)
    return band_rank(predicted_durations(work, classes, seed, declared_share=declared_share),
                     bands, whole_gpus)


def node_fits(sim: SimCluster, nodes, shape: tuple) -> np.ndarray:  # noqa: ANN001
    """Per node of ``sim``'s state: whether the empty node could host a job of ``shape``."""
    num, _milli, c, m, spec = shape
    ok = ((nodes["gpu"].to_numpy() >= max(num, 1)) & (nodes["cpu_milli"].to_numpy() >= c)
          & (nodes["memory_mib"].to_numpy() >= m))
    allowed = parse_spec(spec)
    if allowed is not None:
        ok &= np.isin(nodes["model"].to_numpy(), list(allowed))
    out = np.zeros(len(sim.state.node_names), dtype=bool)
    out[[sim.state.node_index[n] for n in nodes["sn"]]] = ok
    return out


def fits_empty(nodes, shapes: list[tuple]) -> np.ndarray:  # noqa: ANN001
    """Per job: whether some node of the empty cluster could host it (GPU count and model, CPU,
    host memory). A job that never fits waits for nodes to be added and blocks no one."""
    gpus = nodes["gpu"].to_numpy()
    cpu = nodes["cpu_milli"].to_numpy()
    mem = nodes["memory_mib"].to_numpy()
    models = nodes["model"].to_numpy()
    out = np.zeros(len(shapes), dtype=bool)
    for j, (num, _milli, c, m, spec) in enumerate(shapes):
        ok = (gpus >= max(num, 1)) & (cpu >= c) & (mem >= m)
        allowed = parse_spec(spec)
        if allowed is not None:
            ok &= np.isin(models, list(allowed))
        out[j] = bool(ok.any())
    return out
