"""Queue bands by predicted duration (extender/queueorder.py): the one rule the job controller
and the simulator share."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from extender.queueorder import DurationBands, predicted_duration

BANDS = DurationBands.log_spaced(60, 14_400, 4)


def test_log_spaced_edges_split_the_range_evenly():
    assert BANDS.count == 4 and len(BANDS.edges_s) == 3
    ratios = [b / a for a, b in zip((60, *BANDS.edges_s), (*BANDS.edges_s, 14_400),
                                    strict=True)]
    assert ratios == pytest.approx([240 ** 0.25] * 4)
    assert [BANDS.band(d) for d in (1, 60, 235, 237, 1000, 14_400, 10**9)] == [
        0, 0, 0, 1, 2, 3, 3]


@given(st.floats(1e-3, 1e9), st.floats(1e-3, 1e9))
def test_band_and_longest_first_priority_are_monotone(a, b):
    lo, hi = sorted((a, b))
    assert BANDS.band(lo) <= BANDS.band(hi)
    assert BANDS.priority(BANDS.band(lo)) <= BANDS.priority(BANDS.band(hi))
    short = DurationBands(BANDS.edges_s, order="shortest-first")
    assert short.priority(short.band(lo)) >= short.priority(short.band(hi))


def test_priorities_classes_and_default_band():
    assert [BANDS.priority(i) for i in range(4)] == [1000, 1001, 1002, 1003]
    short = DurationBands(BANDS.edges_s, order="shortest-first", base_priority=10)
    assert [short.priority(i) for i in range(4)] == [13, 12, 11, 10]
    critical = DurationBands(BANDS.edges_s, order="critical-first")
    assert critical.critical_count == 2  # a band spans x3.9: only the next one is within x2
    assert [critical.priority(i) for i in range(4)] == [1001, 1000, 1002, 1003]
    only_top = DurationBands(BANDS.edges_s, order="critical-first", critical=1)
    assert [only_top.priority(i) for i in range(4)] == [1002, 1001, 1000, 1003]
    assert BANDS.class_name(3) == "sparse-duration-3"
    assert BANDS.band(None) == 2  # the middle band, rounded up
    assert DurationBands(BANDS.edges_s, default_band=0).band(None) == 0
    assert BANDS.describe(0).startswith("<") and BANDS.describe(3).startswith(">=")


@pytest.mark.parametrize("bad", [0, -5, math.nan, math.inf, "long"])
def test_bad_durations_are_refused_with_a_message(bad):
    with pytest.raises(ValueError, match="predicted duration"):
        BANDS.band(bad)


@pytest.mark.parametrize("kwargs, match", [
    ({"edges_s": (10, 5)}, "increase"),
    ({"edges_s": (10,), "order": "random"}, "queue order"),
    ({"edges_s": (10,), "default_band": 2}, "default band"),
    ({"edges_s": (10,), "base_priority": 2_000_000_000}, "base priority"),
    ({"edges_s": (0,)}, "band edge"),
])
def test_bad_configuration_is_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DurationBands(**kwargs)
    with pytest.raises(ValueError, match="exceed"):
        DurationBands.log_spaced(100, 10)
    with pytest.raises(ValueError, match="count"):
        DurationBands.log_spaced(10, 100, 0)
    with pytest.raises(ValueError, match="band 4"):
        BANDS.priority(4)


def test_predicted_duration_from_declared_steps():
    assert predicted_duration(1000, 0.05) == pytest.approx(50.0)
    assert predicted_duration(None, 0.05) is None  # nothing declared: the default band
    assert predicted_duration(1000, None) is None and predicted_duration(1000, 0.0) is None
    for bad in (0, -3, 2.5, True, "100", 10**13):
        with pytest.raises(ValueError, match="spec.steps"):
            predicted_duration(bad, 0.05)


@given(st.integers(1, 16), st.integers(0, 1000), st.floats(1.1, 10.0), st.data())
def test_every_order_is_a_permutation_and_critical_first_is_lpt_then_spt(n, base, ratio,
                                                                       data):
    """Each order gives the ``n`` bands the ``n`` values ``base .. base + n - 1`` (the chart's
    classes); critical-first takes its critical bands first, longest first, then the others
    shortest first."""
    edges = tuple(10.0 * ratio ** k for k in range(n - 1))
    c = data.draw(st.integers(1, n))
    for order in ("longest-first", "shortest-first", "critical-first"):
        b = DurationBands(edges, order=order, base_priority=base, critical=c)
        assert sorted(b.priority(i) for i in range(n)) == list(range(base, base + n))
    critical = DurationBands(edges, order="critical-first", base_priority=base, critical=c)
    taken = sorted(range(n), key=critical.priority, reverse=True)  # popped first .. last
    assert taken == [*range(n - 1, n - 1 - c, -1), *range(n - c)]
    auto = DurationBands(edges, order="critical-first").critical_count
    # the longest band, and a band below it only if x2 on its upper edge reaches the top band
    assert auto == 1 + sum(1 for e in edges if 2 * e > edges[-1])
    assert n == 1 or auto >= 2  # the band just below the top ends where the top begins


def test_critical_count_is_checked():
    with pytest.raises(ValueError, match="critical bands"):
        DurationBands(BANDS.edges_s, order="critical-first", critical=5)
    with pytest.raises(ValueError, match="critical bands"):
        DurationBands(BANDS.edges_s, order="critical-first", critical=0)


@pytest.mark.parametrize("order", ["longest-first", "shortest-first", "critical-first"])
def test_a_long_gang_goes_ahead_of_every_band_a_short_one_keeps_its_band(order):
    bands = DurationBands.log_spaced(60, 14_400, 4, order=order)
    top = max(bands.priority(b) for b in range(4))
    long_band, short_band = 3, 0
    assert bands.queue_class(long_band, 8) == ("sparse-duration-gang", bands.gang_priority())
    assert bands.gang_priority() > top
    # critical-first's second critical band counts too (a job there may really be long)
    assert bands.is_critical_gang(2, 2) and not bands.is_critical_gang(1, 2)
    # a short gang, and a long job of one GPU or a share, keep their band's class
    assert bands.queue_class(short_band, 8) == (bands.class_name(0), bands.priority(0))
    for gpus in (0, 1):
        assert bands.queue_class(long_band, gpus) == (bands.class_name(3), bands.priority(3))


def test_latest_start_comes_once_the_job_may_outlast_the_drain():
    from extender.queueorder import PREDICTION_MARGIN, latest_start_come

    # 100 GPUs, 360,000 GPU-s left: 3,600 s to drain
    assert latest_start_come(3_600 / PREDICTION_MARGIN, 360_000.0, 100)
    assert not latest_start_come(3_500 / PREDICTION_MARGIN, 360_000.0, 100)
    assert latest_start_come(1.0, 0.0, 100)  # nothing else left: any job is critical
    assert not latest_start_come(0.0, 0.0, 100) and not latest_start_come(5.0, 1.0, 0)


def test_the_drain_shrinks_only_at_the_gpus_less_the_work_still_arriving():
    from extender.queueorder import drain_time, latest_start_come

    assert drain_time(360_000.0, 100) == 3_600.0
    assert drain_time(360_000.0, 100, 40.0) == 6_000.0  # 60 GPU-s/s net
    assert drain_time(360_000.0, 100, 100.0) == math.inf  # arrivals keep up: no end in sight
    assert drain_time(0.0, 100, 500.0) == 0.0
    # critical with no arrivals, not while arrivals keep the backlog from shrinking
    assert latest_start_come(3_600.0, 360_000.0, 100, 1.0)
    assert not latest_start_come(3_600.0, 360_000.0, 100, 1.0, 40.0)
    assert not latest_start_come(1e9, 360_000.0, 100, 1.0, 120.0)


def test_arrival_rate_counts_the_work_submitted_over_the_horizon_not_the_first_batch():
    import numpy as np

    from extender.queueorder import arrival_rate

    batch = np.zeros(5)  # all submitted at once: a backlog, not a flow
    assert arrival_rate(batch, np.full(5, 100.0), 50.0, 1_000.0) == 0.0
    arrive = np.array([0.0, 10.0, 20.0, 30.0, 40.0, 500.0])
    work = np.array([7.0, 100.0, 100.0, 100.0, 100.0, 1e6])
    # at t = 40 over a 1,000 s horizon: 400 GPU-s over the 40 s since the first submission
    # (the job at t = 500 is not submitted yet)
    assert arrival_rate(arrive, work, 40.0, 1_000.0) == 10.0
    assert arrival_rate(arrive, work, 40.0, 20.0) == 10.0  # the last 20 s: jobs at 30, 40
    assert arrival_rate(arrive, work, 45.0, 10.0) == 10.0  # the last 10 s: the job at 40
    assert arrival_rate(arrive, work, 0.0, 1_000.0) == 0.0
    assert arrival_rate(np.array([]), np.array([]), 10.0, 5.0) == 0.0


def test_a_job_is_due_when_it_may_outlast_the_drain_of_the_submitted_work():
    import numpy as np

    from extender.queueorder import latest_start_due, slack_rank

    nan = np.full(3, np.nan)
    predicted = np.array([400.0, 100.0, np.nan])
    args = dict(margin=2.0, expected=predicted, booked=np.ones(3), finished=nan)
    # 500 GPU-s known on 1 GPU (the unknown job is not counted): job 0 at x2 outlasts it
    due = latest_start_due(0.0, 1.0, np.zeros(3), predicted, started=nan, **args)
    assert due.tolist() == [True, False, False]
    # job 1 runs; job 0 submitted later, not yet known at t = 0
    started = np.array([np.nan, 0.0, np.nan])
    assert not latest_start_due(0.0, 1.0, np.array([50.0, 0, 0]), predicted, started=started,
                                **args).any()
    # on 100 GPUs a flow of 400,000 GPU-s per second keeps the backlog from shrinking
    flow = latest_start_due(1.0, 100.0, np.array([0.0, 0.5, 1.0]),
                            np.array([1e6, 2e5, 2e5]), 1.0, np.array([1e6, 2e5, 2e5]),
                            np.ones(3), nan, nan)
    assert not flow.any()
    assert slack_rank(600.0, 3.0) < slack_rank(1_000.0, 1.0)


def test_long_gangs_go_first_only_while_below_their_share_of_the_gpus():
    import numpy as np

    from extender.queueorder import gangs_ahead

    nan = np.full(4, np.nan)
    expected = np.array([1_000.0, 1_000.0, 500.0, 500.0])  # GPU-s: 4,000 gang, 1,000 others
    booked = np.array([2.0, 2.0, 1.0, 1.0])
    gang = np.array([True, True, False, False])
    args = dict(submitted=np.zeros(4), expected=expected, booked=booked, finished=nan)
    # nothing running: the gangs (80 % of the work) go first
    assert gangs_ahead(0.0, 10.0, started=nan, gang=gang, **args)
    # one gang runs on 2 of 10 GPUs at t = 0: 2 < 0.8 x 10, still ahead
    running = np.array([0.0, np.nan, np.nan, np.nan])
    assert gangs_ahead(0.0, 10.0, started=running, gang=gang, **args)
    # on 2 GPUs the running gang holds 2 >= 0.8 x 2: the waiting gang keeps its band
    assert not gangs_ahead(0.0, 2.0, started=running, gang=gang, **args)
    # no gang, or only gangs (ahead until they hold every GPU), or no work left
    assert not gangs_ahead(0.0, 10.0, started=nan, gang=np.zeros(4, bool), **args)
    assert gangs_ahead(0.0, 10.0, started=running, gang=np.ones(4, bool), **args)
    assert not gangs_ahead(0.0, 2.0, started=np.array([0.0, 0.0, nan[0], nan[0]]),
                           gang=np.ones(4, bool), **args)
    done = np.zeros(4)
    assert not gangs_ahead(0.0, 10.0, started=np.zeros(4), gang=gang,
                           **{**args, "finished": done})
    # a running gang past its expected end counts no work left; unknown jobs are not counted
    late = gangs_ahead(2_000.0, 4.0, started=running, gang=gang,
                       **{**args, "expected": np.array([1_000.0, np.nan, 500.0, 500.0])})
    assert not late  # the gangs' share is 0 (the one waiting gang unknown): 2 GPUs >= 0
    assert not gangs_ahead(0.0, 0.0, started=nan, gang=gang, **args)
