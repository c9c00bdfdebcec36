"""Prediction worker: unbound pods with model features -> ``sparse:demand:<pod-uid>`` in Redis.

Split into a pure core and thin adapters:

* :func:`handle_pod` (pure): pod dict -> :class:`~predictor.estimate.Prediction`,
  :class:`PredictionError` (bad annotation) or ``None`` (not ours: bound, finished, no
  annotation);
* :class:`RedisWriter`: one ``HSET`` + ``EXPIRE`` transaction per prediction;
* :class:`EventPoster`: a Warning event on the pod for a bad annotation;
* :func:`process` glues the three for one pod and never raises;
* :func:`watch_pods` / :func:`serve`: the kubernetes-asyncio watch loop with reconnects.

Prometheus metrics (``Metrics``): ``sparse_predictor_predictions_total{job_class}``,
``sparse_predictor_prediction_seconds``, ``sparse_predictor_errors_total{reason}``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from prometheus_client import CollectorRegistry, Counter, Histogram

from predictor import estimate, schema

log = logging.getLogger("sparse.predictor.worker")

DEMAND_KEY_PREFIX = "sparse:demand:"  # same as extender.annotations.DEMAND_KEY_PREFIX
DEFAULT_TTL_S = 3600
EVENT_REASON = "InvalidModelAnnotation"
COMPONENT = "sparse-predictor"


@dataclass(frozen=True, slots=True)
class PredictionError:
    reason: str  # metric label: invalid_annotation | internal
    message: str


def _annotations(pod: dict[str, Any]) -> dict[str, str]:
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    return ann if isinstance(ann, dict) else {}


def is_candidate(pod: dict[str, Any]) -> bool:
    """Not bound yet, not finished, and carrying one of the model annotations."""
    if not isinstance(pod, dict):
        return False
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    if spec.get("nodeName") or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    if status.get("phase") in ("Succeeded", "Failed", "Running"):
        return False
    ann = _annotations(pod)
    return schema.ANN_MODEL in ann or schema.ANN_TASK_INFO in ann


def _world_size(pod: dict[str, Any]) -> int:
    """``WORLD_SIZE`` from a container's environment when it is a count above 1, else 0."""
    containers = (pod.get("spec") or {}).get("containers")
    for c in containers if isinstance(containers, list) else []:
        env = c.get("env") if isinstance(c, dict) else None
        for var in env if isinstance(env, list) else []:
            if isinstance(var, dict) and var.get("name") == "WORLD_SIZE":
                try:
                    world = int(str(var.get("value")).strip())
                except ValueError:
                    continue
                if 1 < world <= schema.MAX_WORKERS:
                    return world
    return 0


_WORKER_KEYS = {"dataParallelWorkers": "embeddingSharding",
                "data_parallel_workers": "embedding_sharding"}


def pod_spec(pod: dict[str, Any]) -> schema.ModelSpec | None:
    """The model a pod describes (None without a model annotation), as the worker predicts
    it: its annotations, and the workers of a multi-process PyTorch job when its annotation
    does not say how they sync: ``WORLD_SIZE`` > 1 in a container's environment, as
    Kubeflow's PyTorchJob and torchrun set it. Such a worker is booked DistributedDataParallel's
    sync, as the job controller books its own jobs of several replicas, and its tables, when
    the annotation says they are sharded, over that many workers; an annotation that states
    ``dataParallelWorkers`` / ``data_parallel_workers`` (0 included) is taken as it is.
    Raises :class:`schema.SchemaError` on a bad one."""
    ann = _annotations(pod)
    world = _world_size(pod)
    said = _model_object(ann.get(schema.ANN_MODEL)) if world else None
    if said is not None:
        if _WORKER_KEYS.keys() & said.keys():
            world = 0  # stated
        else:
            # sharded tables need the workers to be read at all: they go into the annotation
            for workers, sharding in _WORKER_KEYS.items():
                if said.get(sharding):
                    stated = msgspec.json.encode({**said, workers: world}).decode()
                    ann = {**ann, schema.ANN_MODEL: stated}
    spec = schema.from_annotations(ann)
    if spec is not None and world and not spec.data_parallel_workers:
        spec = msgspec.structs.replace(spec, data_parallel_workers=world)
    return spec


def _model_object(raw: str | None) -> dict[str, Any] | None:
    """The ``sparse.io/model`` annotation as a JSON object; None when there is none, or it is
    not one (parsing it reports why)."""
    if raw is None or len(raw) > schema.MAX_ANNOTATION_BYTES:
        return None
    try:
        said = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None
    return said if isinstance(said, dict) else None


def handle_pod(
    pod: dict[str, Any], estimator: estimate.Estimator
) -> estimate.Prediction | PredictionError | None:
    """Pure core: predict the demand of one pod (dict as the API server sends it)."""
    if not is_candidate(pod):
        return None
    try:
        spec = pod_spec(pod)
    except schema.SchemaError as exc:
        return PredictionError("invalid_annotation", str(exc))
    if spec is None:
        return None
    try:
        return estimator.predict(spec)
    except Exception as exc:  # a model bug must not kill the worker
        return PredictionError("internal", f"prediction failed: {type(exc).__name__}: {exc}")


def demand_key(uid: str) -> str:
    return f"{DEMAND_KEY_PREFIX}{uid}"


def demand_fields(p: estimate.Prediction, now: float | None = None) -> dict[str, str]:
    return {
        "gpu_milli": str(int(p.gpu_milli)),
        "gpu_mem_mib": str(int(p.gpu_mem_mib)),
        "job_class": p.job_class,
        "model_version": p.model_version,
        "updated_at": repr(float(time.time() if now is None else now)),
    }


class RedisWriter:
    """Writes one demand hash with a TTL (``redis.asyncio`` client)."""

    def __init__(self, client: Any, ttl_s: int = DEFAULT_TTL_S) -> None:
        if ttl_s <= 0:
            raise ValueError("ttl_s must be positive")
        self.client = client
        self.ttl_s = ttl_s

    async def write(self, uid: str, p: estimate.Prediction, now: float | None = None) -> str:
        key = demand_key(uid)
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping=demand_fields(p, now))
            pipe.expire(key, self.ttl_s)
            await pipe.execute()
        return key


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        kw = {"registry": registry} if registry is not None else {}
        self.predictions = Counter(
            "sparse_predictor_predictions_total", "Demand predictions written", ["job_class"], **kw
        )
        self.latency = Histogram(
            "sparse_predictor_prediction_seconds", "Time to predict and write one pod's demand",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0), **kw,
        )
        self.errors = Counter(
            "sparse_predictor_errors_total", "Pods not predicted or not written", ["reason"], **kw
        )


class EventPoster:
    """Posts a Warning event on a pod (kubernetes-asyncio ``CoreV1Api``)."""

    def __init__(self, core_v1: Any) -> None:
        self.core = core_v1

    async def warn(self, pod: dict[str, Any], message: str) -> None:
        meta = pod.get("metadata") or {}
        ns, name = meta.get("namespace", "default"), meta.get("name", "")
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{name}.", "namespace": ns},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": name,
                               "namespace": ns, "uid": meta.get("uid", "")},
            "reason": EVENT_REASON, "message": message[:1000], "type": "Warning",
            "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        await self.core.create_namespaced_event(ns, body)


class _Seen:
    """Bounded memory of what was done per pod uid, so replays of the watch do not rewrite."""

    def __init__(self, size: int = 50_000) -> None:
        self.size = size
        self.d: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def fresh(self, uid: str, digest: str, now: float, max_age: float) -> bool:
        got = self.d.get(uid)
        return got is not None and got[0] == digest and now - got[1] < max_age

    def put(self, uid: str, digest: str, now: float) -> None:
        self.d[uid] = (digest, now)
        self.d.move_to_end(uid)
        while len(self.d) > self.size:
            self.d.popitem(last=False)


@dataclass
class Context:
    estimator: estimate.Estimator
    writer: RedisWriter
    events: EventPoster | None
    metrics: Metrics
    seen: _Seen


async def process(pod: dict[str, Any], ctx: Context) -> str:
    """Handle one pod end to end; returns an outcome word, never raises."""
    t0 = time.perf_counter()
    meta = (pod.get("metadata") or {}) if isinstance(pod, dict) else {}
    uid = meta.get("uid") or ""
    ann = _annotations(pod) if isinstance(pod, dict) else {}
    digest = hashlib.sha256(
        (ann.get(schema.ANN_MODEL, "") + "\0" + ann.get(schema.ANN_TASK_INFO, "")
         + "\0" + ann.get("sparse.io/gpu-model", "")).encode()
    ).hexdigest()
    now = time.time()
    if uid and ctx.seen.fresh(uid, digest, now, ctx.writer.ttl_s / 2):
        return "unchanged"
    result = handle_pod(pod, ctx.estimator)
    if result is None:
        return "skipped"
    if not uid:
        ctx.metrics.errors.labels("no_uid").inc()
        return "error"
    if isinstance(result, PredictionError):
        ctx.metrics.errors.labels(result.reason).inc()
        ctx.seen.put(uid, digest, now)  # one event per annotation version, not per replay
        log.warning("pod %s/%s: %s", meta.get("namespace"), meta.get("name"), result.message)
        if ctx.events is not None:
            try:
                await ctx.events.warn(pod, result.message)
            except Exception as exc:
                ctx.metrics.errors.labels("event").inc()
                log.warning("could not post event: %s", exc)
        return "invalid"
    try:
        await ctx.writer.write(uid, result, now)
    except Exception as exc:
        ctx.metrics.errors.labels("redis").inc()
        log.warning("redis write for %s failed: %s", uid, exc)
        return "error"
    ctx.seen.put(uid, digest, now)
    ctx.metrics.predictions.labels(result.job_class).inc()
    ctx.metrics.latency.observe(time.perf_counter() - t0)
    return "written"


async def watch_pods(core_v1: Any, ctx: Context, namespace: str | None = None,
                     stop: asyncio.Event | None = None) -> None:
    """Watch unbound pods forever (reconnecting with backoff) and process each event."""
    from kubernetes_asyncio import watch

    backoff = 1.0
    while stop is None or not stop.is_set():
        w = watch.Watch()
        try:
            fn = (core_v1.list_namespaced_pod if namespace else core_v1.list_pod_for_all_namespaces)
            args = (namespace,) if namespace else ()
            async with w.stream(fn, *args, field_selector="spec.nodeName=",
                                timeout_seconds=300) as stream:
                async for ev in stream:
                    backoff = 1.0
                    if ev.get("type") in ("ADDED", "MODIFIED"):
                        raw = ev.get("raw_object")
                        if isinstance(raw, dict):
                            await process(raw, ctx)
                    if stop is not None and stop.is_set():
                        break
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            ctx.metrics.errors.labels("watch").inc()
            log.warning("pod watch failed (%s); retrying in %.0fs", exc, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 60.0)
        finally:
            w.stop()


async def serve(kubeconfig: str | None, redis_url: str, metrics_port: int, ttl_s: int,
                namespace: str | None, models_dir: Path = estimate.MODELS_DIR) -> None:
    import redis.asyncio as aioredis
    from kubernetes_asyncio import client, config
    from prometheus_client import start_http_server

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    est = estimate.Estimator.load(models_dir)
    if kubeconfig:
        await config.load_kube_config(config_file=kubeconfig)
    else:
        config.load_incluster_config()
    from extender import telemetry  # base units, no _created series, sparse_build_info

    telemetry.standardize_global_registry("predictor")
    start_http_server(metrics_port)
    rds = aioredis.from_url(redis_url)
    async with client.ApiClient() as api:
        core = client.CoreV1Api(api)
        ctx = Context(est, RedisWriter(rds, ttl_s), EventPoster(core), Metrics(), _Seen())
        log.info("predictor worker %s: watching pods, writing %s*", est.version,
                 DEMAND_KEY_PREFIX)
        try:
            await watch_pods(core, ctx, namespace)
        finally:
            await rds.aclose()
