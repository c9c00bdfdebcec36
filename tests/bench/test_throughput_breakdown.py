"""The throughput bench's per-pod breakdown from two /metrics scrapes."""

from __future__ import annotations

import pytest

from bench.throughput.breakdown import Samples, extender_breakdown, scheduler_breakdown

BEFORE = """
# HELP sparse_extender_request_duration_seconds x
sparse_extender_request_duration_seconds_count{verb="filter"} 10
sparse_extender_request_duration_seconds_sum{verb="filter"} 0.05
sparse_extender_stage_duration_seconds_count{verb="filter",stage="compute"} 10
sparse_extender_stage_duration_seconds_sum{verb="filter",stage="compute"} 0.03
sparse_extender_cost_reuse_total{cache="cycle",result="hit"} 5
sparse_extender_event_loop_lag_seconds_bucket{le="0.001"} 10
sparse_extender_event_loop_lag_seconds_bucket{le="0.01"} 10
sparse_extender_event_loop_lag_seconds_bucket{le="+Inf"} 10
sparse_extender_event_loop_lag_seconds_count 10
sparse_extender_event_loop_lag_seconds_sum 0.001
scheduler_scheduling_algorithm_duration_seconds_count 4
scheduler_scheduling_algorithm_duration_seconds_sum 0.1
"""
AFTER = """
sparse_extender_request_duration_seconds_count{verb="filter"} 30
sparse_extender_request_duration_seconds_sum{verb="filter"} 0.11
sparse_extender_stage_duration_seconds_count{verb="filter",stage="compute"} 30
sparse_extender_stage_duration_seconds_sum{verb="filter",stage="compute"} 0.07
sparse_extender_stage_duration_seconds_count{verb="filter",stage="ledger"} 2
sparse_extender_stage_duration_seconds_sum{verb="filter",stage="ledger"} 0.004
sparse_extender_cost_reuse_total{cache="cycle",result="hit"} 25
sparse_extender_cost_reuse_total{cache="cycle",result="miss"} 1
sparse_extender_event_loop_lag_seconds_bucket{le="0.001"} 10
sparse_extender_event_loop_lag_seconds_bucket{le="0.01"} 110
sparse_extender_event_loop_lag_seconds_bucket{le="+Inf"} 110
sparse_extender_event_loop_lag_seconds_count 110
sparse_extender_event_loop_lag_seconds_sum 0.301
scheduler_scheduling_algorithm_duration_seconds_count 24
scheduler_scheduling_algorithm_duration_seconds_sum 0.5
"""


def test_breakdown_is_the_runs_delta_per_call() -> None:
    before, after = Samples.parse(BEFORE), Samples.parse(AFTER)
    ext = extender_breakdown(before, after)
    assert ext["filter"]["calls"] == 20
    assert ext["filter"]["total_ms"] == pytest.approx(3.0)
    assert ext["filter"]["compute"] == pytest.approx(2.0)
    assert ext["filter"]["ledger"] == pytest.approx(0.2)  # 4 ms over 20 calls
    assert ext["reuse"]["cycle"] == {"hit": 20, "miss": 1}
    assert ext["event loop"]["total_ms"] == pytest.approx(3.0)
    assert ext["event loop"]["p99"] == pytest.approx(10.0)  # the bucket holding it
    sched = scheduler_breakdown(before, after, pods=20)
    assert sched["algorithm_ms"] == pytest.approx(20.0)
    assert sched["attempts_per_pod"] == pytest.approx(1.0)
