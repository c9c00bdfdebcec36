"""Pure discovery → annotation/status logic of the node agent, and its fake GPU source."""

from __future__ import annotations

import json

import pytest

from agent import discovery as d
from agent.fake import FakeSource
from agent.metrics import AgentMetrics
from extender.annotations import ANN_GPU_INVENTORY, RES_GPU_MEM, RES_GPU_MILLI, RES_WHOLE_GPU
from extender.inventory import node_from_annotations


def dev(i: int, name: str = "Tesla V100-SXM2-16GB", mem: int = 16160, mig: bool = False):
    return d.DeviceInfo(uuid=f"GPU-{i:08d}-0000-0000-0000-000000000000", index=i, name=name,
                        memory_mib=mem, mig_enabled=mig)


@pytest.mark.parametrize(
    ("name", "mem", "model"),
    [
        ("Tesla V100-SXM2-16GB", 16160, "V100M16"),
        ("Tesla V100-SXM2-32GB", 32510, "V100M32"),
        ("NVIDIA A100-SXM4-40GB", 40960, "A100"),
        ("NVIDIA A100-SXM4-80GB", 81920, "A100M80"),
        ("NVIDIA A10", 23028, "A10"),
        ("NVIDIA H100 80GB HBM3", 81559, "H100"),
        ("Tesla T4", 15360, "T4"),
        ("NVIDIA GeForce RTX 3090", 24576, "RTX3090"),
        ("GeForce GTX 1080 Ti", 11264, "GTX1080Ti"),
        ("NVIDIA L4", 23034, "NVIDIAL4"),
        ("V100M16", 16384, "V100M16"),  # catalogue names (fake mode) are kept as they are
        ("V100M32", 16384, "V100M32"),
        ("", 1, "UNKNOWN"),
    ],
)
def test_canonical_model(name: str, mem: int, model: str) -> None:
    assert d.canonical_model(name, mem) == model


def test_annotation_round_trips_through_the_extender_parser() -> None:
    devices = [dev(1), dev(0)]
    value = d.annotation_patch(devices)["metadata"]["annotations"][ANN_GPU_INVENTORY]
    node = node_from_annotations("n1", {ANN_GPU_INVENTORY: value})
    assert node is not None
    assert [g.index for g in node.gpus] == [0, 1]
    assert {g.model for g in node.gpus} == {"V100M16"}
    assert json.loads(value)[0] == {"uuid": devices[1].uuid, "index": 0, "model": "V100M16",
                                    "memory_mib": 16160}


def test_status_patch_capacity_and_allocatable() -> None:
    devices = [dev(0), dev(1, "Tesla V100-SXM2-32GB", 32510)]
    patch = d.status_patch(devices, whole_gpus=False)["status"]
    want = {RES_GPU_MILLI: "2000", RES_GPU_MEM: str(16160 + 32510)}
    assert patch == {"capacity": want, "allocatable": want}
    assert RES_WHOLE_GPU not in patch["capacity"]  # the NVIDIA device plugin owns it


def test_whole_gpus_only_when_asked() -> None:
    res = d.extended_resources([dev(0), dev(1)], whole_gpus=True)
    assert res[RES_WHOLE_GPU] == "2"


def test_mig_gpus_are_not_shared() -> None:
    devices = [dev(0), dev(1, "NVIDIA A100-SXM4-40GB", 40960, mig=True)]
    assert [g.index for g in d.inventory(devices)] == [0]
    assert d.extended_resources(devices, whole_gpus=True) == {
        RES_GPU_MILLI: "1000", RES_GPU_MEM: "16160", RES_WHOLE_GPU: "1"}


def test_no_gpus_publishes_zero() -> None:
    assert d.extended_resources([], whole_gpus=False) == {RES_GPU_MILLI: "0", RES_GPU_MEM: "0"}
    assert d.annotation_patch([])["metadata"]["annotations"][ANN_GPU_INVENTORY] == "[]"


def test_needs_update() -> None:
    devices = [dev(0)]
    ann = d.annotation_patch(devices)["metadata"]["annotations"]
    res = d.extended_resources(devices, whole_gpus=False)
    assert d.needs_update(ann, res, res, devices, whole_gpus=False) == (False, False)
    assert d.needs_update({}, res, res, devices, whole_gpus=False) == (True, False)
    assert d.needs_update(None, None, None, devices, whole_gpus=False) == (True, True)
    # a kubelet restart wiped the extended resource from capacity only
    cap = {k: v for k, v in res.items() if k != RES_GPU_MILLI}
    assert d.needs_update(ann, cap, res, devices, whole_gpus=False) == (False, True)
    # the API server's canonical form ("1k") is the same value: no rewrite
    canon = {RES_GPU_MILLI: "1k", RES_GPU_MEM: res[RES_GPU_MEM]}
    assert d.needs_update(ann, canon, canon, devices, whole_gpus=False) == (False, False)
    assert d.needs_update(ann, {**canon, RES_GPU_MEM: "junk"}, canon, devices,
                          whole_gpus=False) == (False, True)
    # nvidia.com/gpu asked for but missing
    assert d.needs_update(ann, res, res, devices, whole_gpus=True) == (False, True)


def test_fake_devices_are_stable_and_distinct() -> None:
    a = d.fake_devices("node-a", 4, model="V100M16", memory_mib=16384)
    again = d.fake_devices("node-a", 4, model="V100M16", memory_mib=16384)
    b = d.fake_devices("node-b", 4, model="V100M16", memory_mib=16384)
    assert a == again
    assert len({x.uuid for x in a + b}) == 8
    assert all(x.uuid.startswith("GPU-") and x.model == "V100M16" for x in a)


@pytest.mark.parametrize(("count", "mem"), [(-1, 16384), (65, 16384), (1, 0)])
def test_fake_devices_reject_nonsense(count: int, mem: int) -> None:
    with pytest.raises(ValueError):
        d.fake_devices("n", count, model="V100M16", memory_mib=mem)


def test_fake_source_and_metrics() -> None:
    src = FakeSource("n1", 2, model="V100M16", memory_mib=16384, utilization_pct=50,
                     memory_used_mib=1024)
    devices = src.devices()
    m = AgentMetrics()
    m.update("n1", devices, src.samples(devices))
    labels = {"gpu": devices[0].uuid, "node": "n1", "model": "V100M16"}
    assert m.registry.get_sample_value("sparse_agent_gpu_utilization_ratio", labels) == 0.5
    assert m.registry.get_sample_value("sparse_agent_gpu_memory_used_bytes", labels) == 1024 * 2**20
    assert m.registry.get_sample_value("sparse_agent_gpu_memory_total_bytes", labels) == 16 * 2**30
    assert m.registry.get_sample_value("sparse_agent_gpus", {"node": "n1"}) == 2
