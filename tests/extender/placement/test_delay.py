"""Delay scheduling for embedding readers (``extender.placement.delay``)."""

from __future__ import annotations

import math

from extender.placement.delay import free_in, freed_node_order, saved_seconds, should_wait


def test_saved_seconds_is_the_bonus_gap_over_the_reference_run():
    assert saved_seconds(0.8, 0.3, 1000.0) == 500.0
    assert saved_seconds(0.3, 0.8, 1000.0) == 0.0
    assert saved_seconds(0.8, 0.3, math.nan) == 0.0


def test_wait_is_bounded_by_the_saving_and_due_jobs_never_wait():
    assert should_wait(saved_s=100.0, free_in_s=30.0, waited_s=0.0, due=False)
    assert should_wait(saved_s=100.0, free_in_s=30.0, waited_s=60.0, due=False)
    assert not should_wait(saved_s=100.0, free_in_s=30.0, waited_s=70.0, due=False)
    assert not should_wait(saved_s=100.0, free_in_s=1.0, waited_s=0.0, due=True)
    assert not should_wait(saved_s=0.0, free_in_s=0.0, waited_s=0.0, due=False)
    assert not should_wait(saved_s=100.0, free_in_s=math.inf, waited_s=0.0, due=False)


def test_free_in_adds_the_gpus_of_jobs_as_they_end():
    assert free_in(10.0, 2.0, 1.0, [50.0], [4.0]) == 0.0
    assert free_in(10.0, 1.0, 4.0, [70.0, 30.0, 90.0], [2.0, 1.0, 4.0]) == 60.0
    assert free_in(10.0, 0.0, 8.0, [20.0], [4.0]) == math.inf


def test_freed_node_order_due_first_then_one_local_job_skips():
    held = [0.0, 0.5, 1.0, 1.0, 0.0]
    due = [False, False, False, False, True]
    assert freed_node_order(held, due) == [4, 2, 0, 1, 3]
    assert freed_node_order([0.0, 0.0], [False, False]) == [0, 1]
