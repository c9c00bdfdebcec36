"""Step-time reporting for training jobs (runs inside the job's container; needs only
prometheus_client, so this file can be copied into any training image).

    from extender.jobmetrics import StepReporter
    steps = StepReporter.from_env()      # labels from the pod's env, /metrics on :9400
    for batch in loader:
        with steps.step():
            train_step(batch)

Exports ``sparse_job_step_seconds`` (gauge: mean step time over the last ``window`` steps)
and, when known, ``sparse_job_solo_step_seconds`` (the same job's step time alone on a GPU:
from a profiling run or an earlier run; the pair worker also learns it from times the job
ran alone). Labels: ``namespace``, ``pod``, ``job_class``, ``gpu`` (the GPU UUID the job
runs on). Environment: ``POD_NAMESPACE``, ``POD_NAME`` (downward API), ``SPARSE_JOB_CLASS``,
``SPARSE_GPU_UUID`` or ``NVIDIA_VISIBLE_DEVICES``, ``SPARSE_SOLO_STEP_SECONDS``,
``SPARSE_METRICS_PORT`` (default 9400).
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Gauge, start_http_server

LABELS = ("namespace", "pod", "job_class", "gpu")
DEFAULT_PORT = 9400


class StepReporter:
    def __init__(self, namespace: str, pod: str, job_class: str, gpu: str, *,
                 solo_step_s: float | None = None, window: int = 50,
                 registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        labels = {"namespace": namespace, "pod": pod, "job_class": job_class, "gpu": gpu}
        self._step = Gauge("sparse_job_step_seconds", "Mean training step time (recent steps)",
                           LABELS, registry=self.registry).labels(**labels)
        self._solo = Gauge("sparse_job_solo_step_seconds", "Step time of this job alone on a GPU",
                           LABELS, registry=self.registry).labels(**labels)
        self._times: deque[float] = deque(maxlen=max(1, window))
        if solo_step_s:
            self._solo.set(solo_step_s)

    @classmethod
    def from_env(cls, serve: bool = True) -> StepReporter:
        env = os.environ
        gpu = env.get("SPARSE_GPU_UUID") or env.get("NVIDIA_VISIBLE_DEVICES", "").split(",")[0]
        solo = env.get("SPARSE_SOLO_STEP_SECONDS")
        reporter = cls(env.get("POD_NAMESPACE", "default"), env.get("POD_NAME", "unknown"),
                       env.get("SPARSE_JOB_CLASS", "unknown"), gpu or "unknown",
                       solo_step_s=float(solo) if solo else None)
        if serve:
            reporter.serve(int(env.get("SPARSE_METRICS_PORT", DEFAULT_PORT)))
        return reporter

    def serve(self, port: int, addr: str = "0.0.0.0"):  # noqa: ANN201, S104 - pod network
        """Serve /metrics in a daemon thread; returns the server (``shutdown()`` stops it)."""
        server, _ = start_http_server(port, addr=addr, registry=self.registry)
        return server

    def observe(self, seconds: float) -> None:
        self._times.append(float(seconds))
        self._step.set(sum(self._times) / len(self._times))

    def set_solo(self, seconds: float) -> None:
        self._solo.set(float(seconds))

    @contextmanager
    def step(self) -> Iterator[None]:
        t0 = time.perf_counter()
        yield
        self.observe(time.perf_counter() - t0)
