from __future__ import annotations

import json

import pytest
import yaml

from extender.errors import InvalidInventory
from extender.inventory import (
    Gpu,
    annotation_value,
    inventory_from_conf,
    load_node_conf_file,
    node_from_annotations,
)

SEED_CONFIGMAP = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: kube-gpu-sparse-scheduler-node-conf
  namespace: kube-gpu-sparse
data:
  config.yaml: |
    prometheus:
      host: "http://prometheus.monitoring.svc.cluster.local:9090"
    nodes:
      - name: gpu-node-01
        ip: 10.0.1.100
        gpu: 2
        gpu-mem: 16
        model: GTX1080Ti
        uuids: [
          "GPU-12345678-1234-1234-1234-123456789abc",
          "GPU-87654321-4321-4321-4321-cba987654321"
        ]
        network: eth0
        network_bandwidth_bytes: 1073741824
        region: zone-a
"""


def test_seed_configmap_format():
    inv = inventory_from_conf(yaml.safe_load(SEED_CONFIGMAP))
    node = inv.nodes["gpu-node-01"]
    assert [g.memory_mib for g in node.gpus] == [8192, 8192]
    assert node.gpus[1] == Gpu("GPU-87654321-4321-4321-4321-cba987654321", 1, "GTX1080Ti", 8192)
    assert (node.ip, node.region, node.network_bandwidth_bytes) == (
        "10.0.1.100", "zone-a", 1073741824)


def test_shipped_example(repo_root):
    inv = load_node_conf_file(repo_root / "examples/node-conf.yaml")
    mixed = inv.nodes["gpu-node-03"]
    assert {g.memory_mib for g in mixed.gpus} == {81920, 40960}
    assert inv.gpu_count() == 8


@pytest.mark.parametrize("doc", [
    {"nodes": [{"name": "a", "gpu": 2, "gpu-mem": 16, "model": "X", "uuids": ["u1"]}]},
    {"nodes": [{"name": "a", "gpu": 1, "gpu-mem": 16, "model": "X", "uuids": ["u"]},
               {"name": "b", "gpu": 1, "gpu-mem": 16, "model": "X", "uuids": ["u"]}]},
    {"nodes": [{"name": "a", "gpu": "2", "gpu-mem": 16, "model": "X"}]},
    {"nodes": [{"name": "a", "gpus": [{"uuid": "u", "model": "X", "memory_mib": -1}]}]},
    {"nodes": "nope"},
    [],
])
def test_bad_node_conf(doc):
    with pytest.raises(InvalidInventory):
        inventory_from_conf(doc)


def test_node_annotation_round_trip():
    gpus = [Gpu("GPU-a", 0, "A100", 81920), Gpu("GPU-b", 1, "A100-40", 40960)]
    node = node_from_annotations("n", {"sparse.io/gpu-inventory": annotation_value(gpus)},
                                 {"topology.kubernetes.io/zone": "z"})
    assert node.gpus == tuple(gpus) and node.region == "z"
    assert node_from_annotations("n", {}) is None


@pytest.mark.parametrize("raw", ["not json", json.dumps({"uuid": "x"}),
                                 json.dumps([{"uuid": "x", "model": "m"}]),
                                 json.dumps([{"uuid": "x", "model": "m", "memory_mib": 1}] * 2)])
def test_bad_node_annotation(raw):
    with pytest.raises(InvalidInventory):
        node_from_annotations("n", {"sparse.io/gpu-inventory": raw})
