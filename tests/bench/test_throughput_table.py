"""The throughput table compares each extender run with the null extender of the same verbs."""

from __future__ import annotations

import importlib

from click.testing import CliRunner


def result(rate: float, verbs: str | None) -> dict:
    return {"pods_per_s": rate, "verbs": verbs, "median_to_bind_s": 1.0, "load": [0.1, 0.2],
            "scheduler": {"algorithm_ms": 1.0, "attempt_ms": 2.0, "attempts_per_pod": 1.0}}


def test_ratios_to_the_null_extender_of_the_same_verbs() -> None:
    tp = importlib.import_module("bench.throughput.__main__")
    runs = {tp.STOCK: result(400.0, None),
            tp.NULL: result(200.0, "two-call"),
            "extender, shares, memory": result(100.0, "two-call"),
            f"{tp.NULL} (filter-only)": result(250.0, "filter-only"),
            "extender, shares, memory (filter-only)": result(200.0, "filter-only"),
            f"{tp.STOCK} (again)": result(400.0, None)}
    import click

    @click.command()
    def show() -> None:
        tp.print_scale(500, 8, 1000, runs)

    out = CliRunner().invoke(show).output
    rows: dict[str, list[str]] = {}  # the first table's row of each run (later tables too)
    for line in out.splitlines():
        if line.startswith("  ") and "pods/s" not in line:
            rows.setdefault(line[:42].strip(), line[42:].split())
    assert rows["extender, shares, memory"][:3] == ["100.0", "0.25", "0.50"]
    assert rows["extender, shares, memory (filter-only)"][:3] == ["200.0", "0.50", "0.80"]
    assert rows[tp.STOCK][2] == "-"
    assert "filter-only: 250.0" in out and "reaches 0.62x stock" in out
