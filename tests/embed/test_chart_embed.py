"""The chart's embedding cache: off by default; when on, an LFU-bounded cache per node whose
agent may only get and patch Nodes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from tooling import helm_path

CHART = Path(__file__).resolve().parents[2] / "charts" / "sparse"


def render(*sets: str) -> list[dict]:
    helm = helm_path()
    if not os.access(helm, os.X_OK):
        if os.environ.get("SPARSE_E2E_REQUIRE", "") not in ("", "0"):
            pytest.fail("helm not built: run hack/build-helm.sh")
        pytest.skip("helm not built (hack/build-helm.sh)")
    args = [str(helm), "template", "t", str(CHART)]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=120).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def test_embed_cache_off_by_default_and_bounded_lfu_when_on():
    assert not [d for d in render() if "embed-cache" in d["metadata"]["name"]]
    docs = {(d["kind"], d["metadata"]["name"]): d for d in render(
        "embedCache.enabled=true", "embedCache.storeUrl=redis://store:6379/0",
        "embedCache.maxMemory=1gb")}
    ds = docs[("DaemonSet", "t-sparse-embed-cache")]
    cache, agent = ds["spec"]["template"]["spec"]["containers"]
    assert "--maxmemory=1gb" in cache["args"] and "--maxmemory-policy=allkeys-lfu" in cache["args"]
    assert cache["ports"][0]["hostPort"] == 6390
    assert agent["command"] == ["python", "-m", "embed.cli"]
    assert "--store=redis://store:6379/0" in agent["args"]
    # the cache runs with the eviction settings the hit-ratio benchmark measured
    from embed.cache import LFU_SETTINGS

    for name, value in LFU_SETTINGS.items():
        assert f"--{name}={value}" in cache["args"]
    assert "--tier-dir=/var/run/sparse-embed/tier" in agent["args"]
    assert any(a.startswith("--tier-mib=") for a in agent["args"])
    role = docs[("ClusterRole", "t-sparse-embed-cache")]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"],
                              "verbs": ["get", "patch"]},
                             {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]


def test_embed_cache_metrics_are_scraped_per_node_with_the_others():
    base = ("embedCache.enabled=true", "embedCache.storeUrl=redis://store:6379/0")
    monitors = {d["metadata"]["name"]: d
                for d in render(*base, "metrics.serviceMonitor.enabled=true")
                if d["kind"] == "ServiceMonitor"}
    sm = monitors["t-sparse-embed-cache"]
    assert sm["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "embed-cache"
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] == "metrics"  # the DaemonSet's Service names that port
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"],
            "targetLabel": "instance_node"} in endpoint["relabelings"]
    docs = {(d["kind"], d["metadata"]["name"]): d for d in render(*base)}
    svc = docs[("Service", "t-sparse-embed-cache")]
    assert [p["name"] for p in svc["spec"]["ports"]] == ["metrics"]
    assert not any(d["kind"] == "ServiceMonitor" and "embed-cache" in d["metadata"]["name"]
                   for d in render("metrics.serviceMonitor.enabled=true"))
