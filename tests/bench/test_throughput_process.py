"""The throughput bench's per-process bookkeeping: the pods it times, the CPU of a process
tree (``bench.procstat``: the extender and its price worker), the extender's error lines."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from bench import procstat

tp = importlib.import_module("bench.throughput.__main__")

# A child that starts a grandchild, prints its id, and both wait on stdin.
TREE = ("import subprocess, sys\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'],"
        " stdin=subprocess.PIPE)\n"
        "print(g.pid, flush=True)\n"
        "sys.stdin.read()\n"
        "g.stdin.close(); g.wait()\n")


def test_timed_pods_leaves_out_early_binds_and_refuses_a_burst_bound_before_the_clock() -> None:
    assert tp.timed_pods(1000, 0) == 1000
    assert tp.timed_pods(1000, 40) == 960
    with pytest.raises(click.ClickException, match="more --pods"):
        tp.timed_pods(100, 100)


def test_descendants_holds_children_and_grandchildren() -> None:
    child = subprocess.Popen([sys.executable, "-c", TREE], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        grandchild = int(child.stdout.readline())
        below = procstat.descendants(child.pid)
        assert set(below) == {grandchild}
        assert set(procstat.descendants(os.getpid())) >= {
            child.pid, grandchild}
        assert set(procstat.tree_cpu(child.pid)) == {child.pid, grandchild}
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(30)


def test_a_process_born_during_the_run_counts_from_zero() -> None:
    before = {1: 2.0}
    after = {1: 2.5, 7: 0.75}  # 7: the price worker, started after the first reading
    assert procstat.tree_cpu_delta(before, after) == pytest.approx(1.25)
    assert procstat.tree_cpu_delta({}, {}) == 0.0


def test_tree_cpu_of_a_gone_process_is_empty() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(30)
    assert procstat.tree_cpu(gone.pid) == {}
    assert procstat.tree_cpu(None) == {}


def test_log_problems_keeps_warnings_errors_and_whole_tracebacks(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("2026 INFO sparse ready\n"
                   "2026 WARNING sparse.http slow\n"
                   "2026 ERROR sparse.prices share price table not solved\n"
                   "2026 INFO sparse serving\n"
                   "Exception in thread QueueManagerThread:\n"
                   "Traceback (most recent call last):\n"
                   '  File "x.py", line 1, in <module>\n'
                   "    boom()\n"
                   "RuntimeError: boom\n"
                   "2026 INFO sparse stopped\n")
    assert tp.log_problems(log) == [
        "2026 WARNING sparse.http slow",
        "2026 ERROR sparse.prices share price table not solved",
        "Exception in thread QueueManagerThread:",
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "    boom()",
        "RuntimeError: boom"]
    assert tp.log_problems(log, limit=1) == ["2026 WARNING sparse.http slow"]
    assert tp.log_problems(tmp_path / "missing.log") == []
