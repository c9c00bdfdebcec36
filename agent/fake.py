"""Fake GPU source for tests and the local cluster (``--fake-gpus``): no NVML needed."""

from __future__ import annotations

from agent.discovery import DeviceInfo, Sample, fake_devices


class FakeSource:
    def __init__(self, node: str, count: int, *, model: str, memory_mib: int,
                 utilization_pct: float = 0.0, memory_used_mib: float = 0.0) -> None:
        self._devices = fake_devices(node, count, model=model, memory_mib=memory_mib)
        self.utilization_pct = utilization_pct
        self.memory_used_mib = memory_used_mib

    def devices(self) -> list[DeviceInfo]:
        return list(self._devices)

    def samples(self, devices: list[DeviceInfo]) -> list[Sample]:
        return [Sample(d.uuid, self.utilization_pct, self.memory_used_mib, float(d.memory_mib))
                for d in devices]

    def close(self) -> None:
        pass
