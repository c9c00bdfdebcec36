"""The throughput table compares each extender run with the null extender of the same verbs."""

from __future__ import annotations

import importlib
import json

from click.testing import CliRunner

from bench.throughput.runs_table import main as runs_table


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


def test_a_report_folders_run_tables_from_its_files(tmp_path) -> None:
    """``python -m bench.throughput.runs_table FOLDER``: per scale and run, the stock rate
    (mean of its two runs), the null's and ours as ratios to it; runs missing are skipped."""
    def run(rate: float, cpu: float = 4.0) -> dict:
        return {"pods_per_s": rate, "median_to_bind_s": 2.0, "extender_log": [],
                "cpu_ms_per_pod": {"extender": cpu, "extender children": 0.02, "apiserver": 3.0},
                "extender": {"prices": {"installed": 4, "dropped": 0, "failed": 0}}}

    for nodes in (500, 5000):
        runs = {"stock kube-scheduler": run(300.0), "stock kube-scheduler (again)": run(100.0)}
        for tag in ("", " (filter-one)"):
            runs[f"null extender{tag}"] = run(100.0)
            runs[f"extender, shares, memory{tag}"] = run(120.0)
            runs[f"extender, shares, redis{tag}"] = run(80.0)
        (tmp_path / f"throughput-{nodes}-run1.json").write_text(json.dumps({str(nodes): runs}))
        (tmp_path / f"throughput-{nodes}-run1.txt").write_text(
            "start 10:00:00 load 1.50 1.0 1.0\n...\nend 10:01:00 load 2.50 1.0 1.0\n")
    one = {k: v for k, v in runs.items() if "filter-one" in k or k.startswith("stock")}
    (tmp_path / "throughput-5000-run3.json").write_text(json.dumps({"5000": one}))
    (tmp_path / "throughput-5000-run3.txt").write_text(
        "start 10:00:00 load 1.50 1.0 1.0\nend 10:01:00 load 2.50 1.0 1.0\n")
    out = CliRunner().invoke(runs_table, [str(tmp_path), "--runs", "3", "--all-cpu"]).output
    rows = [line for line in out.splitlines() if line.startswith("| 1 ")]
    assert len(rows) == 4  # two scales, two verb sets; run 2 missing
    assert [line.split("|")[3].strip() for line in out.splitlines()
            if line.startswith("| 3 ")] == ["filter-one"]  # a run of one verb set
    cells = [c.strip() for c in rows[1].split("|")]
    assert cells[2] == "1.5-2.5" and cells[3] == "filter-one"
    assert cells[5] == "100.0, 0.50x"  # stock: the mean of 300 and 100
    assert cells[6].startswith("120.0: 0.60 / 1.20") and cells[7].startswith("80.0: 0.40 / 0.80")
    assert "5000 run1 filter-one redis: tables 4 installed" in out
