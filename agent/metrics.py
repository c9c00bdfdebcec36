"""Prometheus metrics of the node agent: measured use per GPU.

Labels ``gpu`` (UUID), ``node`` and ``model`` match the extender's ``sparse_gpu_*`` gauges, so
reserved and measured use join on ``gpu`` in PromQL and in the Grafana dashboard. Base units
(bytes, ratios 0-1), process/platform collectors and ``sparse_build_info``
(:mod:`extender.telemetry`).
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge

from agent.discovery import DeviceInfo, Sample
from extender import telemetry

LABELS = ["gpu", "node", "model"]
MIB = 1024 * 1024  # NVML samples are in MiB; metrics are in bytes


class AgentMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or telemetry.new_registry("agent")
        r = self.registry
        self.utilization = Gauge("sparse_agent_gpu_utilization_ratio",
                                 "Measured SM utilisation of the GPU (0..1).", LABELS, unit="ratio",
                                 registry=r)
        self.mem_used = Gauge("sparse_agent_gpu_memory_used_bytes",
                              "Measured GPU memory in use.", LABELS, unit="bytes", registry=r)
        self.mem_total = Gauge("sparse_agent_gpu_memory_total_bytes",
                               "GPU memory reported by the driver.", LABELS, unit="bytes",
                               registry=r)
        self.mig = Gauge("sparse_agent_gpu_mig_enabled",
                         "1 when MIG mode is on (the GPU is then not shared by sparse).",
                         LABELS, registry=r)
        self.gpus = Gauge("sparse_agent_gpus", "GPUs published for sharing.", ["node"], registry=r)
        self.publishes = Counter("sparse_agent_publish_total",
                                 "Inventory publications to the API server by result.",
                                 ["result"], registry=r)

    def update(self, node: str, devices: Sequence[DeviceInfo], samples: Sequence[Sample]) -> None:
        by_uuid = {d.uuid: d for d in devices}
        for g in (self.utilization, self.mem_used, self.mem_total, self.mig):
            g.clear()
        for d in devices:
            self.mig.labels(d.uuid, node, d.model).set(1.0 if d.mig_enabled else 0.0)
        for s in samples:
            d = by_uuid.get(s.uuid)
            if d is None:
                continue
            key = (s.uuid, node, d.model)
            self.utilization.labels(*key).set(s.utilization_pct / 100.0)
            self.mem_used.labels(*key).set(s.memory_used_mib * MIB)
            self.mem_total.labels(*key).set(s.memory_total_mib * MIB)
        self.gpus.labels(node).set(sum(1 for d in devices if not d.mig_enabled))
