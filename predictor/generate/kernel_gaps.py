"""What PyTorch's own tooling gets wrong about a kernel, mended for the tracer.

**Fake kernels that allocate less than the real ones.** The tracer runs a step on fake
tensors to measure it without the memory (``describe``, the generator's fake rows); their
sizes are what the meta kernels return. One is known to be wrong in a way that matters for
training memory: the oneDNN LSTM layer (``aten.mkldnn_rnn_layer``, what ``nn.LSTM`` runs on
the CPU) returns an empty workspace, while the real kernel returns the gates and states it
keeps for backward (about 60 bytes per sequence step, sample and hidden unit in fp32:
116 MiB for a batch of 512 over 30 steps at 128 units, 8x its output), alive from the
forward to the backward. Its size is oneDNN's (padded, aligned), so it is measured: the real
kernel runs on zero tensors of the same layer: at the traced sizes when its workspace is
small (tens of MiB), else at a few short sequences and small batches, and the size at the
traced ones is the bilinear fit through them (within 0.01 % of the real kernel's at batches
of 512-1,000 over 30-200 steps).

**Kernels the FLOP counter has no formula for.** ``FlopCounterMode`` counts none for the same
LSTM layer, so an LSTM model's ``macs`` (what the job fields carry, and what their
activation terms scale with) missed its recurrent layers: registered here as what the layer
multiplies, 2 x steps x batch x gates x units x (inputs + units) FLOPs forward (the
input and recurrent projections of every gate at every step), twice that backward (the
gradients of the inputs and of the weights), as the counter prices a matmul.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily
from torch.utils.flop_counter import flop_registry, register_flop_formula

# the oneDNN LSTM layer's op packet, and its overload the tracer sees (None on a PyTorch
# without it)
_RNN_PACKET = getattr(torch.ops.aten, "mkldnn_rnn_layer", None)
MKLDNN_RNN = getattr(_RNN_PACKET, "default", None)
EXACT_UP_TO = 64 * 2**20  # a workspace about this small is measured at the traced sizes
STEPS_PROBED = (8, 16)  # else at these sequence lengths (when the traced one is longer)
BATCHES_PROBED = (32, 64)  # and these batches (when the traced one is larger)
WORKSPACE_PER_UNIT = 64  # bytes per step, sample and hidden unit, about (fp32)


def complete(func: Any, args: tuple, out: Any) -> Any:
    """``out`` of ``func(*args)`` with the real kernel's sizes where the fake one's differ
    (as fake tensors); ``out`` itself otherwise."""
    if MKLDNN_RNN is None or func is not MKLDNN_RNN:
        return out
    workspace = out[3]
    if not isinstance(workspace, FakeTensor) or workspace.numel():
        return out
    return (*out[:3], workspace.new_empty(_rnn_workspace(args)))


def _rnn_workspace(args: tuple) -> int:
    """Bytes of the oneDNN LSTM layer's workspace at ``args`` (input of shape steps x batch x
    features, four weights, the initial hidden and cell states of batch x units, then the
    layer's settings)."""
    steps, batch = int(args[0].shape[0]), int(args[0].shape[1])
    layer = (tuple(args[0].shape[2:]), args[0].dtype,
             tuple(tuple(w.shape) for w in args[1:5]),
             tuple(tuple(t.shape[1:]) if t is not None else None for t in args[5:7]),
             tuple(tuple(a) if isinstance(a, list) else a for a in args[7:]))
    hidden = int(args[2].shape[-1])  # the recurrent weight: (gates x units, units)
    if steps * batch * hidden * WORKSPACE_PER_UNIT <= EXACT_UP_TO:
        return _probe(layer, steps, batch)
    ts = STEPS_PROBED if steps > STEPS_PROBED[-1] else (steps,)
    bs = BATCHES_PROBED if batch > BATCHES_PROBED[-1] else (batch,)

    def terms(t: int, b: int) -> list[float]:  # 1, t, b, t*b: those the probes vary
        return [1.0] + [t] * (len(ts) > 1) + [b] * (len(bs) > 1) + [t * b] * (
            len(ts) > 1 and len(bs) > 1)

    design = np.array([terms(t, b) for t in ts for b in bs], dtype=float)
    sizes = np.array([_probe(layer, t, b) for t in ts for b in bs], dtype=float)
    coef = np.linalg.solve(design, sizes) if len(sizes) > 1 else sizes
    return max(int(round(float(np.array(terms(steps, batch)) @ coef))), 0)


@functools.lru_cache(maxsize=256)
def _probe(layer: tuple, steps: int, batch: int) -> int:
    """The real kernel's workspace bytes for ``layer`` at ``steps`` x ``batch``."""
    features, dtype, weights, states, settings = layer
    # grad mode on: the kernel keeps a workspace only for a backward (none of these tensors
    # requires grad, so nothing is recorded); below autograd, where the tracer runs, it is off
    with unset_fake_temporarily(), torch.enable_grad():
        x = torch.zeros((steps, batch, *features), dtype=dtype)
        ws = [torch.zeros(shape, dtype=dtype) for shape in weights]
        hc = [None if s is None else torch.zeros((batch, *s), dtype=dtype) for s in states]
        real = [list(a) if isinstance(a, tuple) else a for a in settings]
        got = MKLDNN_RNN(x, *ws, *hc, *real)
        return int(got[3].nbytes)


def _rnn_layer_flops(input_shape: Any, w_input: Any, w_hidden: Any) -> int:
    """Forward FLOPs of one oneDNN RNN layer: every gate's input and recurrent projection at
    every step (input: steps x batch x features; weights: gates x units by inputs, and by
    units)."""
    steps, batch = int(input_shape[0]), int(input_shape[1])
    rows, inputs = (int(d) for d in w_input)
    return 2 * steps * batch * rows * (inputs + int(w_hidden[1]))


# (a PyTorch that prices the layer itself keeps its own formula)
_RNN_BACKWARD_PACKET = getattr(torch.ops.aten, "mkldnn_rnn_layer_backward", None)
if _RNN_PACKET is not None and _RNN_PACKET not in flop_registry:
    @register_flop_formula(_RNN_PACKET)
    def _rnn_forward_flops(input_shape, w0, w1, *args, **kwargs) -> int:  # noqa: ANN001, ANN002, ANN003
        return _rnn_layer_flops(input_shape, w0, w1)

if _RNN_BACKWARD_PACKET is not None and _RNN_BACKWARD_PACKET not in flop_registry:
    @register_flop_formula(_RNN_BACKWARD_PACKET)
    def _rnn_backward_flops(input_shape, w0, w1, *args, **kwargs) -> int:  # noqa: ANN001, ANN002, ANN003
        return 2 * _rnn_layer_flops(input_shape, w0, w1)
