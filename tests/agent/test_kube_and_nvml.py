"""The agent's API writes (with a fake CoreV1Api) and NVML reading (with a fake pynvml)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from agent import discovery as d
from agent.kube import MERGE, publish
from agent.nvml import NvmlSource
from extender.annotations import ANN_GPU_INVENTORY


class FakeCore:
    def __init__(self, annotations: dict[str, str] | None, capacity: dict[str, str] | None):
        self.node = SimpleNamespace(
            metadata=SimpleNamespace(annotations=annotations),
            status=SimpleNamespace(capacity=capacity, allocatable=capacity),
        )
        self.calls: list[tuple[str, str, Any, str]] = []

    async def read_node(self, name: str) -> Any:
        return self.node

    async def patch_node(self, name: str, body: Any, _content_type: str) -> None:
        self.calls.append(("node", name, body, _content_type))

    async def patch_node_status(self, name: str, body: Any, _content_type: str) -> None:
        self.calls.append(("status", name, body, _content_type))


DEVICES = d.fake_devices("n1", 2, model="V100M16", memory_mib=16384)


async def test_publish_writes_both_when_missing() -> None:
    core = FakeCore(None, {"cpu": "8"})
    res = await publish(core, "n1", DEVICES, whole_gpus=False)
    assert (res.annotation_written, res.status_written) == (True, True)
    assert [(c[0], c[1], c[3]) for c in core.calls] == [("node", "n1", MERGE),
                                                        ("status", "n1", MERGE)]
    assert core.calls[1][2] == d.status_patch(DEVICES, whole_gpus=False)


async def test_publish_writes_nothing_when_up_to_date() -> None:
    ann = d.annotation_patch(DEVICES)["metadata"]["annotations"]
    core = FakeCore(ann, {"sparse.io/gpu-milli": "2k", "sparse.io/gpu-mem": "32Ki"})
    res = await publish(core, "n1", DEVICES, whole_gpus=False)
    assert (res.annotation_written, res.status_written) == (False, False)
    assert core.calls == []


class FakeNvml:
    NVML_DEVICE_MIG_ENABLE = 1

    class NVMLError(Exception):
        pass

    def __init__(self) -> None:
        self.gpus = [
            (b"GPU-aaaa", b"Tesla V100-SXM2-16GB", 16 * 1024, None),
            ("GPU-bbbb", "NVIDIA A100-SXM4-40GB", 40 * 1024, (1, 1)),
        ]
        self.shutdown = False

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        for i, g in enumerate(self.gpus):
            if (g[0].decode() if isinstance(g[0], bytes) else g[0]) == uuid:
                return i
        raise self.NVMLError("gone")

    def nvmlDeviceGetMigMode(self, h: int) -> tuple[int, int]:
        if self.gpus[h][3] is None:
            raise self.NVMLError("not supported")
        return self.gpus[h][3]

    def nvmlDeviceGetUUID(self, h: int) -> Any:
        return self.gpus[h][0]

    def nvmlDeviceGetName(self, h: int) -> Any:
        return self.gpus[h][1]

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        total = self.gpus[h][2] * 1024 * 1024
        return SimpleNamespace(total=total, used=total // 4)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(gpu=42)

    def nvmlShutdown(self) -> None:
        self.shutdown = True


def test_nvml_source() -> None:
    nvml = FakeNvml()
    src = NvmlSource(nvml)
    devices = src.devices()
    assert [(x.uuid, x.model, x.memory_mib, x.mig_enabled) for x in devices] == [
        ("GPU-aaaa", "V100M16", 16384, False), ("GPU-bbbb", "A100", 40960, True)]
    ann = d.annotation_patch(devices)["metadata"]["annotations"][ANN_GPU_INVENTORY]
    assert "GPU-bbbb" not in ann  # MIG GPU not shared
    gone = d.DeviceInfo("GPU-gone", 9, "x", 1)
    samples = src.samples([*devices, gone])
    assert [(s.uuid, s.utilization_pct, s.memory_used_mib) for s in samples] == [
        ("GPU-aaaa", 42.0, 4096.0), ("GPU-bbbb", 42.0, 10240.0)]
    src.close()
    assert nvml.shutdown
