"""Replay of the ``rec-mix`` workload (bench/sim/recmix.py) through the extender's placement core.

Rules (seeded by the run's seed; every policy of a seed gets the same jobs and cluster):

* Cluster: nodes of 8 H200 (the GPU the jobs were measured on) with the host of an HGX/DGX
  H200 system (224 logical CPUs, 2 TiB), ``--node-cpu`` / ``--node-mem`` to change; sized like
  ``replay``: solo GPU-seconds / (``overload`` x longest job).
* What each policy books: ``kube-exclusive`` a whole GPU; ``sparse`` what the extender books
  for a sharing pod that declares the user's padded memory figure and has the predictor's
  estimate (``extender.demand.pod_demand``: memory = max(declared, predicted), compute
  = predicted); every other policy what the user declared: a whole GPU where the trace pod
  asked for one, else a share with the padded memory figure and, as compute, the trace
  pod's declared ``gpu_milli`` for policies that book compute shares (FGD and the FGD
  paper's baselines) or the memory's fraction of the GPU for ``kube-shared`` (gpushare
  books GPU memory only).
  ``<policy>@predicted`` / ``<policy>@declared`` pick the other source, to separate placement
  from demand.
* Out of memory: a job whose real peak exceeds its booked memory fails once it reaches its
  peak (``OOM_AFTER_S`` of running, at most a tenth of its work), loses its progress, and is
  queued again with the memory its user declares raised by ``oom_bump`` (the booking follows
  the policy's rule). Every failure is counted.
* Speed: bench/sim/physics.py, the same for every policy; whole GPUs are never shared.
* Interference knowledge: with ``interference="learned"`` the cluster knows every job's solo
  profile (GPU util %, DRAM util %, memory MiB: recommendation training recurs, and its
  metrics are in Prometheus), and sparse scores pairs with the learned model
  (extender/interference/pairmodel.py); ``"matrix"`` leaves sparse the class matrix alone.
  Other policies use no interference knowledge either way.
* Modes: ``high-load`` (all jobs at t = 0) and ``continuous`` (trace creation order, times
  compressed to offered load ``load``); the queue is retried after each departure, and jobs
  arriving at the same instant are tried in queue order.
* Queue order (``queue_order``): ``product`` (default) is what each scheduler does:
  ``sparse`` queues by predicted-duration band (extender/queueorder.py, the function the job
  controller uses: declared steps = duration / solo step time, x the predictor's step time,
  ``queue_bands`` log-spaced bands over the trace's duration range, shortest first, and a job
  whose latest start has come ahead of them all: the chart's ``latest-start``, the
  ``arrival-slack`` rule of bench/sim/queueing.py), FIFO within a band; the stock
  schedulers (every other policy) queue FIFO. ``fifo``, ``bands``
  (longest band first), ``bands-shortest-first`` and ``bands-critical-first`` force one
  order on any policy (reported as mode
  ``<mode>-<order>``); ``shortest-first-hold`` is shortest-first here (every job is one
  GPU or a share: no gang to hold a node for), ``critical-path`` adds the latest-start
  promotion, ``drain-path`` / ``drain-rate`` its variants, ``critical-share`` /
  ``critical-share-sf`` a capacity share for the critical bands (bench/sim/queueing.py).
  ``longest-first`` (an oracle: no scheduler knows solo
  times) keeps the same jobs but queues them by solo time, longest first (mode
  ``<mode>-longest-first``), to show how much of a makespan is the queue order rather than
  the placement.

Metrics: makespan, mean / p95 JCT, mean queueing, booked allocation (% of cluster milli-GPU,
time-averaged), **SM-activity-weighted utilisation** (SM-time the running jobs actually
deliver, % of cluster SM-time, time-averaged over the makespan, and over the time jobs were
waiting for a place, when utilisation is up to the scheduler), share stretch (run time / solo
work of jobs that shared a GPU), OOM events.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field

import msgspec
import numpy as np
import pandas as pd

from bench.sim.cluster import SimCluster
from bench.sim.fgd import typical_tasks
from bench.sim.physics import shared_speeds
from bench.sim.queueing import (
    ARRIVAL_AWARE,
    BANDS_ONLY,
    OBSERVED_RATE,
    PATH_MARGINS,
    QUEUE_ORDERS,
    SLACK_ORDER,
    CriticalPath,
    CriticalShare,
    PolicyRun,
    RankedQueue,
    arrival_times,
    arriving_now,
    band_rank,
    banded_queue,
    critical_mask,
    drain_scale,
    path_margin,
    placement_policy,
    queue_rule,
    retry_pending,
)
from bench.sim.recmix import DEFAULT_MIX, GPU_MEM_MIB, GPU_MODEL, build_jobs, duration_range
from bench.sim.recmix_explain import summarize
from bench.sim.replay import sample_nodes
from bench.sim.trace import TraceDemand, load_nodes
from extender.annotations import RES_GPU_MEM
from extender.demand import ContainerRequest, Prediction, pod_demand
from extender.interference.pairmodel import default_pair_model
from extender.interference.profiles import ProfileBook
from extender.placement.policies import REGISTRY
from extender.protocol import Pod
from extender.queueorder import DEFAULT_BANDS, DurationBands, predicted_duration

OOM_AFTER_S = 120.0
NODE_CPU_MILLI = 224_000  # HGX/DGX H200: 2 x 56-core Xeon, 2 threads each
NODE_MEM_MIB = 2 * 1024 * 1024


@dataclass
class RecMixRun(PolicyRun):
    sm_util_mean: float
    sm_util_backlog: float
    work_per_gpu_hour: float
    share_stretch: float
    oom_events: int
    seconds: float
    work_bound: float = float("nan")
    jct: list = field(default_factory=list)
    explain: dict = field(default_factory=dict)  # bench/sim/recmix_explain.py

    def row(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("jct", "explain")}

    def to_json(self) -> dict:
        return {**self.row(), "jct": self.jct, "explain": self.explain}


def split_policy(name: str) -> tuple[str, str | None]:
    base, _, source = name.partition("@")
    if base not in REGISTRY:
        raise ValueError(f"unknown policy {base!r} (known: {', '.join(sorted(REGISTRY))})")
    if source not in ("", "predicted", "declared"):
        raise ValueError(f"policy {name!r}: demand source must be @predicted or @declared")
    return base, source or None


def extender_booking(declared_mem: int, pred_milli: int, pred_mem: int) -> tuple[int, int]:
    """What the extender books for a sharing pod that declares ``declared_mem`` MiB of GPU
    memory (no compute) and has the predictor's estimate: ``extender.demand.pod_demand``'s rule
    (memory never below either figure, compute from the prediction)."""
    pod = msgspec.convert({
        "metadata": {"name": "job", "namespace": "rec-mix", "uid": "job"},
        "spec": {"containers": [{"name": "main", "resources": {
            "requests": {RES_GPU_MEM: str(int(declared_mem))}}}]},
    }, Pod)
    d = pod_demand(pod, Prediction(gpu_milli=int(pred_milli), gpu_mem_mib=int(pred_mem)))
    return d.share_milli, d.share_mem_mib


def booking_rule(jobs: pd.DataFrame, policy: str, source: str | None):  # noqa: ANN201
    """``book(j, declared_mem) -> (milli, memory MiB)`` for the policy; milli 0 = whole GPU.
    ``declared_mem`` is the job's current declared figure (raised after running out)."""
    pol = REGISTRY[policy]()
    if getattr(pol, "exclusive", False):
        return lambda j, declared: (0, GPU_MEM_MIB)
    source = source or ("predicted" if policy == "sparse" else "declared")
    pred_milli = jobs["pred_milli"].to_numpy(dtype=np.int64)
    pred_mem = jobs["pred_mem_mib"].to_numpy(dtype=np.int64)
    if source == "predicted":
        return lambda j, declared: extender_booking(declared, pred_milli[j], pred_mem[j])
    declared_milli = jobs["declared_milli"].to_numpy(dtype=np.int64)
    by_memory = policy == "kube-shared"

    def book(j: int, declared: int) -> tuple[int, int]:
        if declared_milli[j] >= 1000:
            return 0, GPU_MEM_MIB
        if by_memory:
            return max(1, math.ceil(1000.0 * declared / GPU_MEM_MIB)), int(declared)
        return int(declared_milli[j]), int(declared)

    return book


def booked(jobs: pd.DataFrame, policy: str, source: str | None) -> tuple[np.ndarray, np.ndarray]:
    """(milli, memory MiB) each job books at its first attempt; milli 0 = a whole GPU."""
    book = booking_rule(jobs, policy, source)
    declared = jobs["declared_mem_mib"].to_numpy(dtype=np.int64)
    pairs = [book(j, int(declared[j])) for j in range(len(jobs))]
    return (np.array([p[0] for p in pairs], dtype=np.int64),
            np.array([p[1] for p in pairs], dtype=np.int64))


def share_demand(uid: str, cpu: int, host_mem: int, milli: int, mem: int,
                 job_class: str) -> TraceDemand:
    if milli <= 0:
        c = ContainerRequest("main", 1, 0, 0)
        return TraceDemand(uid=uid, namespace="rec-mix", name=uid, containers=(c,),
                           whole_gpus=1, share_milli=0, share_mem_mib=0, job_class=job_class,
                           cpu_milli=cpu, host_mem_mib=host_mem, gpu_milli=1000, num_gpu=1)
    c = ContainerRequest("main", 0, int(milli), int(mem))
    return TraceDemand(uid=uid, namespace="rec-mix", name=uid, containers=(c,), whole_gpus=0,
                       share_milli=int(milli), share_mem_mib=int(mem), job_class=job_class,
                       share_containers=(c,), cpu_milli=cpu, host_mem_mib=host_mem,
                       gpu_milli=int(milli), num_gpu=1)


def rec_nodes(rng: np.random.Generator, gpus_wanted: float, nodes_path: str | None,
              node_cpu: int = NODE_CPU_MILLI, node_mem: int = NODE_MEM_MIB) -> pd.DataFrame:
    """8-GPU H200 nodes: sampled from a node list (its CPU and memory) when one is given,
    else ``ceil(gpus_wanted / 8)`` nodes with the given host."""
    if nodes_path:
        nodes = load_nodes(nodes_path)
        nodes = nodes[nodes["gpu"] > 0].reset_index(drop=True)
        nodes = sample_nodes(nodes, gpus_wanted, rng)
    else:
        n = max(1, math.ceil(gpus_wanted / 8))
        nodes = pd.DataFrame({"sn": [f"h200-node-{i:04d}" for i in range(n)],
                              "cpu_milli": node_cpu, "memory_mib": node_mem, "gpu": 8})
    nodes["model"] = GPU_MODEL
    return nodes


def run_recmix(
    policy: str, seed: int, *, mode: str = "high-load", n_jobs: int = 1000,
    mix: str = DEFAULT_MIX, pad: float = 1.5, pad_spread: float = 0.3, overload: float = 4.0,
    load: float = 1.0, oom_bump: float = 1.5, holdout_only: bool = False,
    nodes_path: str | None = None, node_cpu: int = NODE_CPU_MILLI,
    node_mem: int = NODE_MEM_MIB, interference: str = "learned", policy_setup=None,
    detail: dict | None = None, queue_order: str = "product", queue_bands: int = DEFAULT_BANDS,
) -> RecMixRun:
    """One run. ``detail``, when given, is filled with what the run did per job and why jobs
    waited (``bench/sim/recmix_explain.py`` reads it); the run is the same either way."""
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    if queue_order not in QUEUE_ORDERS:
        raise ValueError(f"queue order {queue_order!r}: one of {', '.join(QUEUE_ORDERS)}")
    jobs = build_jobs(n_jobs, rng, mix=mix, pad=pad, pad_spread=pad_spread,
                      holdout_only=holdout_only).jobs
    longest_first = queue_order == "longest-first"
    if longest_first:  # same jobs, queue by solo time (an oracle no scheduler has)
        jobs = jobs.sort_values("duration", ascending=False, kind="stable").reset_index(
            drop=True)
    work = jobs["duration"].to_numpy(dtype=np.float64)
    nodes = rec_nodes(rng, work.sum() / (overload * work.max()), nodes_path, node_cpu, node_mem)
    base, source = split_policy(policy)
    rule = queue_rule(queue_order, base)  # product: sparse's shipped rule
    order = banded_queue(rule, base)
    rank = (queue_rank(jobs, queue_bands, order) if order
            else np.zeros(len(jobs), dtype=np.int64))
    if longest_first:
        rank = -work
    book_of = booking_rule(jobs, base, source)
    declared = jobs["declared_mem_mib"].to_numpy(dtype=np.int64).copy()
    milli, mem = booked(jobs, base, source)
    pol = placement_policy(base, seed, typical_tasks(pd.DataFrame({
        "cpu_milli": jobs["cpu_milli"], "gpu_milli": np.where(milli > 0, milli, 1000),
        "num_gpu": 1, "gpu_spec": ""})))
    sim = SimCluster(nodes, list(nodes["sn"]), pol)
    book = None
    if interference == "learned":
        model = default_pair_model()
        if model is None:
            raise RuntimeError("no shipped pair model: run `sparse-bench interference train "
                               "--install`, or replay with --interference matrix")
        book = sim.state.profiles = ProfileBook(model)
    if policy_setup is not None:
        policy_setup(sim, jobs)
    n_gpus = sim.total_milli // 1000
    arrive = arrival_times(mode, jobs["created"].to_numpy(dtype=np.float64), work.sum(),
                           n_gpus, load)
    util = jobs["util"].to_numpy()
    sm = jobs["sm"].to_numpy()
    dram = jobs["dram"].to_numpy()
    real_mem = jobs["mem_real_mib"].to_numpy()
    classes = jobs["job_class"].to_numpy()
    cpu = jobs["cpu_milli"].to_numpy()
    host = jobs["host_mem_mib"].to_numpy()
    work_bound = float((milli.clip(0, 1000) / 1000.0 + (milli <= 0)) @ work / work.sum())
    mem = mem.copy()
    milli = milli.copy()

    remaining = work.copy()
    speed = np.zeros(len(jobs))
    last = np.zeros(len(jobs))
    version = np.zeros(len(jobs), dtype=np.int64)
    started = np.full(len(jobs), np.nan)
    run_start = np.zeros(len(jobs))
    done = np.full(len(jobs), np.nan)
    shared = np.zeros(len(jobs), dtype=bool)
    gpu_jobs: dict[int, list[int]] = {}
    job_gpu: dict[int, int] = {}
    events: list[tuple[float, int, int, int]] = []  # (time, kind 0 finish/1 arrive/2 oom, job, ver)
    for j in range(len(jobs)):
        heapq.heappush(events, (float(arrive[j]), 1, j, 0))
    queue = RankedQueue(rank)  # by rank (band), then by when it joined: FIFO within a band
    pending, wait = queue.jobs, queue.wait
    family = jobs["family"].to_numpy()
    critical = (CriticalPath(predicted_durations(jobs), np.where(milli > 0, milli / 1000.0, 1.0),
                             n_gpus, queue,
                             path_margin(rule, classes, family),
                             rule in OBSERVED_RATE,
                             critical_mask(predicted_durations(jobs), DurationBands.log_spaced(
                                 *duration_range(), queue_bands))
                             if rule in BANDS_ONLY else None,
                             drain_scale=drain_scale(rule, classes, family),
                             arrive=arrive if rule in ARRIVAL_AWARE else None,
                             slack_order=rule in SLACK_ORDER)
                if rule in PATH_MARGINS and base == "sparse" else None)
    share = None
    if rule.startswith("critical-share") and base == "sparse":
        pred_s = predicted_durations(jobs)
        cf = DurationBands.log_spaced(*duration_range(), queue_bands, order="critical-first")
        share = CriticalShare(pred_s, np.where(milli > 0, milli / 1000.0, 1.0), n_gpus, queue,
                              critical_mask(pred_s, cf),
                              None if rule.endswith("-sf") else band_rank(pred_s, cf))
    ooms = 0
    attempt = np.zeros(len(jobs), dtype=np.int64)
    alloc_area = sm_area = backlog_area = backlog_time = 0.0
    sm_now = 0.0
    gpu_sm: dict[int, float] = {}
    t_prev = now = 0.0
    trace = _Trace(len(jobs), n_gpus)

    def set_speed(j: int, value: float) -> None:
        remaining[j] -= (now - last[j]) * speed[j]
        last[j] = now
        speed[j] = value
        version[j] += 1
        heapq.heappush(events, (now + max(remaining[j], 0.0) / value, 0, j, int(version[j])))

    def refresh(g: int) -> None:
        nonlocal sm_now
        members = gpu_jobs.get(g, [])
        if len(members) > 1:
            for j in members:
                shared[j] = True
        new = shared_speeds(util[members], sm[members], dram[members]) if members else []
        for j, s in zip(members, new, strict=True):
            if s != speed[j]:
                set_speed(j, float(s))
        delivered = float(np.dot(sm[members], speed[members])) if members else 0.0
        sm_now += delivered - gpu_sm.get(g, 0.0)
        gpu_sm[g] = delivered

    def try_start(j: int) -> bool:
        uid = f"job-{j}-{attempt[j]}"
        d = share_demand(uid, int(cpu[j]), int(host[j]), int(milli[j]), int(mem[j]),
                         str(classes[j]))
        if book is not None:  # its solo profile, as the cluster's metrics report it
            book.add(uid, (100.0 * util[j], 100.0 * dram[j], float(real_mem[j])))
        placed = sim.schedule(d, now)
        if placed is None:
            trace.blocked(sim, d)
            if book is not None:
                book.remove(uid)
            return False
        if np.isnan(started[j]):
            started[j] = now
        run_start[j] = now
        last[j] = now
        speed[j] = 0.0
        g = sim.state.gpu_index[placed.reservation.allocations[0].gpu]
        gpu_jobs.setdefault(g, []).append(j)
        job_gpu[j] = g
        trace.started(j, g, gpu_jobs[g])
        refresh(g)
        if milli[j] > 0 and real_mem[j] > mem[j]:  # runs out of memory at its peak
            fail_at = now + min(OOM_AFTER_S, 0.1 * work[j])
            heapq.heappush(events, (fail_at, 2, j, int(attempt[j])))
        return True

    def stop(j: int) -> None:
        sim.release(f"job-{j}-{attempt[j]}")
        if book is not None:
            book.remove(f"job-{j}-{attempt[j]}")
        g = job_gpu.pop(j)
        gpu_jobs[g].remove(j)
        version[j] += 1
        speed[j] = 0.0
        refresh(g)

    def retry() -> None:
        if critical is not None:
            critical.promote(now, started, done)
        if share is not None:
            share.reorder(pending, now, started, done)
        retry_pending(pending, lambda j: (None, (int(milli[j]), int(mem[j]), int(cpu[j]),
                                                 int(host[j]))), try_start)

    while events:
        t, kind, j, ver = heapq.heappop(events)
        if kind == 0 and (ver != version[j] or not np.isnan(done[j])):
            continue
        if kind == 2 and (ver != attempt[j] or j not in job_gpu):
            continue
        dt = t - t_prev
        alloc_area += sim.allocated_milli * dt
        sm_area += sm_now * dt
        if pending:  # jobs were waiting: the cluster had more work than it placed
            backlog_area += sm_now * dt
            backlog_time += dt
        trace.advance(dt, gpu_jobs, bool(pending), sim)
        t_prev = now = t
        if kind == 1:  # every job arriving now, tried in queue order
            batch = arriving_now(events, t, j, share, started, done)
            for k in queue.arrival_order(batch):
                if not try_start(k):
                    wait(k)
        elif kind == 2:
            ooms += 1
            stop(j)
            remaining[j] = work[j]
            attempt[j] += 1
            # the user raises the figure they declare; the booking follows the policy's rule
            declared[j] = min(GPU_MEM_MIB, int(math.ceil(max(declared[j], mem[j]) * oom_bump)))
            milli[j], mem[j] = book_of(j, int(declared[j]))
            wait(j)
            retry()
        else:
            done[j] = now
            remaining[j] = 0.0
            stop(j)
            retry()
    makespan = float(np.nanmax(done) - arrive.min())
    jct = done - arrive
    stretch = ((done - run_start) / work)[shared]
    info = dict(trace.result(), jobs=jobs, arrive=arrive, first_start=started,
                run_start=run_start, done=done, work=work, milli=milli, mem=mem, rank=rank,
                gpus=n_gpus, node_cpu=sim.host.cpu_cap.copy(),
                node_mem=sim.host.mem_cap.copy(), sm_area=sm_area, ooms=ooms)
    if detail is not None:
        detail.update(info)
    return RecMixRun(
        workload="rec-mix", policy=policy, seed=seed,
        mode=mode if queue_order == "product" else f"{mode}-{queue_order}", jobs=len(jobs),
        gpus=n_gpus,
        makespan=makespan, jct_mean=float(np.nanmean(jct)),
        jct_p95=float(np.nanpercentile(jct, 95)),
        queue_mean=float(np.nanmean(started - arrive)),
        alloc_mean=alloc_area / max(t_prev, 1e-9) / sim.total_milli * 100.0,
        sm_util_mean=sm_area / max(t_prev, 1e-9) / n_gpus * 100.0,
        sm_util_backlog=(backlog_area / backlog_time / n_gpus * 100.0 if backlog_time
                         else float("nan")),
        work_per_gpu_hour=float(work.sum()) / (n_gpus * makespan) if makespan else 0.0,
        share_stretch=float(np.mean(stretch)) if len(stretch) else float("nan"),
        oom_events=ooms, seconds=time.perf_counter() - t0,
        work_bound=work_bound,
        jct=[round(float(x), 1) for x in np.sort(jct)],
        explain=summarize(info),
    )


def queue_rank(jobs: pd.DataFrame, count: int = DEFAULT_BANDS,
               order: str = "longest-first") -> np.ndarray:
    """Each job's place in a banded queue (lower first): minus the priority the job controller
    gives it (extender/queueorder.py) from its predicted duration, with bands log-spaced over
    the trace's duration range."""
    bands = DurationBands.log_spaced(*duration_range(), count, order=order)
    return band_rank(predicted_durations(jobs), bands)


def predicted_durations(jobs: pd.DataFrame) -> np.ndarray:
    """Each job's declared training length (steps: its duration over its measured solo step
    time) x the predictor's step time: what the job controller predicts."""
    steps = np.maximum(1, np.round(jobs["duration"].to_numpy(float)
                                   / jobs["step_s"].to_numpy(float)))
    pred = jobs["pred_step_s"].to_numpy(float)
    return np.array([predicted_duration(int(n), float(p))
                     for n, p in zip(steps, pred, strict=True)], dtype=np.float64)


class _Trace:
    """What ``run_recmix(detail=...)`` records: each job's co-runners and GPU, how many jobs
    shared busy GPUs over time, and for every failed placement which resource was short."""

    def __init__(self, n_jobs: int, n_gpus: int) -> None:
        self.corunners: list[set[int]] = [set() for _ in range(n_jobs)]
        self.gpu = np.full(n_jobs, -1, dtype=np.int64)
        self.busy_area = 0.0  # GPU-seconds with at least one job
        self.jobs_area = 0.0  # job-seconds on those GPUs
        self.backlog_busy = self.backlog_jobs = self.backlog_time = 0.0
        self.reasons: dict[str, int] = {}
        self.backlog_used: dict[str, float] = {}  # booked fraction x seconds, while jobs wait

    def started(self, j: int, g: int, members: list[int]) -> None:
        self.gpu[j] = g
        for k in members:
            if k != j:
                self.corunners[j].add(k)
                self.corunners[k].add(j)

    def advance(self, dt: float, gpu_jobs: dict[int, list[int]], backlog: bool,
                sim: SimCluster) -> None:
        counts = [len(m) for m in gpu_jobs.values() if m]
        busy, total = len(counts), sum(counts)
        self.busy_area += busy * dt
        self.jobs_area += total * dt
        if backlog:
            self.backlog_busy += busy * dt
            self.backlog_jobs += total * dt
            self.backlog_time += dt
            st, h = sim.state, sim.host
            used = {"compute share": st.milli_used.sum() / st.milli_cap.sum(),
                    "GPU memory": st.mem_used.sum() / st.mem_cap.sum(),
                    "host CPU": 1.0 - h.cpu_left.sum() / h.cpu_cap.sum(),
                    "host memory": 1.0 - h.mem_left.sum() / h.mem_cap.sum()}
            for k, v in used.items():
                self.backlog_used[k] = self.backlog_used.get(k, 0.0) + float(v) * dt

    def blocked(self, sim: SimCluster, d: TraceDemand) -> None:
        """Why a pod found no GPU: the first resource short on every GPU of a node with room
        on the host (compute share, memory, both but on different GPUs) or the host itself."""
        st, h = sim.state, sim.host
        host_ok = (h.cpu_left >= d.cpu_milli) & (h.mem_left >= d.host_mem_mib)
        gpu_host = host_ok[st.gpu_node]
        if d.whole_gpus:
            milli_ok = st.milli_used == 0
            mem_ok = st.mem_used == 0
        else:
            milli_ok = st.milli_free >= d.share_milli
            mem_ok = st.mem_free >= d.share_mem_mib
        if not gpu_host.any():
            why = "host CPU/memory"
        elif not (milli_ok & gpu_host).any() and not (mem_ok & gpu_host).any():
            why = "compute share and memory"
        elif not (milli_ok & gpu_host).any():
            why = "compute share (sum of booked milli)"
        elif not (mem_ok & gpu_host).any():
            why = "GPU memory"
        elif not (milli_ok & mem_ok & gpu_host).any():
            why = "compute and memory free on different GPUs"
        else:
            why = "policy declined a fitting GPU"
        self.reasons[why] = self.reasons.get(why, 0) + 1

    def result(self) -> dict:
        return {"corunners": self.corunners, "gpu": self.gpu, "busy_area": self.busy_area,
                "jobs_area": self.jobs_area, "backlog_busy": self.backlog_busy,
                "backlog_jobs": self.backlog_jobs, "blocked": dict(self.reasons),
                "backlog_used": dict(self.backlog_used), "backlog_time": self.backlog_time}
