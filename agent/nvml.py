"""GPU discovery and live sampling through NVML (``pynvml``, the ``agent`` extra).

The only module that imports pynvml. Without the library or the driver, :func:`open_nvml`
raises :class:`NvmlUnavailable` with a message saying what is missing and how to run without
it (``--fake-gpus``).
"""

from __future__ import annotations

import contextlib
from typing import Any

from agent.discovery import DeviceInfo, Sample

MIB = 1024 * 1024


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used on this machine (library, driver or device missing)."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlSource:
    """Reads devices and samples from an initialised NVML."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml

    def devices(self) -> list[DeviceInfo]:
        n = self._nvml
        out = []
        for i in range(n.nvmlDeviceGetCount()):
            handle = n.nvmlDeviceGetHandleByIndex(i)
            try:
                current, _pending = n.nvmlDeviceGetMigMode(handle)
                mig = current == getattr(n, "NVML_DEVICE_MIG_ENABLE", 1)
            except n.NVMLError:  # NotSupported on pre-Ampere GPUs
                mig = False
            out.append(
                DeviceInfo(
                    uuid=_text(n.nvmlDeviceGetUUID(handle)),
                    index=i,
                    name=_text(n.nvmlDeviceGetName(handle)),
                    memory_mib=int(n.nvmlDeviceGetMemoryInfo(handle).total // MIB),
                    mig_enabled=mig,
                )
            )
        return out

    def samples(self, devices: list[DeviceInfo]) -> list[Sample]:
        n = self._nvml
        out = []
        for d in devices:
            try:
                handle = n.nvmlDeviceGetHandleByUUID(d.uuid)
                mem = n.nvmlDeviceGetMemoryInfo(handle)
                util = n.nvmlDeviceGetUtilizationRates(handle)
            except n.NVMLError:  # a GPU fell off the bus: report nothing rather than zeros
                continue
            out.append(Sample(d.uuid, float(util.gpu), mem.used / MIB, mem.total / MIB))
        return out

    def close(self) -> None:
        with contextlib.suppress(Exception):  # shutdown is best effort
            self._nvml.nvmlShutdown()


def open_nvml() -> NvmlSource:
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError as exc:
        raise NvmlUnavailable(
            "pynvml is not installed (pip install 'sparse[agent]'); "
            "use --fake-gpus N to run without GPUs"
        ) from exc
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(
            f"NVML could not be initialised ({exc}): is the NVIDIA driver installed and the "
            "container started with the NVIDIA runtime (NVIDIA_VISIBLE_DEVICES=all)? "
            "Use --fake-gpus N to run without GPUs"
        ) from exc
    return NvmlSource(pynvml)
