"""Worker core (pure) and its Redis writer against a real redis-server."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from predictor import estimate, features, worker

pytestmark = pytest.mark.redis

SPEC = {"family": "dlrm", "batch_size": 1024, "optimizer": "adagrad", "gpu_model": "T4",
        "macs": 5e5, "params": 2.1e7, "activations": 2000,
        "tables": [{"rows": 1000000, "dim": 16, "pooling": 4, "count": 2}],
        "dense_features": 13, "bottom_mlp": [256, 16], "top_mlp": [256, 1]}


def pod(uid: str = "u-1", annotations: dict[str, str] | None = None, node: str | None = None,
        phase: str = "Pending") -> dict[str, Any]:
    ann = {features.ANN_MODEL: json.dumps(SPEC)} if annotations is None else annotations
    return {
        "metadata": {"name": "trainer", "namespace": "ml", "uid": uid, "annotations": ann},
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase},
    }


@pytest.fixture(scope="module")
def est() -> estimate.Estimator:
    return estimate.Estimator.load()


def test_handle_pod_predicts(est: estimate.Estimator) -> None:
    p = worker.handle_pod(pod(), est)
    assert isinstance(p, estimate.Prediction)
    assert 1 <= p.gpu_milli <= 1000
    assert p.gpu_mem_mib > 1000  # at least the T4 context constant
    assert p.job_class == "recommendation"
    assert p.model_version == est.version


@pytest.mark.parametrize("p", [
    pod(node="gpu-node-1"), pod(phase="Running"), pod(phase="Succeeded"), pod(annotations={}),
    {"metadata": None}, {}, "not-a-dict",
])
def test_handle_pod_ignores_what_is_not_ours(est: estimate.Estimator, p: Any) -> None:
    assert worker.handle_pod(p, est) is None


def test_handle_pod_bad_annotation_is_an_error_value(est: estimate.Estimator) -> None:
    bad = pod(annotations={features.ANN_MODEL: '{"family": "dlrm", "batch_size": -4}'})
    r = worker.handle_pod(bad, est)
    assert isinstance(r, worker.PredictionError)
    assert r.reason == "invalid_annotation" and "$.batch_size" in r.message


def test_handle_pod_accepts_task_info(est: estimate.Estimator) -> None:
    ti = {"macs": 1e6, "params": 3e7, "batch_size": 512, "embedding_size_total": 2e6,
          "embedding_dim_total": 416, "embedding_table_count": 26}
    r = worker.handle_pod(pod(annotations={features.ANN_TASK_INFO: json.dumps(ti)}), est)
    assert isinstance(r, estimate.Prediction) and r.job_class == "recommendation"


class FakeEvents:
    def __init__(self, fail: bool = False) -> None:
        self.posted: list[tuple[dict, str]] = []
        self.fail = fail

    async def warn(self, p: dict, message: str) -> None:
        if self.fail:
            raise RuntimeError("apiserver down")
        self.posted.append((p, message))


def make_ctx(est: estimate.Estimator, client: Any, events: Any, ttl: int = 3600):
    reg = CollectorRegistry()
    ctx = worker.Context(est, worker.RedisWriter(client, ttl), events, worker.Metrics(reg),
                         worker._Seen())
    return ctx, reg


async def test_process_writes_demand_hash(est: estimate.Estimator, redis_client: Any) -> None:
    ctx, reg = make_ctx(est, redis_client, FakeEvents(), ttl=120)
    before = time.time()
    assert await worker.process(pod("uid-42"), ctx) == "written"
    h = await redis_client.hgetall("sparse:demand:uid-42")
    assert set(h) == {"gpu_milli", "gpu_mem_mib", "job_class", "model_version", "updated_at"}
    expected = est.predict(features.parse_model(json.dumps(SPEC)))
    assert int(h["gpu_milli"]) == expected.gpu_milli
    assert int(h["gpu_mem_mib"]) == expected.gpu_mem_mib
    assert h["job_class"] == "recommendation" and h["model_version"] == est.version
    assert before <= float(h["updated_at"]) <= time.time()
    assert 0 < await redis_client.ttl("sparse:demand:uid-42") <= 120
    assert reg.get_sample_value("sparse_predictor_predictions_total",
                                {"job_class": "recommendation"}) == 1
    assert reg.get_sample_value("sparse_predictor_prediction_seconds_count") == 1
    # a replay of the same pod does not rewrite; a changed annotation does
    assert await worker.process(pod("uid-42"), ctx) == "unchanged"
    changed = pod("uid-42", {features.ANN_MODEL: json.dumps({**SPEC, "batch_size": 8})})
    assert await worker.process(changed, ctx) == "written"


async def test_process_bad_annotation_posts_event(est: estimate.Estimator,
                                                  redis_client: Any) -> None:
    events = FakeEvents()
    ctx, reg = make_ctx(est, redis_client, events)
    bad = pod("uid-bad", {features.ANN_MODEL: '{"family": "dlrm", "batch_size": "lots"}'})
    assert await worker.process(bad, ctx) == "invalid"
    assert await worker.process(bad, ctx) == "unchanged"  # one event per annotation version
    assert len(events.posted) == 1 and "$.batch_size" in events.posted[0][1]
    assert await redis_client.exists("sparse:demand:uid-bad") == 0
    assert reg.get_sample_value("sparse_predictor_errors_total",
                                {"reason": "invalid_annotation"}) == 1
    # event posting failing is counted, not raised
    ctx2, reg2 = make_ctx(est, redis_client, FakeEvents(fail=True))
    assert await worker.process(bad, ctx2) == "invalid"
    assert reg2.get_sample_value("sparse_predictor_errors_total", {"reason": "event"}) == 1


async def test_process_survives_redis_outage(est: estimate.Estimator) -> None:
    import redis.asyncio as aioredis

    dead = aioredis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    ctx, reg = make_ctx(est, dead, FakeEvents())
    assert await worker.process(pod("uid-x"), ctx) == "error"
    assert reg.get_sample_value("sparse_predictor_errors_total", {"reason": "redis"}) == 1
    await dead.aclose()


async def test_event_poster_body() -> None:
    class Core:
        async def create_namespaced_event(self, ns: str, body: dict) -> None:
            self.ns, self.body = ns, body

    core = Core()
    await worker.EventPoster(core).warn(pod("uid-e"), "x" * 5000)
    assert core.ns == "ml"
    assert core.body["involvedObject"]["uid"] == "uid-e"
    assert core.body["type"] == "Warning" and core.body["reason"] == worker.EVENT_REASON
    assert len(core.body["message"]) <= 1000


def test_writer_rejects_bad_ttl() -> None:
    with pytest.raises(ValueError):
        worker.RedisWriter(object(), ttl_s=0)


def test_a_multi_process_pytorch_worker_is_booked_its_ddp_sync(
        est: estimate.Estimator) -> None:
    # WORLD_SIZE > 1, as Kubeflow's PyTorchJob sets it: DistributedDataParallel's buckets
    # copy the dense gradients, so the worker needs more than the same model trained alone
    def worker_pod(world: str, **extra: Any) -> dict[str, Any]:
        p = pod(annotations={features.ANN_MODEL: json.dumps({**SPEC, **extra})})
        p["spec"]["containers"] = [{"name": "trainer", "env": [
            {"name": "RANK", "value": "0"}, {"name": "WORLD_SIZE", "value": world}]}]
        return p

    alone = worker.handle_pod(pod(), est)
    ddp = worker.handle_pod(worker_pod("4"), est)
    grads_mib = SPEC["params"] * 4 / 2**20  # dense gradients of every parameter
    assert ddp.gpu_mem_mib >= alone.gpu_mem_mib + grads_mib
    odd = pod()
    odd["spec"]["containers"] = ["trainer", {"env": "WORLD_SIZE=4"}, {"env": [None]}]
    for same in (worker_pod("1"), worker_pod("four"), worker_pod("4", data_parallel_workers=0),
                 odd):
        assert worker.handle_pod(same, est).gpu_mem_mib == alone.gpu_mem_mib


def test_a_torchrec_worker_shards_its_tables_over_world_size(
        est: estimate.Estimator) -> None:
    # the annotation says the tables are sharded and leaves the workers to WORLD_SIZE
    def worker_pod(world: str | None, **extra: Any) -> dict[str, Any]:
        p = pod(annotations={features.ANN_MODEL: json.dumps({**SPEC, **extra})})
        if world is not None:
            p["spec"]["containers"] = [{"name": "trainer", "env": [
                {"name": "WORLD_SIZE", "value": world}]}]
        return p

    sharded = worker.pod_spec(worker_pod("4", embedding_sharding="row-wise"))
    assert sharded.data_parallel_workers == 4 and sharded.embedding_sharding == "row-wise"
    stated = worker.pod_spec(worker_pod("4", embedding_sharding="row-wise",
                                        data_parallel_workers=2))
    assert stated.data_parallel_workers == 2
    replicated = worker.handle_pod(worker_pod("4"), est)
    assert worker.handle_pod(worker_pod("4", embedding_sharding="row-wise"), est).gpu_mem_mib \
        < replicated.gpu_mem_mib
    for alone in (worker_pod(None, embedding_sharding="row-wise"),
                  worker_pod("1", embedding_sharding="row-wise")):
        with pytest.raises(features.SchemaError, match="data_parallel_workers"):
            worker.pod_spec(alone)
