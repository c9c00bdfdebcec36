"""GPU catalogue: peak throughput, memory bandwidth and CUDA-context constants per GPU model.

Pure data. Names follow the extender (``sparse.io/gpu-model``, e.g. ``V100M16``).

``peak_tflops_fp32`` / ``peak_tflops_fp16`` are dense peak numbers from the vendor datasheets
(fp16 = tensor-core dense peak where the GPU has tensor cores; bf16 is treated as fp16 and falls
back to fp32 on GPUs without bf16 support). ``mem_bw_gbs`` is the datasheet memory bandwidth.

``ctx_mib`` is the memory a PyTorch training process holds on the GPU that is *not* a tensor:
CUDA context, cuBLAS/cuDNN handles and workspaces, caching-allocator slack. These are **defaults,
not measurements of ours**: no GPU was available when they were set. Sources: Lucid (ASPLOS '23)
reports ~2,050 MiB for its smallest NeuMF job on an RTX 3090 (upper bound: it includes the job);
GPUMemNet's Horus sheet uses +1,000 MiB; CARMA's A100 ResNet-18 gap between FakeTensor estimate
and measurement is ~730 MB. We use 1,000 MiB for pre-Ampere GPUs and 1,500 MiB for Ampere and
later (bigger kernels images, larger cuBLAS workspaces). ``sparse-predictor generate --device
cuda`` measures ``nvml_used - max_memory_reserved`` per GPU and ``train`` replaces these
defaults with the per-model median of such rows when they exist.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuSpec:
    name: str
    memory_mib: int
    peak_tflops_fp32: float
    peak_tflops_fp16: float
    mem_bw_gbs: float
    ctx_mib: int
    bf16: bool


CATALOGUE: dict[str, GpuSpec] = {
    g.name: g
    for g in (
        GpuSpec("K80", 11441, 4.1, 4.1, 240, 1000, False),  # per GK210 die
        GpuSpec("P100", 16280, 9.3, 18.7, 732, 1000, False),
        GpuSpec("T4", 15360, 8.1, 65.0, 320, 1000, False),
        GpuSpec("V100M16", 16160, 15.7, 125.0, 900, 1000, False),
        GpuSpec("V100M32", 32510, 15.7, 125.0, 900, 1000, False),
        GpuSpec("GTX1080Ti", 11264, 11.3, 11.3, 484, 1000, False),
        GpuSpec("RTX3090", 24576, 35.6, 71.0, 936, 1500, True),
        GpuSpec("A10", 23028, 31.2, 125.0, 600, 1500, True),
        GpuSpec("A100", 40960, 19.5, 312.0, 1555, 1500, True),
        GpuSpec("A100M80", 81920, 19.5, 312.0, 2039, 1500, True),
        GpuSpec("H100", 81559, 67.0, 989.0, 3350, 1500, True),
        GpuSpec("H200", 143771, 67.0, 989.0, 4800, 1500, True),
    )
}

DEFAULT_GPU = "V100M32"

# Kernel launch + framework dispatch cost per aten op on the GPU timeline, seconds. Used by the
# roofline proxy in ``compute_label``; 6 us is the usual order for eager PyTorch.
OP_OVERHEAD_S = 6e-6


def get(name: str) -> GpuSpec:
    try:
        return CATALOGUE[name]
    except KeyError:
        known = ", ".join(sorted(CATALOGUE))
        raise KeyError(f"unknown GPU model {name!r}; known: {known}") from None


def peak_flops(gpu: GpuSpec, dtype: str) -> float:
    """Peak FLOP/s for a training dtype (fp32, fp16, bf16)."""
    if dtype == "fp16" or (dtype == "bf16" and gpu.bf16):
        return gpu.peak_tflops_fp16 * 1e12
    return gpu.peak_tflops_fp32 * 1e12


def compute_label(flops: float, bytes_moved: float, n_ops: float, gpu: GpuSpec, dtype: str) -> int:
    """Roofline proxy of the compute share (milli-GPU) a job needs when running alone.

    ``busy = max(flops / peak_flops, bytes / bandwidth)`` is the time the SMs or the memory
    system are saturated per step; ``n_ops * OP_OVERHEAD_S`` is launch/dispatch time in which the
    GPU idles. ``milli = 1000 * busy / (busy + overhead)``. This is a proxy from CPU-measured
    FLOPs, bytes and op counts — NOT measured GPU utilisation.
    """
    busy = max(flops / peak_flops(gpu, dtype), bytes_moved / (gpu.mem_bw_gbs * 1e9))
    overhead = n_ops * OP_OVERHEAD_S
    if busy + overhead <= 0:
        return 1
    return int(min(1000, max(1, round(1000 * busy / (busy + overhead)))))
