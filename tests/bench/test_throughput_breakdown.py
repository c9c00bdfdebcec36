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
sparse_extender_price_tables_total{result="installed"} 2
sparse_extender_price_tables_total{result="failed"} 1
sparse_extender_cache_renewals_total{result="renewed"} 1
sparse_extender_cache_renewal_steps_total 40
sparse_extender_cache_renewal_cpu_seconds_total 0.05
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
sparse_extender_price_tables_total{result="installed"} 5
sparse_extender_price_tables_total{result="dropped"} 1
sparse_extender_price_tables_total{result="failed"} 1
sparse_extender_cache_renewals_total{result="renewed"} 3
sparse_extender_cache_renewal_steps_total 100
sparse_extender_cache_renewal_cpu_seconds_total 0.125
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
    assert ext["prices"] == {"installed": 3, "dropped": 1, "failed": 0}  # over the run only
    assert ext["renewal"] == pytest.approx({"renewed": 2, "steps": 60, "cpu_ms": 75.0})
    assert ext["event loop"]["total_ms"] == pytest.approx(3.0)
    assert ext["event loop"]["p99"] == pytest.approx(10.0)  # the bucket holding it
    sched = scheduler_breakdown(before, after, pods=20)
    assert sched["algorithm_ms"] == pytest.approx(20.0)
    assert sched["attempts_per_pod"] == pytest.approx(1.0)


def test_api_requests_per_pod_by_verb_and_resource_over_the_run() -> None:
    from bench.throughput.breakdown import api_requests

    before = Samples.parse(
        'apiserver_request_total{code="201",resource="pods",subresource="binding",'
        'verb="POST"} 5\napiserver_request_total{code="201",resource="events",verb="POST"} 7\n')
    after = Samples.parse(
        'apiserver_request_total{code="201",resource="pods",subresource="binding",'
        'verb="POST"} 25\napiserver_request_total{code="409",resource="pods",'
        'subresource="binding",verb="POST"} 2\n'
        'apiserver_request_total{code="201",resource="events",verb="POST"} 17\n')
    got = api_requests(before, after, 20)
    assert got == {"POST pods/binding": pytest.approx(1.1), "POST events": pytest.approx(0.5)}
    assert list(got) == ["POST pods/binding", "POST events"]  # most first


def test_the_scheduler_breakdown_tells_scoring_and_batching() -> None:
    after = Samples.parse(
        'scheduler_framework_extension_point_duration_seconds_count{extension_point="Score",'
        'profile="p",status="Success"} 10\n'
        'scheduler_framework_extension_point_duration_seconds_sum{extension_point="Score",'
        'profile="p",status="Success"} 0.02\n'
        'scheduler_batch_attempts_total{profile="p",result="hint_used"} 4\n')
    got = scheduler_breakdown(Samples(), after, 10)
    assert got["score_ms"] == pytest.approx(2.0) and got["score_calls"] == 1.0
    assert got["hinted_per_pod"] == pytest.approx(0.4)
