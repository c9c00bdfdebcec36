"""Every /metrics we serve follows the same conventions, and the dashboard reads only real series.

Base units (``_bytes``, ``_seconds``, ``_ratio`` 0-1), no ``_created`` series, the process and
platform collectors, and ``sparse_build_info``: extender, node agent and predictor worker.
"""

from __future__ import annotations

import json
import re
from importlib.metadata import version
from pathlib import Path

import pytest
from builders import gpu_node, inventory
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

from agent.fake import FakeSource
from agent.metrics import AgentMetrics
from extender import telemetry
from extender.interference import default_matrix
from extender.ledger.memory import MemoryLedger
from extender.metrics import Metrics
from extender.placement import make_policy
from extender.service import Scheduler
from predictor import worker

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "charts" / "sparse" / "dashboards" / "sparse.json"
UNIT_SUFFIXES = ("_bytes", "_seconds", "_ratio", "_total", "_info")
# Counts need no unit; booleans are 0/1.
UNITLESS_OK = {"sparse_gpu_pods", "sparse_ledger_reservations", "sparse_agent_gpus",
               "sparse_agent_gpu_mig_enabled", "sparse_embed_cache_up", "sparse_embed_cache_rows",
               "sparse_embed_tier_blocks"}


async def _extender_registry() -> CollectorRegistry:
    s = Scheduler(inventory=inventory(gpu_node("gpu-a", 2, "V100M16", 16384)),
                  ledger=MemoryLedger(), matrix=default_matrix(), policy=make_policy("sparse"))
    await s.view()
    metrics = Metrics(lambda: s.state)
    metrics.watch_locality_waits(lambda: s.locality_waits)  # as the app registers it
    return metrics.registry


def _agent_registry() -> CollectorRegistry:
    src = FakeSource("n1", 2, model="V100M16", memory_mib=16384, utilization_pct=50,
                     memory_used_mib=1024)
    m = AgentMetrics()
    devices = src.devices()
    m.update("n1", devices, src.samples(devices))
    return m.registry


class _CacheInfo:
    """A node cache's INFO replies, as redis-py parses them."""

    def info(self, section: str) -> dict[str, int]:
        return ({"keyspace_hits": 90, "keyspace_misses": 10, "evicted_keys": 3}
                if section == "stats" else {"used_memory": 2**20, "maxmemory": 2**30})


def _embed_registry() -> CollectorRegistry:
    from embed.metrics import CacheCollector

    registry = telemetry.new_registry("embed")
    registry.register(CacheCollector(_CacheInfo(), lambda: {"ads": 120}, lambda: {"ads": 60}))
    return registry


def _predictor_registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    worker.Metrics(registry).predictions.labels("recommendation").inc()
    telemetry.register_build_info(registry, "predictor")
    return registry


def _families(registry: CollectorRegistry) -> dict[str, str]:
    return {m.name: m.type for m in registry.collect()}


@pytest.fixture
async def registries() -> dict[str, CollectorRegistry]:
    return {"extender": await _extender_registry(), "agent": _agent_registry(),
            "predictor": _predictor_registry(), "embed": _embed_registry()}


async def test_base_units_and_no_created_series(registries) -> None:
    for component, registry in registries.items():
        text = generate_latest(registry).decode()
        assert "_created" not in text, component
        assert "_mib" not in text and "milli" not in text, component
        for name, kind in _families(registry).items():
            if not name.startswith("sparse_") or name in UNITLESS_OK:
                continue
            full = name + "_total" if kind == "counter" else name
            assert full.endswith(UNIT_SUFFIXES), f"{component}: {name} has no unit suffix"


async def test_process_platform_and_build_info_on_every_registry(registries) -> None:
    for component, registry in registries.items():
        if component != "predictor":  # the worker serves the global registry (below)
            names = _families(registry)
            assert "process_resident_memory_bytes" in names, component
            assert "python_info" in names, component
        labels = {"component": component, "version": version("sparse"),
                  "revision": "unknown"}
        samples = [s for m in registry.collect() if m.name == "sparse_build_info"
                   for s in m.samples]
        assert len(samples) == 1, component
        assert samples[0].value == 1
        assert labels.items() <= samples[0].labels.items(), samples[0].labels
    global_names = _families(REGISTRY)
    assert "process_resident_memory_bytes" in global_names and "python_info" in global_names


async def test_values_are_in_base_units(registries) -> None:
    agent = registries["agent"]
    sample = next(s for m in agent.collect() if m.name == "sparse_agent_gpu_memory_total_bytes"
                  for s in m.samples)
    assert sample.value == 16384 * 2**20
    ext = registries["extender"]
    caps = [s.value for m in ext.collect() if m.name == "sparse_gpu_memory_capacity_bytes"
            for s in m.samples]
    assert caps == [16384 * 2**20] * 2
    booked = [s.value for m in ext.collect() if m.name == "sparse_gpu_compute_reserved_ratio"
              for s in m.samples]
    assert booked == [0.0, 0.0]


async def test_dashboard_reads_only_exported_series(registries) -> None:
    exported: set[str] = set()
    for registry in registries.values():
        for m in registry.collect():  # labelled families without children have no samples
            suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}
            exported.update(m.name + s for s in suffixes.get(m.type, [""]))
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs.append(dash["templating"]["list"][1]["query"]["query"])
    # Label lists (by, on, group_left, ...) name labels, not series.
    exprs = [re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
             for e in exprs]
    used = {n for e in exprs for n in re.findall(r"\b(?:sparse|process|python)_[a-z_]+", e)}
    assert any(n.startswith("sparse_") for n in used), "no sparse_ series in the dashboard"
    assert used <= exported, used - exported


def test_global_registry_gets_build_info_once() -> None:
    first = telemetry.standardize_global_registry("predictor")
    again = telemetry.standardize_global_registry("predictor")
    assert first is again is REGISTRY
    samples = [s for m in REGISTRY.collect() if m.name == "sparse_build_info" for s in m.samples]
    assert len(samples) == 1 and samples[0].labels["component"] == "predictor"
