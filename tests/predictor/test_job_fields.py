"""The job-fields input level: the camelCase fields of a RecommendDLJob in sparse.io/model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from predictor import estimate, features
from predictor.cli import main

JOB = {"macs": 1.2e6, "params": 3.3e7, "batchSize": 2048,
       "vocabularySize": [1_000_000, 500_000, 20_000], "embeddingDim": [16, 16, 16],
       "optimizer": "adagrad", "dtype": "fp32"}


def test_job_fields_are_a_sparse_io_model_annotation() -> None:
    spec = features.from_annotations({features.ANN_MODEL: json.dumps(JOB),
                                      "sparse.io/gpu-model": "A100|T4"})
    assert spec is not None and features.input_level(spec) == "job"
    assert spec.batch_size == 2048 and spec.optimizer == "adagrad" and spec.gpu_model == "A100"
    assert sorted((t.rows, t.dim, t.count) for t in spec.tables) == [
        (20_000, 16, 1), (500_000, 16, 1), (1_000_000, 16, 1)]


def test_totals_one_dim_for_all_and_defaults() -> None:
    totals = features.parse_model(json.dumps({
        "batchSize": 512, "embeddingSizeTotal": 4e6, "embeddingDimTotal": 128,
        "embeddingTableCount": 8}))
    assert totals.tables == [features.Table(rows=500_000, dim=16, count=8)]
    assert totals.optimizer == "adam" and totals.dtype == "fp32"  # unknown: the safe side
    one_dim = features.parse_model(json.dumps({"batchSize": 8, "vocabularySize": [10, 20],
                                               "embeddingDim": [4]}))
    assert [t.dim for t in one_dim.tables] == [4, 4]
    sparse = features.parse_model(json.dumps({**JOB, "optimizer": "sparse_adam"}))
    assert sparse.sparse_grad


@pytest.mark.parametrize(("job", "message"), [
    ({**JOB, "batchSize": 0}, "$.batchSize"),
    ({**JOB, "embeddingDim": [16, 16]}, "embeddingDim has 2 entries"),
    ({**JOB, "vocabularySize": [0, 1, 2]}, "$.vocabularySize[0]"),
    ({**JOB, "embeddingsDim": [16]}, "unknown field `embeddingsDim`"),
    ({**JOB, "optimizer": "lion"}, "$.optimizer"),
    ({**JOB, "gpuModel": "RTX9090"}, "unknown gpu_model"),
])
def test_bad_job_fields_name_the_field(job: dict, message: str) -> None:
    with pytest.raises(features.SchemaError, match=message.replace("[", r"\[").replace(
            "$", r"\$")):
        features.parse_model(json.dumps(job))


def test_estimator_predicts_both_levels_with_train_mib() -> None:
    est = estimate.Estimator.load()
    job = est.predict(features.parse_model(json.dumps({**JOB, "gpuModel": "H200"})))
    assert job.input_level == "job" and job.train_mib > 0
    table_mib = 1_520_000 * 16 * 4 / 2**20
    assert job.train_mib >= 2 * table_mib  # weights + Adagrad state at least
    assert job.gpu_mem_mib > job.train_mib and 1 <= job.gpu_milli <= 1000
    bigger = est.predict(features.parse_model(json.dumps({**JOB, "batchSize": 8192})))
    assert bigger.train_mib >= est.predict(features.parse_model(json.dumps(JOB))).train_mib


def test_cli_predict_json_prints_one_object(tmp_path: Path) -> None:
    f = tmp_path / "job.json"
    f.write_text(json.dumps(JOB))
    r = CliRunner().invoke(main, ["predict", "--features", str(f), "--gpu-model", "H200",
                                  "--json"])
    assert r.exit_code == 0, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1
    out = json.loads(lines[0])
    assert {"train_mib", "gpu_mem_mib", "gpu_milli"} <= set(out)
    assert out["gpu_model"] == "H200" and out["input_level"] == "job"
    bad = tmp_path / "bad.json"
    bad.write_text('{"batchSize": 4, "vocabularySize": [10], "embeddingDim": [4, 4]}')
    r = CliRunner().invoke(main, ["predict", "--features", str(bad), "--json"])
    assert r.exit_code != 0 and "embeddingDim" in r.output
    bad.write_text("{not json")
    r = CliRunner().invoke(main, ["predict", "--features", str(bad), "--json"])
    assert r.exit_code != 0 and "sparse.io/model" in r.output


def test_optional_sparse_gradients_field() -> None:
    dense = features.parse_model(json.dumps(JOB))
    sparse = features.parse_model(json.dumps({**JOB, "sparseGradients": True}))
    assert not dense.sparse_grad and sparse.sparse_grad
    # a dense-gradient job holds a gradient as large as its tables; a sparse one does not
    est = estimate.Estimator.load()
    assert est.predict(sparse).train_mib < est.predict(dense).train_mib
    with pytest.raises(features.SchemaError, match="sparseGradients"):
        features.parse_model(json.dumps({**JOB, "optimizer": "adam", "sparseGradients": True}))


def test_optional_ids_per_sample_field() -> None:
    multi = features.parse_model(json.dumps({**JOB, "idsPerSample": [20, 1, 3]}))
    assert sorted((t.rows, t.pooling) for t in multi.tables) == [
        (20_000, 3.0), (500_000, 1.0), (1_000_000, 20.0)]
    one = features.parse_model(json.dumps({**JOB, "idsPerSample": [5]}))
    assert {t.pooling for t in one.tables} == {5.0}
    with pytest.raises(features.SchemaError, match="idsPerSample has 2 entries"):
        features.parse_model(json.dumps({**JOB, "idsPerSample": [1, 2]}))


def test_optional_leaf_activations_field() -> None:
    """A model summary's activations replace the MAC-based width bounds and move the
    estimate with what they state; the job stays at the job-fields level."""
    cnn = {"macs": 1.8e9, "params": 1.17e7, "batchSize": 64, "optimizer": "momentum"}
    bare = features.parse_model(json.dumps(cnn))
    small = features.parse_model(json.dumps({**cnn, "leafActivations": 1e6}))
    large = features.parse_model(json.dumps({**cnn, "leafActivations": 8e6}))
    assert small.leaf_activations == 1e6 and features.input_level(small) == "job"
    d_bare, d_small = features.derive(bare), features.derive(small)
    assert d_bare["mlp_act_mib"] > 0 and d_bare["leaf_act_mib"] == 0
    assert d_small["mlp_act_mib"] == d_small["reuse_width_mib"] == 0
    assert d_small["leaf_act_mib"] == pytest.approx(64 * 1e6 * 4 / 2**20)
    est = estimate.Estimator.load()
    assert est.predict(large).train_mib > est.predict(small).train_mib
    assert features.to_job_fields(small, optional=True)["leafActivations"] == 1e6
    assert "leafActivations" not in features.to_job_fields(small, features.OPTIONAL_LAYOUT)
    with pytest.raises(features.SchemaError, match=r"\$.leafActivations"):
        features.parse_model(json.dumps({**cnn, "leafActivations": -1}))


def test_optional_optimizer_impl_prices_the_step_as_it_runs() -> None:
    """foreach (unset, PyTorch's default on CUDA) books the step's temporaries on every
    parameter, the single-tensor step on the largest one only, the fused step none."""
    job = {"macs": 1e5, "params": 3e7, "batchSize": 1024, "vocabularySize": [2_000_000, 1_000_000],
           "embeddingDim": [8, 6], "optimizer": "adamw"}
    step = {impl: features.derive(features.parse_model(json.dumps(
        {**job, "optimizerImpl": impl} if impl else job)))["step_temp_mib"]
        for impl in (None, "foreach", "single", "fused")}
    p_mib = 3e7 * 4 / 2**20
    assert step[None] == step["foreach"] == pytest.approx(p_mib)
    assert step["single"] == pytest.approx(2 * 16e6 * 4 / 2**20)  # Adam: 2 x the largest
    assert step["fused"] == 0
    spec = features.parse_model(json.dumps({**job, "optimizerImpl": "fused"}))
    assert features.to_job_fields(spec, features.OPTIONAL_LAYOUT)["optimizerImpl"] == "fused"
    assert "optimizerImpl" not in features.to_job_fields(spec)
    with pytest.raises(features.SchemaError, match=r"\$.optimizerImpl"):
        features.parse_model(json.dumps({**job, "optimizerImpl": "apex"}))


def test_sparse_gradient_step_has_no_table_sized_temporary() -> None:
    """With sparse gradients the optimizers update the tables in place: the step's
    temporaries are sized by the sparse gradient (none for SGD), not by the tables."""
    tables = {"vocabularySize": [4_000_000], "embeddingDim": [16], "idsPerSample": [4],
              "batchSize": 1024, "macs": 1e4, "params": 6.4e7 + 1e4}
    table_mib = 4_000_000 * 16 * 4 / 2**20
    for opt in ("sgd", "adagrad", "sparse_adam"):
        spec = features.parse_model(json.dumps({**tables, "optimizer": opt,
                                                "sparseGradients": True}))
        d = features.derive(spec)
        assert d["grad_mib"] < 0.1 * table_mib
        assert d["step_temp_mib"] <= d["grad_mib"] + 1.0, opt
    sgd = features.derive(features.parse_model(json.dumps(
        {**tables, "optimizer": "sgd", "sparseGradients": True})))
    assert sgd["step_temp_mib"] == pytest.approx(0.0, abs=0.01)


def test_job_level_state_terms_are_physics_not_fitted() -> None:
    """Weights, gradients, optimizer state and step temporaries are known from params,
    optimizer and dtype: the job-level fit holds their coefficients at 1."""
    from predictor import memory_model

    coef = estimate.Estimator.load().memory.coef_for("job")
    names = memory_model.JOB.names
    for term in ("step_mib", "hold_mib", "grad_mib"):
        assert term in memory_model.JOB.fixed
        assert coef[names.index(term)] == pytest.approx(1.0)


def test_optional_data_parallel_fields_book_what_ddp_holds() -> None:
    est = estimate.Estimator.load()
    tables = sum(r * d for r, d in zip(JOB["vocabularySize"], JOB["embeddingDim"],
                                       strict=True))
    dense = JOB["params"] - tables

    def train_mib(**fields: object) -> float:
        return est.predict(features.parse_model(json.dumps({**JOB, **fields}))).train_mib

    # dense gradients: the buckets hold them once more, in every phase (state is physics at
    # the job level, so exactly that)
    plain = train_mib()
    assert train_mib(dataParallelWorkers=4) - plain == pytest.approx(
        JOB["params"] * 4 / 2**20, rel=1e-6)
    assert train_mib(dataParallelWorkers=4, gradientAsBucketView=True) <= train_mib(
        dataParallelWorkers=4)
    # sparse gradients: the dense part's buckets, and every worker's sparse gradient gathered
    sparse = train_mib(sparseGradients=True)
    one, eight = (train_mib(sparseGradients=True, dataParallelWorkers=n) for n in (1, 8))
    assert one - sparse >= dense * 4 / 2**20
    assert eight >= one
    # ... a transient of the backward phase (here the optimizer step's peak is the larger)
    gathered = 2048 * 3 * (16 * 4 + 8) / 2**20  # one id per table and sample: values + ids

    def backward_grads(n: int) -> float:
        spec = features.parse_model(json.dumps({**JOB, "sparseGradients": True,
                                                "dataParallelWorkers": n}))
        return features.derive(spec)["grad_mib"]

    assert backward_grads(8) - backward_grads(1) == pytest.approx(7 * gathered, rel=1e-6)
    assert train_mib(dataParallelWorkers=0) == plain
    with pytest.raises(features.SchemaError, match="dataParallelWorkers"):
        features.parse_model(json.dumps({**JOB, "dataParallelWorkers": -1}))
