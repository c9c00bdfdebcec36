"""train -> save -> load -> predict round trip, shipped artefacts, and the no-torch rule."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from predictor import dataset, estimate, features, training
from predictor.cli import main
from predictor.compute_model import ComputeModel
from predictor.memory_model import MemoryModel

SPEC = {"family": "deepfm", "batch_size": 4096, "optimizer": "adam", "gpu_model": "A100",
        "macs": 2e5, "params": 6.5e7, "activations": 1500,
        "tables": [{"rows": 2000000, "dim": 32, "pooling": 2, "count": 1}],
        "dense_features": 13, "top_mlp": [400, 400]}


@pytest.fixture(scope="module")
def small_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every third row of the committed dataset (keeps the round trip fast)."""
    df = dataset.load()
    path = tmp_path_factory.mktemp("ds") / "small.csv"
    df.iloc[::3].to_csv(path, index=False)
    return path


def test_round_trip(small_csv: Path, tmp_path: Path) -> None:
    manifest = training.train(small_csv, tmp_path, version="t1")
    assert manifest["version"] == "t1" and (tmp_path / "manifest.json").exists()
    est = estimate.Estimator.load(tmp_path)
    df = dataset.load(small_csv)
    specs = dataset.specs(df)[:20]
    # the loaded memory model reproduces a fresh fit exactly
    train_df = df[~training.holdout_mask(df)]
    fresh = MemoryModel.fit(dataset.specs(train_df), training.memory_target_mib(train_df),
                            list(train_df["family"]))
    np.testing.assert_allclose(est.memory.predict_train_mib(specs),
                               fresh.predict_train_mib(specs), rtol=1e-9)
    for level in ("described", "job"):
        assert est.memory.reserve[level] == pytest.approx(fresh.reserve[level])
    # LightGBM text model round trip
    comp = ComputeModel.load(tmp_path / manifest["compute"])
    np.testing.assert_allclose(comp.predict_many(specs), est.compute.predict_many(specs))
    p = est.predict(features.parse_model(json.dumps(SPEC)))
    assert 1 <= p.gpu_milli <= 1000 and p.gpu_mem_mib > 1500 and p.model_version == "t1"
    assert set(est.memory.device["described"]) == {"H200"}  # calibrated on the GPU rows


def test_shipped_artefacts_match_committed_dataset() -> None:
    import hashlib

    manifest = json.loads((estimate.MODELS_DIR / "manifest.json").read_text())
    digest = hashlib.sha256(dataset.DEFAULT_CSV.read_bytes()).hexdigest()
    assert manifest["dataset_sha256"] == digest, "retrain: sparse-predictor train"
    gpu_digest = hashlib.sha256(dataset.DEFAULT_GPU_CSV.read_bytes()).hexdigest()
    assert manifest["gpu_dataset_sha256"] == gpu_digest, "retrain: sparse-predictor train"
    assert manifest["compute_label"] == "gpu-measured-sm-activity"
    assert set(manifest["memory_device"]["described"]) == {"H200"}
    assert set(manifest["memory_device"]["job"]) == {"H200"}


def test_memory_model_is_monotone_in_tables_and_optimizer() -> None:
    est = estimate.Estimator.load()
    base = features.parse_model(json.dumps(SPEC))
    import msgspec

    bigger = msgspec.structs.replace(base, tables=[features.Table(rows=20_000_000, dim=32)])
    sgd = msgspec.structs.replace(base, optimizer="sgd")
    assert est.predict(bigger).gpu_mem_mib > est.predict(base).gpu_mem_mib
    assert est.predict(sgd).gpu_mem_mib < est.predict(base).gpu_mem_mib
    # context constant differs per GPU
    t4 = msgspec.structs.replace(base, gpu_model="T4")
    assert est.predict(base).gpu_mem_mib - est.predict(t4).gpu_mem_mib == pytest.approx(500, abs=2)


def test_memory_artefact_rejects_foreign_json(tmp_path: Path) -> None:
    (tmp_path / "m.json").write_text('{"format": "something-else"}')
    with pytest.raises(ValueError, match="not a memory model"):
        MemoryModel.load(tmp_path / "m.json")


def test_cli_predict_features_and_pod(tmp_path: Path) -> None:
    runner = CliRunner()
    f = tmp_path / "spec.json"
    f.write_text(json.dumps(SPEC))
    r = runner.invoke(main, ["predict", "--features", str(f)])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["job_class"] == "recommendation" and out["gpu_model"] == "A100"
    assert out["input_level"] == "described" and 0 < out["train_mib"] < out["gpu_mem_mib"]
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: t\n  annotations:\n"
        f"    sparse.io/model: '{json.dumps(SPEC)}'\n"
    )
    r = runner.invoke(main, ["predict", "--pod", str(pod), "--gpu-model", "T4"])
    assert r.exit_code == 0, r.output
    alone = json.loads(r.output)
    assert alone["gpu_model"] == "T4"
    # a data-parallel worker (WORLD_SIZE > 1) is read as the prediction worker reads it
    with pod.open("a") as out:
        out.write("spec:\n  containers:\n  - name: c\n"
                  "    env: [{name: WORLD_SIZE, value: '8'}]\n")
    r = runner.invoke(main, ["predict", "--pod", str(pod), "--gpu-model", "T4"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["gpu_mem_mib"] > alone["gpu_mem_mib"]
    pod.write_text("- not a pod\n")
    r = runner.invoke(main, ["predict", "--pod", str(pod)])
    assert r.exit_code != 0 and "not a pod manifest" in r.output
    bad = tmp_path / "bad.json"
    bad.write_text('{"family": "dlrm", "batch_size": 0}')
    r = runner.invoke(main, ["predict", "--features", str(bad)])
    assert r.exit_code != 0 and "$.batch_size" in r.output
    r = runner.invoke(main, ["predict", "--features", str(f), "--gpu-model", "RTX9090"])
    assert r.exit_code != 0 and "unknown gpu_model" in r.output


def test_generate_cuda_without_gpu_fails_clearly(tmp_path: Path) -> None:
    pytest.importorskip("torch")  # only meaningful where the generator can run
    import importlib

    torch = importlib.import_module("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    r = CliRunner().invoke(main, ["generate", "--device", "cuda", "--out", str(tmp_path / "x")])
    assert r.exit_code != 0 and "CUDA" in r.output


def test_serving_path_does_not_import_torch() -> None:
    code = ("import sys, predictor.cli, predictor.worker, predictor.estimate, "
            "predictor.training, predictor.evaluation, predictor.dataset; "
            "predictor.estimate.Estimator.load(); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_device_calibration_covers_the_quantile_and_round_trips(tmp_path: Path) -> None:
    from predictor import memory_model

    rng = np.random.default_rng(0)
    state = np.exp(rng.uniform(np.log(20), np.log(40_000), 400))
    act = state * np.exp(rng.uniform(-3, 1, 400))
    # measured = context + workspace + a known state and an uncertain activation part
    used = 800 + 60 + state * rng.uniform(1.0, 1.05, 400) + act * rng.uniform(1.0, 2.5, 400)
    parts = np.column_stack([state, act])
    s_state, s_act, offset = memory_model.fit_reserve(parts, used, q=0.98)
    booked = parts @ [s_state, s_act] + offset
    covered = np.mean(booked >= used)
    assert 0.96 <= covered <= 1.0 and 1.0 <= s_state <= 1.1 and 1.8 <= s_act <= 2.6
    assert 500 <= offset <= 1200
    # tighter than one multiplier on the sum at the same coverage
    one = memory_model.fit_reserve(np.column_stack([state + act, np.zeros(400)]), used, q=0.98)
    single = (state + act) * one[0] + one[2]
    assert np.median(booked / used) < np.median(single / used)
    # a fixed offset (the context of a GPU without measured rows) stays fixed
    assert memory_model.fit_reserve(parts, used, offset=860.0)[2] == 860.0
    model = MemoryModel(coef=np.zeros(len(memory_model.TERMS) + 1),
                        coef_job=np.zeros(len(memory_model.JOB_TERMS) + 1),
                        reserve={"described": (1.2, 1.5), "job": (1.1, 3.0)},
                        device={"described": {"H200": (s_state, s_act, offset)}, "job": {}})
    model.save(tmp_path / "m.json")
    loaded = MemoryModel.load(tmp_path / "m.json")
    assert loaded.reservation("H200") == pytest.approx((s_state, s_act, offset))
    assert loaded.reservation("T4") == (1.2, 1.5, 1000.0)  # unmeasured GPU: scales + context
    assert loaded.reservation("H200", "job") == (1.1, 3.0, loaded.ctx_mib["H200"])


def test_shipped_memory_model_uses_the_h200_calibration() -> None:
    import msgspec

    est = estimate.Estimator.load()
    base = features.parse_model(json.dumps(SPEC))
    h200 = msgspec.structs.replace(base, gpu_model="H200")
    state, act = est.memory.predict_parts([h200])[0]
    s_state, s_act, offset = est.memory.device["described"]["H200"]
    assert est.predict(h200).gpu_mem_mib == int(np.ceil(state * s_state + act * s_act + offset))


@pytest.fixture(scope="module")
def tiny_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four rows of every family of the committed dataset: the whole evaluation in seconds."""
    df = dataset.load()
    path = tmp_path_factory.mktemp("tiny") / "tiny.csv"
    df.groupby("family").head(4).to_csv(path, index=False)
    return path


def test_cli_evaluate_writes_both_levels_and_plots(tiny_csv: Path, tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["evaluate", "--data", str(tiny_csv), "--gpu-data", "",
                                  "--out", str(tmp_path), "--skip-compute"])
    assert r.exit_code == 0, r.output
    assert "described level" in r.output and "job level" in r.output
    for level in ("described", "job"):
        assert (tmp_path / f"memory-{level}.png").stat().st_size > 10_000
    assert (tmp_path / "evaluation.txt").read_text().startswith("Memory, described level")
    # the workers of sharded-table jobs, measured apart from the dataset
    assert "Sharded tables" in r.output and "row-wise" in r.output
    assert (tmp_path / "sharded-tables.png").stat().st_size > 10_000
    r = CliRunner().invoke(main, ["evaluate", "--gpu-data", "/nonexistent.csv"])
    assert r.exit_code != 0 and "does not exist" in r.output


def test_cli_evaluate_without_gpu_rows_says_proxy(tmp_path: Path) -> None:
    df = dataset.load()
    two = tmp_path / "two.csv"
    df[df["family"].isin(["bert", "dlrm"])].groupby("family").head(6).to_csv(two, index=False)
    r = CliRunner().invoke(main, ["evaluate", "--data", str(two), "--gpu-data", "",
                                  "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "PROXY" in r.output and "NVML-measured" not in r.output


def test_cli_train_writes_under_results_by_default(tiny_csv: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, ["train", "--data", str(tiny_csv), "--gpu-data", ""])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "results" / "predictor" / "models" / "manifest.json").exists()


def test_input_images_raise_the_memory_estimate() -> None:
    import msgspec

    est = estimate.Estimator.load()
    cnn = features.parse_model(json.dumps({
        "family": "resnet", "batch_size": 256, "optimizer": "sgd", "gpu_model": "A100",
        "macs": 1.8e9, "params": 1.17e7, "activations": 2.3e6}))
    imagenet = msgspec.structs.replace(cnn, inputs=3 * 224 * 224)
    extra = est.predict(imagenet).gpu_mem_mib - est.predict(cnn).gpu_mem_mib
    images_mib = 256 * 3 * 224 * 224 * 4 / 2**20  # 147 MiB of fp32 images
    assert 0.5 * images_mib <= extra <= 3 * images_mib
    with pytest.raises(features.SchemaError, match="inputs"):
        features.parse_model('{"family": "resnet", "batch_size": 8, "inputs": -1}')


def test_cpu_label_counts_state_an_optimizer_creates_up_front() -> None:
    """Adagrad allocates its sums in the constructor, before the step is traced."""
    pytest.importorskip("torch")
    from predictor.generate import measure

    cfg = {"family": "dlrm", "tables": [[20000, 16, 2.0]] * 4, "dense_features": 13,
           "bottom_mlp": [64], "top_mlp": [64], "batch_size": 256, "optimizer": "adagrad",
           "dtype": "fp32", "sparse_grad": False}
    m = measure.measure(cfg, fake=True)
    assert m["opt_state_bytes"] >= 0.99 * m["param_bytes"]
    assert m["peak_bytes"] >= m["param_bytes"] + m["opt_state_bytes"] + m["grad_bytes"]


def test_cnn_kernel_count_uses_layers_when_given() -> None:
    import msgspec

    cnn = features.parse_model(json.dumps({
        "family": "resnet", "batch_size": 64, "macs": 1.8e9, "params": 1.17e7,
        "activations": 2.3e6, "inputs": 3 * 224 * 224}))
    shallow = msgspec.structs.replace(cnn, layers=10)
    deep = msgspec.structs.replace(cnn, layers=100)
    assert features.kernels_per_step(deep) > 5 * features.kernels_per_step(shallow) / 2
    assert features.kernels_per_step(cnn) > 20  # no layers: the depth proxy still counts some
    assert features.derive(deep)["log_kernels"] > features.derive(shallow)["log_kernels"]


def test_reserve_rule_is_conformal_over_families_and_family_balanced() -> None:
    from predictor import memory_model

    # split-conformal level with families as units: every row below 1/alpha - 1 families
    assert memory_model.reserve_quantile(12) == 1.0
    assert memory_model.reserve_quantile(48) == 1.0
    assert memory_model.reserve_quantile(99) == pytest.approx(0.98 * (1 + 1 / 99))
    rng = np.random.default_rng(1)
    # a large family whose activations are known, a small one where they are 3x under
    n_big, n_small = 300, 10
    state = rng.uniform(100, 1000, n_big + n_small)
    act = rng.uniform(100, 1000, n_big + n_small)
    true_act = act * np.r_[rng.uniform(1.0, 1.1, n_big), rng.uniform(2.5, 3.0, n_small)]
    used = state + true_act
    parts = np.column_stack([state, act])
    groups = ["big"] * n_big + ["small"] * n_small
    # pooled by rows the small family is under 3 % of the weight: the 98 % fit drops it
    pooled = memory_model.fit_reserve(parts, used, q=0.98)
    booked = parts @ pooled[:2] + pooled[2]
    assert np.mean(booked[n_big:] < used[n_big:]) > 0.5
    # the rule: every family's rows covered, at the least over-reservation
    s_state, s_act, offset = memory_model.fit_reserve(parts, used, groups=groups)
    booked = parts @ [s_state, s_act] + offset
    assert np.all(booked >= used * (1 - 1e-9))
    assert s_act >= 2.5
