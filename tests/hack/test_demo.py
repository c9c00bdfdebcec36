"""The demo's tables: built from the API objects and the /inspect view (no cluster needed)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "sparse_demo", Path(__file__).resolve().parents[2] / "hack" / "demo.py")
demo = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = demo  # dataclasses look their module up
_spec.loader.exec_module(demo)
e2e_cluster = demo.e2e_cluster  # tests/e2e/cluster.py, put on sys.path by the demo


def _bound(spec, node: str, uuids: list[str]) -> dict:
    pod = demo.pod_manifest(spec)
    pod["spec"]["nodeName"] = node
    pod["metadata"]["annotations"]["sparse.io/gpu-uuids"] = ",".join(uuids)
    return pod


def test_pod_manifests_ask_for_what_the_table_says() -> None:
    by_name = {p.name: p for p in demo.PODS}
    whole = demo.pod_manifest(by_name["bert-large-pretrain"])
    assert whole["spec"]["schedulerName"] == "sparse-scheduler"
    assert whole["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "4"}
    share = demo.pod_manifest(by_name["dlrm-ctr"])
    assert share["metadata"]["annotations"]["sparse.io/job-class"] == "recommendation"
    assert share["spec"]["containers"][0]["resources"]["limits"] == {
        "sparse.io/gpu-milli": "300", "sparse.io/gpu-mem": "10240"}
    assert by_name["dlrm-ctr"].asks == "30% + 10 GiB"
    assert by_name["bert-large-pretrain"].asks == "4 GPUs"
    classes = {p.job_class for p in demo.PODS}
    assert {"recommendation", "cnn", "transformer"} <= classes


def test_placements_name_gpu_indexes_and_neighbours() -> None:
    nodes = [e2e_cluster.gpu_node_manifest("n0", gpus=2), e2e_cluster.gpu_node_manifest("n1")]
    inv = json.loads(nodes[0]["metadata"]["annotations"]["sparse.io/gpu-inventory"])
    u0, u1 = inv[0]["uuid"], inv[1]["uuid"]
    specs = [demo.DemoPod("a", "cnn", "", milli=500, mem_mib=1024),
             demo.DemoPod("b", "recommendation", "", milli=300, mem_mib=1024),
             demo.DemoPod("c", "transformer", "", gpus=1),
             demo.DemoPod("d", "rnn", "", milli=100, mem_mib=99999)]
    pods = [_bound(specs[0], "n0", [u1]), _bound(specs[1], "n0", [u1]),
            _bound(specs[2], "n0", [u0]), demo.pod_manifest(specs[3])]
    reasons = {"d": "0/2 nodes are available: 2 GPUs too small. preemption: not helpful."}
    rows = {r.pod: r for r in demo.placements(specs, pods, nodes, reasons)}
    assert rows["a"].node == "n0" and rows["a"].gpus == [f"1 ({u1[4:12]})"]
    assert rows["a"].shares_with == ["b"] and rows["b"].shares_with == ["a"]
    assert rows["c"].gpus == [f"0 ({u0[4:12]})"] and rows["c"].shares_with == []
    assert rows["d"].node is None
    assert rows["d"].reason == "0/2 nodes are available: 2 GPUs too small."
    assert [r.pod for r in demo.placements(specs, pods, nodes, reasons)] == ["a", "b", "c", "d"]


def test_inspect_rows() -> None:
    view = {"version": 3, "policy": "sparse", "nodes": [{"name": "n0", "gpus": [
        {"uuid": "GPU-12345678-aaaa", "model": "V100M32", "memory_mib": 32768,
         "memory_reserved_mib": 11264, "milli_reserved": 900,
         "pods": [{"pod": "ml/a", "job_class": "cnn", "milli": 600, "memory_mib": 10240,
                   "state": "bound"},
                  {"pod": "ml/b", "job_class": "recommendation", "milli": 300,
                   "memory_mib": 1024, "state": "reserved"}]},
        {"uuid": "GPU-87654321-bbbb", "model": "V100M32", "memory_mib": 32768,
         "memory_reserved_mib": 0, "milli_reserved": 0, "pods": []}]}]}
    rows = demo.inspect_rows(view)
    assert rows[0][:6] == ["n0", "0", "12345678", "V100M32", "11 / 32", "90%"]
    assert rows[0][6] == ("a (cnn, 60%, 10 GiB, bound)\n"
                          "b (recommendation, 30%, 1 GiB, reserved)")
    assert rows[1][6] == "-"


def test_speed_kept_uses_the_pairwise_model() -> None:
    pair = {("recommendation", "cnn"): 0.2, ("cnn", "recommendation"): 0.5}
    gpu = {"uuid": "GPU-1", "model": "V100M32", "memory_mib": 32768, "memory_reserved_mib": 0,
           "milli_reserved": 0, "pods": [
               {"pod": "ml/rec", "uid": "r", "job_class": "recommendation", "milli": 300,
                "memory_mib": 1, "state": "bound"},
               {"pod": "ml/cnn", "uid": "c", "job_class": "cnn", "milli": 500,
                "memory_mib": 1, "state": "bound"}]}
    alone = {"uuid": "GPU-2", "model": "V100M32", "memory_mib": 32768, "memory_reserved_mib": 0,
             "milli_reserved": 0, "pods": [{"pod": "ml/solo", "uid": "s", "job_class": "cnn",
                                            "milli": 1000, "memory_mib": 1, "state": "bound"}]}
    kept = demo.speed_kept({"nodes": [{"name": "n", "gpus": [gpu, alone]}]},
                           lambda a, b: pair[(a, b)])
    assert kept["rec"] == 0.2 ** 0.5
    assert kept["cnn"] == 0.5 ** 0.3
    assert kept["solo"] == 1.0
