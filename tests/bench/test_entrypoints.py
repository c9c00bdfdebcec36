"""The benchmark and harness entry points start (imports and CLI wiring), without running."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv", [
    [sys.executable, "-m", "bench.latency", "--help"],
    [sys.executable, "-m", "bench.latency.cpu", "--help"],
    [sys.executable, "-m", "bench.throughput", "--help"],
    [sys.executable, "-m", "bench.cli", "--help"],
    [sys.executable, str(ROOT / "hack" / "local-cluster"), "--help"],
    [sys.executable, str(ROOT / "hack" / "demo.py"), "--help"],
])
def test_entry_point_starts(argv: list[str]) -> None:
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "usage" in out.stdout.lower()


def test_cpu_bench_measures_both_servers_on_a_small_cluster() -> None:
    argv = [sys.executable, "-m", "bench.latency.cpu", "--nodes", "12", "--candidates", "6",
            "--requests", "5", "--no-full"]
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "12 nodes, 6 NodeNames" in out.stdout and "null" in out.stdout
