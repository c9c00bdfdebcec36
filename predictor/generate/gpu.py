"""GPU mode of the generator: the same models and steps, measured on a CUDA device.

Per config: 3 warm-up steps, ``torch.cuda.reset_peak_memory_stats()``, then timed steps for
``GPU_MEASURE_S`` seconds while a thread samples NVML at 10 Hz. Recorded:

* ``gpu_max_allocated_bytes`` / ``gpu_max_reserved_bytes``: ``torch.cuda.max_memory_*``;
  ``peak_bytes`` is set to max-allocated (params, inputs and all tensors, like the CPU label);
* ``gpu_nvml_used_bytes``: NVML used memory of this process (includes the CUDA context);
  ``gpu_ctx_bytes`` = nvml used - max reserved (calibrates ``gpus.CATALOGUE[*].ctx_mib``);
* ``gpu_util_pct``: mean NVML ``utilization.gpu`` (fraction of time a kernel ran);
* ``gpu_sm_active_pct``: mean SM activity from NVML GPM (``NVML_GPM_METRIC_SM_UTIL``, Hopper
  and later) or, where GPM is unsupported, NVML per-process ``smUtil`` samples;
  ``gpu_sm_source`` says which.

Without CUDA (or without pynvml) ``require_cuda`` raises :class:`GpuUnavailable`; there is no
CPU fallback and CPU numbers are never written into these columns.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

GPU_MEASURE_S = 3.0
WARMUP_STEPS = 3


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
    def __init__(self, handle: Any, pid: int) -> None:
        super().__init__(daemon=True)
        self.h, self.pid = handle, pid
        self.stop = threading.Event()
        self.util: list[float] = []
        self.sm: list[float] = []
        self.used: list[int] = []
        self.source = "none"

    def run(self) -> None:
        import pynvml

        gpm = None
        try:
            if pynvml.nvmlGpmQueryDeviceSupport(self.h).isSupportedDevice:
                gpm = pynvml.nvmlGpmSampleAlloc()
                pynvml.nvmlGpmSampleGet(self.h, gpm)
                self.source = "nvml-gpm-sm-util"
        except (pynvml.NVMLError, AttributeError):
            gpm = None
        last_ts = int(time.time() * 1e6)
        while not self.stop.wait(0.1):
            self.util.append(pynvml.nvmlDeviceGetUtilizationRates(self.h).gpu)
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(self.h):
                if p.pid == self.pid and p.usedGpuMemory:
                    self.used.append(int(p.usedGpuMemory))
            if gpm is not None:
                nxt = pynvml.nvmlGpmSampleAlloc()
                pynvml.nvmlGpmSampleGet(self.h, nxt)
                mg = pynvml.c_nvmlGpmMetricsGet_t()
                mg.version = pynvml.NVML_GPM_METRICS_GET_VERSION
                mg.numMetrics = 1
                mg.sample1, mg.sample2 = gpm, nxt
                mg.metrics[0].metricId = pynvml.NVML_GPM_METRIC_SM_UTIL
                pynvml.nvmlGpmMetricsGet(mg)
                self.sm.append(mg.metrics[0].value)
                pynvml.nvmlGpmSampleFree(gpm)
                gpm = nxt
            else:
                try:
                    for s in pynvml.nvmlDeviceGetProcessUtilization(self.h, last_ts):
                        if s.pid == self.pid:
                            self.sm.append(float(s.smUtil))
                            self.source = "nvml-process-smutil"
                except pynvml.NVMLError:
                    pass
                last_ts = int(time.time() * 1e6)


def measure(cfg: dict[str, Any]) -> dict[str, Any]:
    import pynvml
    import torch

    from predictor.generate import measure as cpu_measure
    from predictor.generate import models

    require_cuda()
    pynvml.nvmlInit()
    dev = torch.cuda.current_device()
    h = pynvml.nvmlDeviceGetHandleByIndex(dev)
    mem = pynvml.nvmlDeviceGetMemoryInfo(h)
    name = pynvml.nvmlDeviceGetName(h)
    gpu_model = _gpu_model_name(name if isinstance(name, str) else name.decode(), mem.total)

    t0 = time.perf_counter()
    dtype = cpu_measure.DTYPES[cfg["dtype"]]
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
    while time.perf_counter() - ts < GPU_MEASURE_S:
        loss_fn(model, batch).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        steps += 1
        if steps % 5 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - ts
    sampler.stop.set()
    sampler.join()
    alloc = torch.cuda.max_memory_allocated()
    reserved = torch.cuda.max_memory_reserved()
    used = max(sampler.used) if sampler.used else 0
    # FLOPs / op counts come from the CPU tracer (FakeTensorMode, same model and step)
    shape = cpu_measure.measure(cfg, fake=True)
    n_params = sum(p.numel() for p in model.parameters())
    del model, opt, batch
    torch.cuda.empty_cache()
    return {
        **shape,
        "exec_mode": "cuda",
        "label_source": "gpu",
        "gpu_model": gpu_model,
        "n_params": n_params,
        "peak_bytes": alloc,
        "gpu_max_allocated_bytes": alloc,
        "gpu_max_reserved_bytes": reserved,
        "gpu_nvml_used_bytes": used,
        "gpu_ctx_bytes": used - reserved if used else "",
        "gpu_util_pct": sum(sampler.util) / len(sampler.util) if sampler.util else "",
        "gpu_sm_active_pct": sum(sampler.sm) / len(sampler.sm) if sampler.sm else "",
        "gpu_sm_source": sampler.source,
        "gpu_steps_per_s": steps / elapsed,
        "wall_s": round(time.perf_counter() - t0, 3),
    }
