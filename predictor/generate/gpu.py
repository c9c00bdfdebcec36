"""GPU mode of the generator: the same models and steps, measured on a CUDA device.

Per config: 3 warm-up steps, ``torch.cuda.reset_peak_memory_stats()``, then timed steps for
``GPU_MEASURE_S`` seconds while a thread samples NVML at 10 Hz. Recorded:

* ``gpu_max_allocated_bytes`` / ``gpu_max_reserved_bytes``: ``torch.cuda.max_memory_*``;
  ``peak_bytes`` is set to max-allocated (params, inputs and all tensors, like the CPU label);
* ``gpu_nvml_used_bytes``: NVML used memory of this process (includes the CUDA context), or,
  where NVML cannot attribute memory to this process (PID namespaces), the device's used memory
  less what it used before this process touched the GPU (``gpu_nvml_source`` says which);
  ``gpu_ctx_bytes`` = nvml used - max reserved (calibrates ``gpus.CATALOGUE[*].ctx_mib``);
* ``gpu_util_pct``: mean NVML ``utilization.gpu`` (fraction of time a kernel ran);
* ``gpu_sm_active_pct``: mean SM activity from NVML GPM (``NVML_GPM_METRIC_SM_UTIL``, Hopper
  and later) or, where GPM is unsupported, NVML per-process ``smUtil`` samples;
  ``gpu_sm_source`` says which. With GPM also SM occupancy, DRAM bandwidth and tensor-core
  activity (``gpu_sm_occupancy_pct``, ``gpu_dram_bw_pct``, ``gpu_tensor_active_pct``).

Shape columns (FLOPs, bytes moved, activations) come from the CPU tracer: copied from the
committed CPU row of the same config when one is given, else traced here (FakeTensorMode).

Without CUDA (or without pynvml) ``require_cuda`` raises :class:`GpuUnavailable`; there is no
CPU fallback and CPU numbers are never written into the GPU columns.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from typing import Any

GPU_MEASURE_S = float(os.environ.get("SPARSE_GPU_MEASURE_S", "2.0"))
WARMUP_STEPS = 3
SAMPLE_S = 0.1

# NVML GPM metric (constant name in pynvml) -> dataset column
GPM_METRICS = {
    "NVML_GPM_METRIC_SM_UTIL": "gpu_sm_active_pct",
    "NVML_GPM_METRIC_SM_OCCUPANCY": "gpu_sm_occupancy_pct",
    "NVML_GPM_METRIC_DRAM_BW_UTIL": "gpu_dram_bw_pct",
    "NVML_GPM_METRIC_ANY_TENSOR_UTIL": "gpu_tensor_active_pct",
}

_idle_used: int | None = None  # device memory in use before this process made a CUDA context


class GpuUnavailable(RuntimeError):
    pass


def require_cuda() -> None:
    try:
        import torch
    except ImportError as exc:
        raise GpuUnavailable("GPU mode needs torch (pip install 'sparse[torch]')") from exc
    if not torch.cuda.is_available():
        raise GpuUnavailable(
            "GPU mode needs a CUDA device: torch.cuda.is_available() is False on this machine. "
            "Run `sparse-predictor generate --device cpu` for CPU-measured labels (memory and "
            "FLOP proxies only; never GPU utilisation)."
        )
    try:
        import pynvml  # noqa: F401
    except ImportError as exc:
        raise GpuUnavailable("GPU mode needs pynvml (pip install 'sparse[agent]')") from exc


def _gpu_model_name(raw: str, total_bytes: int) -> str:
    from predictor import gpus

    name = raw.upper().replace("NVIDIA", "").replace("TESLA", "").replace(" ", "")
    mib = total_bytes // 2**20
    if "V100" in name:
        return "V100M32" if mib > 20000 else "V100M16"
    if "A100" in name:
        return "A100M80" if mib > 50000 else "A100"
    if "3090" in name:
        return "RTX3090"
    if "1080TI" in name:
        return "GTX1080Ti"
    for key in sorted(gpus.CATALOGUE, key=len, reverse=True):
        if key.upper() in name:
            return key
    return raw.strip()


class _Sampler(threading.Thread):
    """10 Hz NVML sampling; every probe is optional, so a driver or sandbox that lacks one
    leaves its columns empty instead of losing the row."""

    def __init__(self, handle: Any, pid: int) -> None:
        super().__init__(daemon=True)
        self.h, self.pid = handle, pid
        self.stop = threading.Event()
        self.util: list[float] = []
        self.proc_used: list[int] = []
        self.dev_used: list[int] = []
        self.gpm: dict[str, list[float]] = {col: [] for col in GPM_METRICS.values()}
        self.smutil: list[float] = []
        self.errors: set[str] = set()

    @property
    def sm_source(self) -> str:
        if self.gpm["gpu_sm_active_pct"]:
            return "nvml-gpm-sm-util"
        return "nvml-process-smutil" if self.smutil else "none"

    def _try(self, what: str, fn: Any) -> Any:
        import pynvml

        try:
            return fn()
        except (pynvml.NVMLError, AttributeError, OSError, ValueError) as exc:
            self.errors.add(f"{what}: {type(exc).__name__}: {exc}")
            return None

    def run(self) -> None:
        import pynvml

        ids = [(getattr(pynvml, k, None), col) for k, col in GPM_METRICS.items()]
        ids = [(i, col) for i, col in ids if i is not None]
        gpm = None
        support = self._try("gpm-support", lambda: pynvml.nvmlGpmQueryDeviceSupport(self.h))
        if support is not None and support.isSupportedDevice:
            gpm = self._try("gpm-sample", pynvml.nvmlGpmSampleAlloc)
            if gpm is not None and self._try(
                    "gpm-sample", lambda: pynvml.nvmlGpmSampleGet(self.h, gpm)) is None:
                gpm = None
        last_ts = int(time.time() * 1e6)
        while not self.stop.wait(SAMPLE_S):
            rates = self._try("utilization", lambda: pynvml.nvmlDeviceGetUtilizationRates(self.h))
            if rates is not None:
                self.util.append(float(rates.gpu))
            info = self._try("memory", lambda: pynvml.nvmlDeviceGetMemoryInfo(self.h))
            if info is not None:
                self.dev_used.append(int(info.used))
            procs = self._try("processes",
                              lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(self.h)) or []
            for p in procs:
                if p.pid == self.pid and p.usedGpuMemory:
                    self.proc_used.append(int(p.usedGpuMemory))
            if gpm is not None:
                gpm = self._gpm_step(gpm, ids)
            else:
                samples = self._try(
                    "process-utilization",
                    lambda ts=last_ts: pynvml.nvmlDeviceGetProcessUtilization(self.h, ts)) or []
                self.smutil += [float(s.smUtil) for s in samples if s.pid == self.pid]
                last_ts = int(time.time() * 1e6)
        if gpm is not None:
            self._try("gpm-free", lambda: pynvml.nvmlGpmSampleFree(gpm))

    def _gpm_step(self, prev: Any, ids: list[tuple[int, str]]) -> Any:
        import pynvml

        nxt = self._try("gpm-sample", pynvml.nvmlGpmSampleAlloc)
        if nxt is None or self._try("gpm-sample",
                                    lambda: pynvml.nvmlGpmSampleGet(self.h, nxt)) is None:
            return prev
        mg = pynvml.c_nvmlGpmMetricsGet_t()
        mg.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = len(ids)
        mg.sample1, mg.sample2 = prev, nxt
        for k, (metric_id, _) in enumerate(ids):
            mg.metrics[k].metricId = metric_id
        if self._try("gpm-metrics", lambda: pynvml.nvmlGpmMetricsGet(mg)) is not None:
            for k, (_, col) in enumerate(ids):
                if mg.metrics[k].nvmlReturn == 0:
                    self.gpm[col].append(float(mg.metrics[k].value))
        self._try("gpm-free", lambda: pynvml.nvmlGpmSampleFree(prev))
        return nxt


def _mean(xs: list[float]) -> float | str:
    return round(sum(xs) / len(xs), 3) if xs else ""


def measure(cfg: dict[str, Any], shape: dict[str, Any] | None = None) -> dict[str, Any]:
    """One config on the current CUDA device. ``shape``: the CPU row of the same config, whose
    :data:`predictor.dataset.SHAPE_COLUMNS` are reused instead of tracing the step again."""
    import pynvml
    import torch

    from predictor import dataset
    from predictor.generate import measure as cpu_measure
    from predictor.generate import models

    global _idle_used
    require_cuda()
    # A config that failed (out of memory, say) may have left its tensors to the collector
    # and its blocks in PyTorch's cache; neither may count towards this config.
    gc.collect()
    torch.cuda.empty_cache()
    pynvml.nvmlInit()
    dev = torch.cuda.current_device()
    h = pynvml.nvmlDeviceGetHandleByIndex(dev)
    mem = pynvml.nvmlDeviceGetMemoryInfo(h)
    if _idle_used is None:
        _idle_used = int(mem.used)
    name = pynvml.nvmlDeviceGetName(h)
    gpu_model = _gpu_model_name(name if isinstance(name, str) else name.decode(), mem.total)

    t0 = time.perf_counter()
    dtype = cpu_measure.DTYPES[cfg["dtype"]]
    try:
        with torch.device("cuda"):
            model, make_batch, loss_fn = models.build(cfg, dtype)
            opt = models.make_optimizer(cfg["optimizer"], model)
            batch = make_batch()
        for _ in range(WARMUP_STEPS):
            loss_fn(model, batch).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        sampler = _Sampler(h, os.getpid())
        sampler.start()
        steps, ts = 0, time.perf_counter()
        try:
            while time.perf_counter() - ts < GPU_MEASURE_S:
                loss_fn(model, batch).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                steps += 1
                if steps % 5 == 0:
                    torch.cuda.synchronize()
            torch.cuda.synchronize()
        finally:
            sampler.stop.set()
            sampler.join()
        elapsed = time.perf_counter() - ts
        alloc = torch.cuda.max_memory_allocated()
        reserved = torch.cuda.max_memory_reserved()
        n_params = sum(p.numel() for p in model.parameters())
        n_layers = models.count_layers(model)
    finally:
        model = opt = batch = None
        torch.cuda.empty_cache()
    if sampler.proc_used:
        used, used_source = max(sampler.proc_used), "process"
    elif sampler.dev_used:
        used, used_source = max(sampler.dev_used) - _idle_used, "device-minus-idle"
    else:
        used, used_source = 0, "none"
    if shape is not None:
        shape_cols = {k: shape[k] for k in dataset.SHAPE_COLUMNS}
    else:  # FLOPs / op counts from the CPU tracer (FakeTensorMode, same model and step)
        traced = cpu_measure.measure(cfg, fake=True)
        shape_cols = {k: traced[k] for k in dataset.SHAPE_COLUMNS}
    return {
        **shape_cols,
        "exec_mode": "cuda",
        "label_source": "gpu",
        "gpu_model": gpu_model,
        "n_params": n_params,
        "n_layers": n_layers,
        "peak_bytes": alloc,
        "gpu_max_allocated_bytes": alloc,
        "gpu_max_reserved_bytes": reserved,
        "gpu_nvml_used_bytes": used if used > 0 else "",
        "gpu_nvml_source": used_source,
        "gpu_ctx_bytes": used - reserved if used > 0 else "",
        "gpu_util_pct": _mean(sampler.util),
        **{col: _mean(xs) for col, xs in sampler.gpm.items()},
        "gpu_sm_active_pct": _mean(sampler.gpm["gpu_sm_active_pct"] or sampler.smutil),
        "gpu_sm_source": sampler.sm_source,
        "gpu_steps_per_s": round(steps / elapsed, 3),
        "gpu_nvml_errors": "; ".join(sorted(sampler.errors)),
        "wall_s": round(time.perf_counter() - t0, 3),
    }
