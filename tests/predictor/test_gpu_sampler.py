"""The GPU generator's NVML sampler against a scripted NVML: GPM metrics when the device
supports them, per-process fallbacks when it does not, and a failing probe costs only its own
columns."""

from __future__ import annotations

import sys
import time
import types
from typing import Any

import pytest

from predictor.generate import gpu


class _NVMLError(Exception):
    pass


def _fake_nvml(*, gpm: bool, pid_visible: bool, pid: int, broken: tuple[str, ...] = ()) -> Any:
    m = types.ModuleType("pynvml")
    m.NVMLError = _NVMLError
    m.NVML_GPM_METRICS_GET_VERSION = 1
    m.NVML_GPM_METRIC_SM_UTIL = 2
    m.NVML_GPM_METRIC_SM_OCCUPANCY = 3
    m.NVML_GPM_METRIC_DRAM_BW_UTIL = 10
    m.NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
    m.freed = []

    def maybe_broken(name: str) -> None:
        if name in broken:
            raise _NVMLError(f"{name} not supported")

    def util(h: Any) -> Any:
        maybe_broken("util")
        return types.SimpleNamespace(gpu=80)

    def meminfo(h: Any) -> Any:
        return types.SimpleNamespace(used=5 * 2**30, total=141 * 2**30)

    def procs(h: Any) -> Any:
        return [types.SimpleNamespace(pid=pid if pid_visible else 1, usedGpuMemory=3 * 2**30)]

    def proc_util(h: Any, ts: int) -> Any:
        return [types.SimpleNamespace(pid=pid if pid_visible else 1, smUtil=40)]

    def gpm_support(h: Any) -> Any:
        return types.SimpleNamespace(isSupportedDevice=int(gpm))

    class Metric:
        def __init__(self) -> None:
            self.metricId, self.nvmlReturn, self.value = 0, 0, 0.0

    class MetricsGet:
        def __init__(self) -> None:
            self.metrics = [Metric() for _ in range(8)]

    def metrics_get(mg: Any) -> Any:
        for k in range(mg.numMetrics):
            mid = mg.metrics[k].metricId
            mg.metrics[k].value = {2: 60.0, 3: 30.0, 10: 20.0, 5: 10.0}[mid]
            mg.metrics[k].nvmlReturn = 3 if mid == 5 else 0  # tensor metric unsupported
        return mg

    m.nvmlDeviceGetUtilizationRates = util
    m.nvmlDeviceGetMemoryInfo = meminfo
    m.nvmlDeviceGetComputeRunningProcesses = procs
    m.nvmlDeviceGetProcessUtilization = proc_util
    m.nvmlGpmQueryDeviceSupport = gpm_support
    m.nvmlGpmSampleAlloc = lambda: object()
    m.nvmlGpmSampleGet = lambda h, s: s
    m.nvmlGpmSampleFree = lambda s: m.freed.append(s)
    m.c_nvmlGpmMetricsGet_t = MetricsGet
    m.nvmlGpmMetricsGet = metrics_get
    return m


def _sample(monkeypatch: pytest.MonkeyPatch, nvml: Any, pid: int = 4242) -> gpu._Sampler:
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    s = gpu._Sampler(handle=object(), pid=pid)
    s.start()
    time.sleep(0.45)
    s.stop.set()
    s.join(timeout=5)
    assert not s.is_alive()
    return s


def test_gpm_metrics_are_read_per_metric(monkeypatch: pytest.MonkeyPatch) -> None:
    s = _sample(monkeypatch, _fake_nvml(gpm=True, pid_visible=True, pid=4242))
    assert s.sm_source == "nvml-gpm-sm-util"
    assert s.gpm["gpu_sm_active_pct"] and set(s.gpm["gpu_sm_active_pct"]) == {60.0}
    assert set(s.gpm["gpu_dram_bw_pct"]) == {20.0}
    assert s.gpm["gpu_tensor_active_pct"] == []  # that metric's own return code said no
    assert set(s.util) == {80.0} and set(s.proc_used) == {3 * 2**30}
    assert not s.errors


def test_without_gpm_and_pid_namespaces_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    s = _sample(monkeypatch, _fake_nvml(gpm=False, pid_visible=False, pid=4242))
    assert s.sm_source == "none"  # samples of another PID are never taken as ours
    assert s.proc_used == [] and set(s.dev_used) == {5 * 2**30}
    s = _sample(monkeypatch, _fake_nvml(gpm=False, pid_visible=True, pid=4242))
    assert s.sm_source == "nvml-process-smutil" and set(s.smutil) == {40.0}


def test_a_failing_probe_costs_only_its_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    s = _sample(monkeypatch, _fake_nvml(gpm=True, pid_visible=True, pid=7, broken=("util",)),
                pid=7)
    assert s.util == [] and s.gpm["gpu_sm_active_pct"]
    assert any(e.startswith("utilization:") for e in s.errors)
