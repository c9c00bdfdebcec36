"""Tables sharded over a job's workers (TorchRec): what one worker is booked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from predictor import estimate, features, gpus
from predictor.schema import Table
from predictor.sharding import column_block, worker_shard

MIB = 2**20
MEASURED = Path(__file__).parents[2] / "predictor" / "data" / "sharded-tables-cpu.jsonl"
JOB = {"macs": 4e5, "params": 3e5 + 8 * 200_000 * 64, "batchSize": 4096,
       "vocabularySize": [200_000] * 8, "embeddingDim": [64], "idsPerSample": [8],
       "optimizer": "rowwise_adagrad"}


def test_a_worker_holds_its_shards() -> None:
    equal = [Table(rows=1000, dim=64, pooling=2, count=8)]
    tw = worker_shard(equal, "table-wise", 4)
    assert (tw.params, tw.rows, tw.ids, tw.outputs) == (2 * 1000 * 64, 2000, 4, 128)
    # tables that cost alike (same width and ids) go largest first to the least loaded
    # worker, in turn: the fullest holds the 1st, 3rd, 5th largest of five over two workers
    # (the 8-table mix measured: 750,000 rows of 1,125,000 on the fuller of two)
    mixed = [Table(rows=r, dim=8) for r in (400, 200, 200, 100, 100)]
    assert worker_shard(mixed, "table-wise", 2).params == (400 + 200 + 100) * 8
    assert worker_shard(mixed, "table-wise", 8).params == 400 * 8  # some workers hold none
    # tables that cost differently: the ceil(tables / workers) largest, whatever the pairs
    costly = [*mixed, Table(rows=50, dim=64, pooling=20)]
    assert worker_shard(costly, "table-wise", 2).params == 50 * 64 + (400 + 200) * 8
    # row-wise: each table's rows over the workers (rounded up), partial sums of every table
    rw = worker_shard([Table(rows=1001, dim=64, pooling=3, count=2)], "row-wise", 4)
    assert (rw.params, rw.rows, rw.ids, rw.outputs) == (2 * 251 * 64, 502, 6 / 4, 128)
    # column-wise: TorchRec's planner cuts a table into blocks of the smallest divisor of its
    # width from 128 up (a multiple of 4; none: the whole width) and deals them out as tables
    assert [column_block(d) for d in (64, 96, 256, 384, 136, 1024)] == [
        64, 96, 128, 128, 136, 128]
    wide = [Table(rows=1000, dim=256, pooling=3, count=2)]  # four 128-wide blocks
    cw = worker_shard(wide, "column-wise", 4)
    assert (cw.params, cw.rows, cw.ids, cw.outputs) == (1000 * 128, 1000, 3, 128)
    assert worker_shard(wide, "column-wise", 3).params == 2 * 1000 * 128
    narrow = [Table(rows=1000, dim=100, pooling=3, count=2)]  # not split: as table-wise
    assert worker_shard(narrow, "column-wise", 3) == worker_shard(narrow, "table-wise", 3)
    with pytest.raises(ValueError, match="sharding"):
        worker_shard(equal, "diagonal", 2)
    # unpooled (a sequence model's EmbeddingCollection): one vector per id goes back
    seq = [Table(rows=1000, dim=64, pooling=50, count=4)]
    assert worker_shard(seq, "table-wise", 2, unpooled=True).outputs == 2 * 50 * 64
    assert worker_shard(seq, "row-wise", 2, unpooled=True).outputs == 4 * 50 * 64 / 2
    assert worker_shard(seq, "row-wise", 2).outputs == 4 * 64  # pooled: partial sums


def _parse(**fields: object) -> features.ModelSpec:
    return features.parse_model(json.dumps({**JOB, **fields}))


@pytest.mark.parametrize("sharding", ["table-wise", "row-wise", "column-wise"])
def test_sharded_workers_hold_their_shards_and_no_table_gradient(sharding: str) -> None:
    replicated = features.derive(_parse(dataParallelWorkers=4))
    sharded = features.derive(_parse(dataParallelWorkers=4, embeddingSharding=sharding))
    tables = 8 * 200_000 * 64 * 4 / MIB
    dense = 3e5 * 4 / MIB
    rowwise_state = 8 * 200_000 * 4 / MIB  # rowwise Adagrad: one value per row
    received = 4096 * 8 * 64 * 4 / MIB  # this worker's samples' lookups, every table
    # a quarter of the weights and of their row-wise state (64-wide tables are not split
    # column-wise: two whole tables), the dense part, its Adagrad sums and DDP's buckets,
    # and two exchanges' received lookups, which collectives may hold into the next step
    assert sharded["hold_mib"] == pytest.approx(
        tables / 4 + rowwise_state / 4 + dense * 3 + 2 * received)
    assert replicated["hold_mib"] - sharded["hold_mib"] > 0.7 * tables
    # the gradients are the dense part's; the backward adds the exchanged lookups: the
    # shards' outputs for the job's batch twice, and their ids
    outputs = 8 * 64 if sharding == "row-wise" else 2 * 64
    ids = 8 * 8 / 4 if sharding == "row-wise" else 2 * 8
    assert sharded["grad_mib"] == pytest.approx(
        dense + 4 * 4096 * (2 * outputs * 4 + ids * 8) / MIB)
    assert sharded["step_mib"] < replicated["step_mib"] - tables
    est = estimate.Estimator.load()
    assert est.predict(_parse(dataParallelWorkers=4, embeddingSharding=sharding)).gpu_mem_mib \
        < est.predict(_parse(dataParallelWorkers=4)).gpu_mem_mib


def test_sharding_needs_workers_and_tables_and_no_sparse_gradients() -> None:
    with pytest.raises(features.SchemaError, match="dataParallelWorkers"):
        _parse(embeddingSharding="row-wise")
    with pytest.raises(features.SchemaError, match="sparseGradients"):
        _parse(embeddingSharding="row-wise", dataParallelWorkers=2, sparseGradients=True)
    with pytest.raises(features.SchemaError, match="vocabularySize"):
        features.parse_model(json.dumps({"batchSize": 8, "macs": 10, "params": 10,
                                         "dataParallelWorkers": 2,
                                         "embeddingSharding": "table-wise"}))
    with pytest.raises(features.SchemaError, match="embeddingSharding"):
        _parse(embeddingSharding="diagonal", dataParallelWorkers=2)
    full = {"family": "dlrm", "batch_size": 8, "tables": [{"rows": 10, "dim": 4}],
            "embedding_sharding": "row-wise"}
    with pytest.raises(features.SchemaError, match="data_parallel_workers"):
        features.parse_model(json.dumps(full))
    spec = features.parse_model(json.dumps({**full, "data_parallel_workers": 2}))
    assert features.to_job_fields(spec)["embeddingSharding"] == "row-wise"


def _measured() -> list[dict]:
    return [json.loads(line) for line in MEASURED.read_text().splitlines() if line.strip()]


def test_measured_workers_of_sharded_jobs_are_booked_their_peak() -> None:
    """Every worker of TorchRec jobs trained on the CPU (hack/torchrec-shards.py): the
    job-fields estimate follows the measured peak, and the booking covers it."""
    est = estimate.Estimator.load()
    ctx = gpus.get(gpus.DEFAULT_GPU).ctx_mib
    rows = _measured()
    assert len(rows) >= 60 and {r["sharding"] for r in rows} == {
        "table_wise", "row_wise", "column_wise"}
    ratios = []
    for r in rows:
        p = est.predict(features.parse_model(json.dumps(r["job"])))
        assert p.gpu_mem_mib >= r["peak_mib"] + ctx, r  # every worker, every loop
        if not r.get("pipeline"):
            ratios.append(p.train_mib / r["peak_mib"])
    # trained step by step, the worker holding the most is what each worker is booked: no
    # worker above it by more than the job-level activations' spread, most close
    assert len(ratios) >= 100 and min(ratios) > 0.9
    assert sorted(ratios)[len(ratios) // 2] < 1.25


def test_the_shards_are_booked_as_they_are_not_scaled() -> None:
    # the job level scales its state estimate up for an unseen model's unknowns (sparse or
    # dense gradients, how the optimizer steps); a sharded table has none of them
    big = {**JOB, "vocabularySize": [20_000_000] * 8, "params": 3e5 + 8 * 20_000_000 * 64,
           "dataParallelWorkers": 4, "embeddingSharding": "row-wise"}
    spec = features.parse_model(json.dumps(big))
    shards = 8 * 5_000_000 * (64 + 1) * 4 / MIB  # a quarter of the rows, their row-wise state
    assert features.derive(spec)["shards_mib"] == pytest.approx(shards)
    p = estimate.Estimator.load().predict(spec)
    ctx = gpus.get(gpus.DEFAULT_GPU).ctx_mib
    assert shards < p.train_mib < p.gpu_mem_mib - ctx < 1.15 * p.train_mib


def test_unpooled_lookups_exchange_a_vector_per_id() -> None:
    seq = {**JOB, "idsPerSample": [50], "dataParallelWorkers": 4,
           "embeddingSharding": "table-wise"}
    pooled = features.derive(_parse(**seq))
    unpooled = features.derive(_parse(**seq, unpooledLookups=True))
    # two tables a worker, 50 ids each: 50 times the outputs, twice, for the job's batch;
    # the received lookups one vector per id, in the step and in two exchanges held over
    extra = 4096 * 8 * 64 * 49 * 4 / MIB
    assert unpooled["grad_mib"] - pooled["grad_mib"] == pytest.approx(
        4 * 4096 * 2 * (2 * 64 * 49) * 4 / MIB)
    assert unpooled["io_mib"] - pooled["io_mib"] == pytest.approx(extra)
    assert unpooled["hold_mib"] - pooled["hold_mib"] == pytest.approx(2 * extra)
    assert features.to_job_fields(_parse(**seq, unpooledLookups=True))["unpooledLookups"]
