"""Generator options that make a short GPU run useful: families in turn, a time budget, row ids
that join across devices, and the device name mapped onto the catalogue. No torch needed."""

from __future__ import annotations

import sys
import types

import pytest

from predictor import dataset, gpus
from predictor.generate.gpu import _gpu_model_name


def test_interleaved_takes_families_in_turn_keeping_sweep_ids() -> None:
    configs = list(enumerate(dataset.sweep(0)))
    mixed = dataset.interleaved(configs)
    assert sorted(i for i, _ in mixed) == list(range(len(configs)))
    first = [c["family"] for _, c in mixed[:len(dataset.FAMILIES)]]
    assert sorted(first) == sorted(dataset.FAMILIES)
    per_family = [i for i, c in mixed if c["family"] == "bert"]
    assert per_family == sorted(per_family)


def fake_measure(cfg):  # noqa: ANN001, ANN201
    return {**dict.fromkeys(dataset.SHAPE_COLUMNS, 1000), "exec_mode": "cpu-fake",
            "label_source": "cpu", "macs_per_sample": 1e6, "n_params": 1e6,
            "activations_per_sample": 1e4, "peak_bytes": 2**30, "flops_step": 1e9,
            "wall_s": 0.0, "tables": [[1000, 8, 2.0]], "n_layers": 3}


@pytest.fixture
def no_torch(monkeypatch):  # noqa: ANN001, ANN201
    stub = types.SimpleNamespace(set_num_threads=lambda n: None, get_num_threads=lambda: 1)
    monkeypatch.setitem(sys.modules, "torch", stub)
    monkeypatch.setattr(dataset, "measure_cpu", fake_measure)


def test_limit_with_interleave_covers_every_family_with_sweep_row_ids(tmp_path, no_torch) -> None:
    out = tmp_path / "rows.csv"
    n = len(dataset.FAMILIES)
    assert dataset.run(out, limit=n, interleave=True, log=lambda s: None) == n
    df = dataset.load(out)
    assert set(df["family"]) == set(dataset.FAMILIES)
    sweep = dataset.sweep(0)
    assert all(sweep[i]["family"] == f for i, f in zip(df["row_id"], df["family"], strict=True))


def test_budget_stops_starting_configs(tmp_path, no_torch) -> None:
    out = tmp_path / "rows.csv"
    lines: list[str] = []
    assert dataset.run(out, budget_s=-1.0, log=lines.append) == 0
    assert "time budget" in lines[-1]
    assert out.read_text().startswith("row_id,")  # header written, rows so far kept


def test_h200_is_in_the_catalogue() -> None:
    assert _gpu_model_name("NVIDIA H200", 143771 * 2**20) == "H200"
    assert _gpu_model_name("NVIDIA H100 80GB HBM3", 81559 * 2**20) == "H100"
    assert gpus.get("H200").memory_mib > gpus.get("H100").memory_mib


def test_seeds_get_their_own_row_ids_and_resume_measures_only_what_is_missing(
        tmp_path, no_torch) -> None:  # noqa: ANN001
    out = tmp_path / "rows.csv"
    assert dataset.run(out, seeds=(0, 1), limit=3, log=lambda s: None) == 3
    first = list(dataset.load(out)["row_id"])
    assert first == [0, 1, 2]
    lines: list[str] = []
    # a resumed run keeps the three rows and measures the next configs of both sweeps
    assert dataset.run(out, seeds=(0, 1), limit=2, resume=True, log=lines.append) == 2
    df = dataset.load(out)
    assert list(df["row_id"]) == [0, 1, 2, 3, 4] and "resuming: 3 rows kept" in lines[0]
    assert dataset.config_of(1003) == dataset.sweep(1)[3]
    assert dataset.config_of(1000 + len(dataset.sweep(1))) is None


def test_cpu_shapes_join_only_identical_configs(tmp_path, no_torch) -> None:  # noqa: ANN001
    out = tmp_path / "rows.csv"
    dataset.run(out, limit=2, log=lambda s: None)
    assert set(dataset.cpu_shapes(out)) == {0, 1}
    df = dataset.load(out)
    # a row whose config no longer matches the sweep (the sweep changed) is not reused
    changed = df.copy()
    changed.loc[0, "config_json"] = changed.loc[0, "config_json"].replace(
        '"batch_size":', '"batch_size":1', 1)
    changed.to_csv(out, index=False)
    assert set(dataset.cpu_shapes(out)) == {1}
    # nor is a row without the shape columns
    missing = df.copy()
    missing.loc[1, "flops_step"] = None
    missing.to_csv(out, index=False)
    assert set(dataset.cpu_shapes(out)) == {0}
