"""Prints this folder's tables from throughput-N-runK.json: python table.py
(columns: ``bench.throughput.runs_table``, with every process's CPU per bound pod)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parents[3]))  # the repository root, for bench.throughput

from bench.throughput.runs_table import print_tables  # noqa: E402

if __name__ == "__main__":
    print_tables(HERE, range(1, 3), all_cpu=True)
