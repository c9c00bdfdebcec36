"""The openb replay's queue: sparse's as its job controller orders it (predicted-duration bands
with the predictor's measured step-time error, long gangs first, the bounded backfill on
request); the stock schedulers FIFO."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.sim.duration_error import predicted_durations
from bench.sim.queueing import AdmissionGate, RankedQueue, retry_pending
from bench.sim.replay import queue_rank

ERRORS = {"": np.log([0.5, 2.0]), "cnn": np.log([0.25])}


def _small_trace(tmp_path, seed: int, node_gpus: list[int], gpu_counts: list[int],
                 share_milli: list[int]) -> tuple[str, dict]:
    """An openb-shaped trace of 80 pods on ``node_gpus`` nodes (sizes drawn from
    ``gpu_counts``, one-GPU pods a share from ``share_milli``): its pod path and replay args."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    nodes = pd.DataFrame({"sn": [f"n{i}" for i in range(len(node_gpus))], "cpu_milli": 96000,
                          "memory_mib": 262144, "gpu": node_gpus, "model": "G2"})
    n = 80
    num = rng.choice(gpu_counts, n)
    pods = pd.DataFrame({
        "name": [f"p{i}" for i in range(n)], "cpu_milli": 4000, "memory_mib": 8192,
        "num_gpu": num, "gpu_milli": np.where(num == 1, rng.choice(share_milli, n), 1000),
        "gpu_spec": "", "qos": "LS", "pod_phase": "Running",
        "creation_time": np.sort(rng.integers(0, 3000, n)),
        "deletion_time": np.sort(rng.integers(0, 3000, n)) + rng.integers(60, 9000, n),
        "scheduled_time": 0})
    nodes.to_csv(tmp_path / "n.csv", index=False)
    pods.to_csv(tmp_path / "p.csv", index=False)
    return str(tmp_path / "p.csv"), {"nodes_path": str(tmp_path / "n.csv"), "n_jobs": 60,
                                     "overload": 2.0}


def test_predicted_duration_carries_a_measured_error_per_class_seeded():
    work = np.full(400, 1000.0)
    classes = np.array(["cnn"] * 200 + ["rl"] * 200)  # rl: no measured rows, all rows' pool
    a = predicted_durations(work, classes, 7, errors=ERRORS)
    assert np.array_equal(a, predicted_durations(work, classes, 7, errors=ERRORS))
    assert not np.array_equal(a, predicted_durations(work, classes, 8, errors=ERRORS))
    assert np.allclose(a[:200], 250.0)  # the class's own rows
    assert set(np.round(a[200:])) == {500.0, 2000.0}
    part = predicted_durations(work, classes, 7, errors=ERRORS, declared_share=0.5)
    known = np.isfinite(part)
    assert 0.3 < known.mean() < 0.7  # the rest declare no steps
    with pytest.raises(ValueError, match="declared share"):
        predicted_durations(work, classes, 7, errors=ERRORS, declared_share=1.5)


def test_the_shipped_error_source_is_the_predictors_measured_rows():
    from bench.sim.duration_error import step_time_errors

    err = step_time_errors()
    assert len(err[""]) >= 50 and np.isfinite(err[""]).all()
    assert "recommendation" in err
    # about x2 for most rows, as the predictor documents; not an exact oracle
    assert 0.6 < np.mean(np.abs(err[""]) < np.log(2.0)) < 1.0 and np.std(err[""]) > 0.05


def test_sparse_queues_long_gangs_first_then_by_band_the_stock_schedulers_fifo(monkeypatch):
    import bench.sim.replay as replay

    monkeypatch.setattr(replay, "predicted_durations",
                        lambda work, classes, seed, declared_share=1.0: work.astype(float))
    work = np.array([14_000.0, 100.0, 14_000.0, 2_000.0, 100.0])
    whole = np.array([0, 0, 8, 0, 8])  # job 2: a long gang; job 4: a short gang
    classes = np.array(["cnn"] * 5)
    assert not queue_rank("product", "kube-shared", work, classes, 1, whole).any()
    assert not queue_rank("fifo", "sparse", work, classes, 1, whole).any()
    shortest = queue_rank("bands-shortest-first", "sparse", work, classes, 1, whole)
    assert list(np.argsort(shortest, kind="stable")) == [2, 1, 4, 3, 0]
    critical = queue_rank("bands-critical-first", "sparse", work, classes, 1, whole)
    assert np.argmin(critical) == 2 and critical[0] < critical[1]  # long first, then short
    # as shipped (latest-start): the bands shortest first (promotion comes on top of them)
    assert (queue_rank("product", "sparse", work, classes, 1, whole) == shortest).all()


def test_the_gate_stops_the_jobs_behind_a_job_passed_over_too_long():
    queue = RankedQueue(np.zeros(4, dtype=np.int64))
    for j in range(4):
        queue.wait(j)
    gate = AdmissionGate(np.array([True, True, True, True]), max_pass_over_s=300.0)
    tried = []

    def try_start(j: int) -> bool:
        tried.append(j)
        return j != 0  # job 0 never finds room

    retry_pending(queue.jobs, lambda j: (j, (1,)), lambda j: try_start(j),
                  lambda j: gate.refused(j, 0.0))
    assert tried == [0, 1, 2, 3] and queue.jobs == [0]  # young: the others pass it
    for j in (1, 2):
        queue.wait(j)
    tried.clear()
    retry_pending(queue.jobs, lambda j: (j, (1,)), lambda j: try_start(j),
                  lambda j: gate.refused(j, 400.0))
    assert tried == [0] and queue.jobs == [0, 1, 2]  # it waited 400 s: no one passes it
    assert not gate.admits(3, queue, 400.0)
    never = AdmissionGate(np.array([False, True, True, True]), max_pass_over_s=300.0)
    never.refused(0, 0.0)
    assert not never.refused(0, 400.0)  # a job no node can ever host blocks no one


def test_the_stock_schedulers_run_as_before_and_every_job_completes(tmp_path):
    from bench.sim.replay import run_replay

    path, kw = _small_trace(tmp_path, 3, [8, 8, 4, 2, 8, 4], [1, 1, 1, 2, 8], [250, 500, 1000])
    shipped = run_replay(path, "kube-shared", 4, **kw)
    fifo = run_replay(path, "kube-shared", 4, queue_order="fifo", **kw)
    assert (shipped.makespan, shipped.jct) == (fifo.makespan, fifo.jct)
    assert fifo.mode == "high-load-fifo"
    gated = run_replay(path, "sparse", 4, pass_over_s=300.0, **kw)
    for r in (run_replay(path, "sparse", 4, **kw), gated):
        assert len(r.jct) == r.jobs and np.isfinite(r.jct).all()
        json.dumps(r.to_json())  # what runs.jsonl stores


def _waiting(bands: list[int]) -> RankedQueue:
    """A queue of jobs 0..n-1 in those bands, every one waiting, in index order."""
    queue = RankedQueue(np.array(bands, dtype=np.int64))
    for j in range(len(bands)):
        queue.wait(j)
    return queue


def test_a_long_job_whose_latest_start_has_come_goes_ahead_of_the_queue():
    from bench.sim.queueing import CriticalPath

    queue = _waiting([0, 0, 0, 5])
    predicted = np.array([100.0, 4_000.0, np.nan, 6_000.0])
    started = np.full(4, np.nan)
    done = np.full(4, np.nan)
    # 10 GPUs, 10,100 GPU-s of known work: 1,010 s to drain; x2, jobs of 505 s+ are critical
    path = CriticalPath(predicted, np.ones(4), 10, queue)
    assert path.backlog(0.0, started, done) == 10_100.0
    assert path.promote(0.0, started, done) == 2
    assert queue.jobs == [3, 1, 0, 2]  # longest predicted first; unknown never promoted
    # a running job counts only its predicted remainder, none once overdue
    started[3] = 0.0
    assert path.backlog(1_000.0, started, done) == 100.0 + 4_000.0 + 5_000.0
    assert path.backlog(7_000.0, started, done) == 4_100.0


def test_critical_path_holds_nodes_for_gangs_and_leaves_the_stock_schedulers_fifo(tmp_path):
    from bench.sim.replay import run_replay

    path, kw = _small_trace(tmp_path, 5, [8, 8, 4, 4], [1, 1, 1, 1, 8], [500, 1000])
    stock = run_replay(path, "kube-shared", 4, **kw)
    same = run_replay(path, "kube-shared", 4, queue_order="critical-path", **kw)
    assert (stock.makespan, stock.jct) == (same.makespan, same.jct)
    r = run_replay(path, "sparse", 4, queue_order="critical-path", **kw)
    assert len(r.jct) == r.jobs and np.isfinite(r.jct).all()
    assert r.explain["node_holds"]["gangs"] >= 1 and r.explain["node_holds"]["refused"] >= 1
    assert "promoted" in r.explain
    held = run_replay(path, "sparse", 4, queue_order="shortest-first-hold", **kw)
    assert "node_holds" in held.explain and "promoted" not in held.explain
    off = run_replay(path, "sparse", 4, queue_order="critical-path", holds=False, **kw)
    assert "node_holds" not in off.explain
    json.dumps(r.to_json())
    # the per-family bounds: every job still ends, and the stock schedulers stay FIFO
    for order in ("error-bound-path", "error-bound-drain"):
        b = run_replay(path, "sparse", 4, queue_order=order, **kw)
        assert np.isfinite(b.jct).all() and b.explain["promoted"] >= 1
        same = run_replay(path, "kube-shared", 4, queue_order=order, **kw)
        assert (stock.makespan, stock.jct) == (same.makespan, same.jct)


def test_drain_path_promotes_only_jobs_that_would_end_after_the_rest():
    from bench.sim.queueing import PATH_MARGINS, CriticalPath

    queue = _waiting([0, 0, 0, 5])
    predicted = np.array([100.0, 600.0, np.nan, 1_200.0])
    nan = np.full(4, np.nan)
    # 1,900 GPU-s on 1 GPU: 1,900 s to drain; the point estimate promotes nobody, x2 promotes 3
    point = CriticalPath(predicted, np.ones(4), 1, queue, PATH_MARGINS["drain-path"])
    assert point.promote(0.0, nan, nan) == 0
    assert CriticalPath(predicted, np.ones(4), 1, queue).promote(0.0, nan, nan) == 1
    assert queue.jobs[0] == 3


def test_drain_rate_is_the_predicted_work_really_retired_per_second():
    from bench.sim.queueing import CriticalPath

    queue = RankedQueue(np.zeros(3, dtype=np.int64))
    predicted = np.array([100.0, 300.0, 1_000.0])
    started = np.array([0.0, 0.0, np.nan])
    done = np.array([200.0, np.nan, np.nan])
    path = CriticalPath(predicted, np.ones(3), 8, queue, 1.0, observed_rate=True)
    # one job of 100 predicted GPU-s ended after 400 s: 0.25 GPU-s per second, not 8
    assert path.drain_rate(400.0, started, done) == 0.25
    assert path.drain_rate(400.0, started, np.full(3, np.nan)) == 8.0  # none ended yet
    assert CriticalPath(predicted, np.ones(3), 8, queue).drain_rate(400.0, started, done) == 8.0


def test_critical_share_gives_each_part_the_gpus_in_proportion_to_its_work():
    from bench.sim.queueing import CriticalShare

    # jobs 0-3 short (shortest first), 4-7 critical (their own order: 7, 6, 5, 4)
    queue = _waiting([0, 0, 1, 1, 2, 2, 2, 2])
    predicted = np.array([100.0] * 4 + [400.0] * 4)
    critical = np.array([False] * 4 + [True] * 4)
    nan = np.full(8, np.nan)
    share = CriticalShare(predicted, np.ones(8), 4, queue, critical,
                          critical_rank=np.array([0, 0, 0, 0, 3, 2, 1, 0]))
    # the critical part holds 1,600 of 2,000 GPU-s: 3.2 of the 4 GPUs, the short part 0.8
    share.reorder(queue.jobs, 0.0, nan, nan)
    assert queue.jobs == [7, 6, 5, 0, 4, 1, 2, 3]
    # a critical job already running on 4 GPUs (the critical part over its 3.5): the short
    # part goes first, then each part by turns as both are over their share
    started = np.array([np.nan] * 7 + [0.0])
    booked = np.array([1.0] * 7 + [4.0])
    share = CriticalShare(predicted, booked, 4, queue, critical)
    pending = [j for j in queue.jobs if j != 7]
    share.reorder(pending, 0.0, started, nan)  # ranks them (sorts only the queue's own list)
    ordered = sorted(pending, key=lambda k: queue.rank[k])
    assert ordered[:2] == [0, 1] and critical[ordered[2]]
    # without a critical job the order is the queue's
    fresh = RankedQueue(np.array([0, 0, 1, 1, 2, 2, 2, 2], dtype=np.int64))
    for j in (5, 0, 7, 2, 1, 3, 4, 6):
        fresh.wait(j)
    plain = CriticalShare(predicted, np.ones(8), 4, fresh, np.zeros(8, dtype=bool))
    plain.reorder(fresh.jobs, 0.0, nan, nan)
    assert fresh.jobs == [0, 1, 2, 3, 4, 5, 6, 7]


def test_critical_path_bands_promotes_only_jobs_of_the_critical_bands():
    from bench.sim.queueing import CriticalPath

    queue = RankedQueue(np.zeros(3, dtype=np.int64))
    for j in range(3):
        queue.wait(j)
    predicted = np.array([300.0, 400.0, 2_000.0])
    nan = np.full(3, np.nan)
    # 2,700 GPU-s on 10 GPUs: 270 s to drain; x2 every job's latest start has come
    assert CriticalPath(predicted, np.ones(3), 10, queue).promote(0.0, nan, nan) == 3
    queue = RankedQueue(np.zeros(3, dtype=np.int64))
    for j in range(3):
        queue.wait(j)
    bands = CriticalPath(predicted, np.ones(3), 10, queue,
                         eligible=np.array([False, False, True]))
    assert bands.promote(0.0, nan, nan) == 1 and queue.jobs == [2, 0, 1]


def test_gang_share_puts_the_long_gangs_in_their_band_once_they_hold_their_share():
    from bench.sim.queueing import CriticalPath

    # ranks: job 0 and 1 long gangs (class -5, band -1), jobs 2, 3 short one-GPU jobs (-4)
    rank = np.array([-5, -5, -4, -4], dtype=np.int64)
    queue = RankedQueue(rank.copy())
    for j in range(4):
        queue.wait(j)
    predicted = np.array([1_000.0, 1_000.0, 100.0, 100.0])
    gpus = np.array([2.0, 2.0, 1.0, 1.0])
    nan = np.full(4, np.nan)
    path = CriticalPath(predicted, gpus, 2, queue, 1.0, arrive=np.zeros(4),
                        band_rank=np.array([-1, -1, -4, -4], dtype=np.int64))
    assert path.gang.tolist() == [True, True, False, False]
    # nothing runs: the gangs (4,000 of 4,200 GPU-s) go first
    path.promote(0.0, nan, nan)
    assert queue.jobs[:2] == [0, 1]
    # job 0 runs on both GPUs (>= 0.95 x 2): job 1 waits in its band, behind the short ones
    queue.jobs.remove(0)
    started = np.array([0.0, np.nan, np.nan, np.nan])
    path.promote(10.0, started, nan)
    assert queue.jobs == [2, 3, 1]
    # without the band ranks the gangs always go first (the other orders)
    plain = RankedQueue(rank.copy())
    for j in (1, 2, 3):
        plain.wait(j)
    CriticalPath(predicted, gpus, 2, plain, 1.0, arrive=np.zeros(4)).promote(10.0, started,
                                                                              nan)
    assert plain.jobs == [1, 2, 3]


def test_every_promotion_and_share_order_queues_sparse_shortest_first_and_stock_fifo():
    from bench.sim.queueing import HOLD_ORDERS, PATH_MARGINS, banded_queue

    for order in [*PATH_MARGINS, "critical-share", "critical-share-sf"]:
        assert order in HOLD_ORDERS
        assert banded_queue(order, "sparse") == "shortest-first"
        assert banded_queue(order, "kube-shared") is None


def test_error_bound_path_promotes_each_job_by_its_own_margin():
    from bench.sim.queueing import CriticalPath

    queue = RankedQueue(np.zeros(3, dtype=np.int64))
    for j in range(3):
        queue.wait(j)
    predicted = np.array([600.0, 600.0, 100.0])
    nan = np.full(3, np.nan)
    # 1,300 GPU-s on 1 GPU: 1,300 s to drain. Same prediction, different families: only the
    # job whose family's step time is under-estimated up to x3 may outlast the drain
    path = CriticalPath(predicted, np.ones(3), 1, queue, np.array([1.0, 3.0, 3.0]))
    assert path.promote(0.0, nan, nan) == 1 and queue.jobs == [1, 0, 2]


def test_error_bound_path_takes_the_shipped_bound_of_the_family_then_the_class():
    from bench.sim.queueing import PATH_MARGINS, path_margin
    from predictor.step_bounds import load

    bounds = load()
    assert "error-bound-path" in PATH_MARGINS
    got = path_margin("error-bound-path", ["transformer", "recommendation", "no-such-class"],
                      ["bert", "no-such-family", "no-such-family"])
    assert got.tolist() == [bounds.margin("bert"), bounds.margin(job_class="recommendation"),
                            bounds.pooled]
    assert path_margin("critical-path", ["cnn"]) == 2.0


def test_error_bound_drain_counts_each_jobs_work_at_its_median_error():
    from bench.sim.queueing import CriticalPath, drain_scale

    queue = RankedQueue(np.zeros(2, dtype=np.int64))
    for j in range(2):
        queue.wait(j)
    predicted = np.array([500.0, 1_000.0])
    nan = np.full(2, np.nan)
    # raw: 1,500 GPU-s on 1 GPU, and job 0 at x2 (1,000 s) is short of the drain; counted at
    # its median x2 the drain is 3,000 s, so neither job's latest start has come
    path = CriticalPath(predicted, np.ones(2), 1, queue, 2.0, drain_scale=np.array([2.0, 2.0]))
    assert path.backlog(0.0, nan, nan) == 3_000.0 and path.promote(0.0, nan, nan) == 0
    assert CriticalPath(predicted, np.ones(2), 1, queue, 2.0).promote(0.0, nan, nan) == 1
    assert drain_scale("error-bound-path", ["cnn"]) == 1.0
    med = drain_scale("error-bound-drain", ["transformer", "cnn"], ["bert", "yolo"])
    assert 0.5 < med[0] < 1.0 < med[1]  # the step estimate over-estimates BERT, under YOLO


def test_arrival_drain_counts_submitted_work_and_waits_while_arrivals_keep_up():
    from bench.sim.queueing import CriticalPath
    from extender.queueorder import arrival_rate

    nan = np.full(4, np.nan)
    predicted = np.array([1_000.0, 100.0, 100.0, 2_000.0])

    def path(arrive, now=0.0):
        queue = RankedQueue(np.zeros(4, dtype=np.int64))
        for j in range(4):
            if arrive is None or arrive[j] <= now:
                queue.wait(j)
        return CriticalPath(predicted, np.ones(4), 2, queue, 1.0, arrive=arrive)

    # submitted at once (high load): the same as counting every job, 3,200 GPU-s on 2 GPUs
    # (1,600 s): only job 3 may outlast the drain
    everyone, batch = path(None), path(np.zeros(4))
    assert batch.backlog(0.0, nan, nan) == everyone.backlog(0.0, nan, nan) == 3_200.0
    assert batch.promote(0.0, nan, nan) == everyone.promote(0.0, nan, nan) == 1
    # job 3 not submitted yet: the drain is the others' 1,200 GPU-s (600 s), job 0 outlasts it
    later = path(np.array([0.0, 0.0, 0.0, 900.0]))
    assert later.backlog(0.0, nan, nan) == 1_200.0 and later.promote(0.0, nan, nan) == 1
    # at t = 100 jobs 1 and 2, submitted at 50 and 100, run; 200 GPU-s arrived in 100 s, as
    # fast as the 2 GPUs serve: the backlog does not shrink, job 0's latest start is not set
    flow = path(np.array([0.0, 50.0, 100.0, 900.0]), 100.0)
    started = np.array([np.nan, 50.0, 100.0, np.nan])
    backlog = flow.backlog(100.0, started, nan)
    assert backlog == 1_150.0
    assert arrival_rate(flow.arrive, predicted, 100.0, backlog / 2.0) == 2.0
    assert flow.promote(100.0, started, nan) == 0


def test_arrival_slack_puts_the_promoted_job_that_may_run_longest_first():
    from bench.sim.queueing import CriticalPath

    nan = np.full(2, np.nan)
    predicted = np.array([1_000.0, 600.0])
    margin = np.array([1.0, 3.0])  # job 1 may really run 1,800 s, job 0 1,000 s
    for slack, first in ((False, 0), (True, 1)):
        queue = RankedQueue(np.zeros(2, dtype=np.int64))
        for j in range(2):
            queue.wait(j)
        path = CriticalPath(predicted, np.ones(2), 2, queue, margin, slack_order=slack)
        assert path.promote(0.0, nan, nan) == 2 and queue.jobs[0] == first
