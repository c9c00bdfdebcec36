"""Schema validation of sparse.io/model and task_info: good, bad and hostile inputs."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor import features

GOOD = {
    "family": "dlrm",
    "batch_size": 2048,
    "optimizer": "adam",
    "dtype": "fp32",
    "gpu_model": "V100M32",
    "macs": 1.2e6,
    "params": 3.3e7,
    "tables": [{"rows": 1000000, "dim": 16, "pooling": 3}, {"rows": 500, "dim": 16, "count": 4}],
    "dense_features": 13,
    "bottom_mlp": [512, 256],
    "top_mlp": [256, 1],
}


def parse(d: object) -> features.ModelSpec:
    return features.parse_model(json.dumps(d))


def test_good_spec_round_trips() -> None:
    spec = parse(GOOD)
    assert spec.tables[1].count == 4
    assert features.job_class(spec) == "recommendation"
    assert parse(features.to_dict(spec)) == spec


def test_defaults() -> None:
    spec = parse({"family": "resnet", "batch_size": 32})
    assert (spec.optimizer, spec.dtype, spec.gpu_model) == ("adam", "fp32", "V100M32")
    assert features.job_class(spec) == "cnn-small"
    big = parse({"family": "resnet", "batch_size": 32, "macs": 4.1e9, "params": 25.6e6})
    assert features.job_class(big) == "cnn"


@pytest.mark.parametrize(
    ("patch", "needle"),
    [
        ({"batch_size": 0}, "$.batch_size"),
        ({"batch_size": "64"}, "Expected `int`"),
        ({"family": "mlp-thing"}, "$.family"),
        ({"optimizer": "lion"}, "$.optimizer"),
        ({"dtype": "fp8"}, "$.dtype"),
        ({"gpu_model": "RTX9090"}, "unknown gpu_model"),
        ({"tables": [{"rows": -5, "dim": 16}]}, "$.tables[0].rows"),
        ({"tables": [{"rows": 10, "dim": 0}]}, "$.tables[0].dim"),
        ({"tables": [{"rows": 10, "dim": 8, "pooling": 0}]}, "$.tables[0].pooling"),
        ({"tables": [{"rows": 10**12, "dim": 8}]}, "$.tables[0].rows"),
        ({"tables": [{"rows": 10, "dim": 8, "colour": "red"}]}, "unknown field `colour`"),
        ({"macs": 1e300}, "$.macs"),
        ({"macs": float("nan")}, "malformed"),
        ({"params": -1}, "$.params"),
        ({"bottom_mlp": [64, -1]}, "$.bottom_mlp[1]"),
        ({"top_mlp": "256,1"}, "$.top_mlp"),
        ({"extra": 1}, "unknown field `extra`"),
        ({"optimizer": "sparse_adam"}, "needs sparse_grad"),
        ({"sparse_grad": True, "optimizer": "adam"}, "sparse_grad is not supported"),
        ({"tables": [{"rows": 10, "dim": 8, "count": 60000}] * 2}, "at most 100000"),
        ({"schema_version": 2}, "$.schema_version"),
    ],
)
def test_bad_specs_name_the_field(patch: dict, needle: str) -> None:
    d = {**GOOD, **patch}
    raw = json.dumps(d, allow_nan=True)
    with pytest.raises(features.SchemaError) as exc:
        features.parse_model(raw)
    assert needle in str(exc.value)
    assert str(exc.value).startswith("sparse.io/model")


@pytest.mark.parametrize(
    "raw",
    [
        "", "null", "[]", "42", "{", '"dlrm"', "{'family': 'dlrm'}",
        '{"family": "dlrm"}',  # batch_size missing
        '{"family":"dlrm","batch_size":1,"tables":' + "[" * 5000 + "]" * 5000 + "}",
        '{"family":"dlrm","batch_size":1,"x":' + "[" * 100000 + "]" * 100000 + "}",
        '{"family":"dlrm","batch_size":' + "9" * 5000 + "}",
        b"\xff\xfe\x00garbage",
    ],
)
def test_hostile_inputs_raise_schema_error(raw: str | bytes) -> None:
    with pytest.raises(features.SchemaError):
        features.parse_model(raw)


def test_oversized_annotation_is_rejected_before_parsing() -> None:
    raw = json.dumps({**GOOD, "tables": [{"rows": 1, "dim": 1}] * 10_000})
    assert len(raw) > features.MAX_ANNOTATION_BYTES
    with pytest.raises(features.SchemaError, match="larger than"):
        features.parse_model(raw)


@settings(max_examples=200, deadline=None)
@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(
        st.sampled_from(list(GOOD) + ["rows", "dim", "x"]), c, max_size=6),
    max_leaves=30,
))
def test_fuzz_only_schema_errors(value: object) -> None:
    try:
        spec = features.parse_model(json.dumps(value))
    except features.SchemaError:
        return
    features.derive(spec)  # anything accepted must also yield finite features
    assert all(v == v and abs(v) < float("inf") for v in features.derive(spec).values())


def test_task_info_conversion_accepts_strings() -> None:
    raw = json.dumps({"macs": "1200000", "params": 3.3e7, "batch_size": "512",
                      "embedding_size_total": 2000000, "embedding_dim_total": 416,
                      "embedding_table_count": 26, "something_new": [1, 2]})
    spec = features.from_task_info(raw, gpu_model="T4")
    assert spec.family == "recommendation" and spec.batch_size == 512
    assert spec.tables == [features.Table(rows=76923, dim=16, pooling=1.0, count=26)]
    assert spec.optimizer == "adam" and spec.gpu_model == "T4"


def test_task_info_without_tables_and_bad_values() -> None:
    spec = features.from_task_info('{"batch_size": 64, "macs": 4e9, "params": 2.5e7}')
    assert spec.family == "other" and spec.tables == []
    for bad in ('{"batch_size": -1}', '{"macs": 1}', '{"batch_size": 8, "params": "lots"}',
                '{"batch_size": 8, "embedding_table_count": -3}'):
        with pytest.raises(features.SchemaError, match="task_info"):
            features.from_task_info(bad)


def test_from_annotations_precedence() -> None:
    ti = json.dumps({"batch_size": 64})
    assert features.from_annotations({}) is None
    assert features.from_annotations(None) is None
    spec = features.from_annotations({features.ANN_MODEL: json.dumps(GOOD),
                                      features.ANN_TASK_INFO: ti})
    assert spec is not None and spec.family == "dlrm"
    spec = features.from_annotations({features.ANN_TASK_INFO: ti,
                                      "sparse.io/gpu-model": "A100|V100M32"})
    assert spec is not None and spec.gpu_model == "A100"
    spec = features.from_annotations({features.ANN_TASK_INFO: ti, "sparse.io/gpu-model": "zz"})
    assert spec is not None and spec.gpu_model == "V100M32"


def test_derived_optimizer_multipliers() -> None:
    base = {"family": "dlrm", "batch_size": 8, "tables": [{"rows": 1000, "dim": 32}]}
    d = {o: features.derive(parse({**base, "optimizer": o})) for o in
         ("sgd", "adagrad", "rowwise_adagrad", "adam")}
    assert [d[o]["m_emb"] for o in ("sgd", "adagrad", "adam")] == [0.0, 1.0, 2.0]
    assert d["rowwise_adagrad"]["m_emb"] == pytest.approx(1 / 32)
    assert d["adam"]["emb_mib"] == pytest.approx(1000 * 32 * 4 / 2**20)
    half = features.derive(parse({**base, "dtype": "bf16"}))
    assert half["emb_mib"] == pytest.approx(d["adam"]["emb_mib"] / 2)


def test_spec_is_immutable() -> None:
    spec = parse(GOOD)
    with pytest.raises(AttributeError):
        spec.batch_size = 1  # type: ignore[misc]
    assert msgspec.structs.replace(spec, batch_size=1).batch_size == 1


def test_transformer_shape_and_saved_activations() -> None:
    d, seq, vocab, layers = 256, 128.0, 8192, 4
    params = vocab * d + seq * d + (d * vocab + vocab) + layers * (12 * d * d + 13 * d)
    spec = parse({"family": "bert", "batch_size": 8, "params": params, "optimizer": "adam",
                  "tables": [{"rows": vocab, "dim": d, "pooling": seq},
                             {"rows": int(seq), "dim": d, "pooling": seq}]})
    assert features.transformer_shape(spec) == (d, seq, vocab, 4, pytest.approx(layers))
    fp32 = features.saved_activation_bytes(spec)
    half = features.saved_activation_bytes(msgspec.structs.replace(spec, dtype="bf16"))
    assert half < fp32 < 2 * half + 8 * seq * layers * (4 * seq + 2 * d)  # 1-byte masks
    cnn = parse({"family": "resnet", "batch_size": 4, "activations": 1000})
    assert features.saved_activation_bytes(cnn) == pytest.approx(4 / 7 * 4 * 1000 * 4)
    d2 = features.derive(spec)
    assert d2["step_regime"] + d2["bwd_regime"] == 1.0
    # Adam step: params + grads + 2 states + 1 temporary
    assert d2["step_mib"] == pytest.approx(5 * params * 4 / 2**20)
