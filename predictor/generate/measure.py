"""Measure one training step of a real PyTorch model on the CPU (real tensors or FakeTensorMode).

What is measured (all from the actual PyTorch op stream of two training steps, warm-up + steady):

* ``param_bytes``, ``grad_bytes``, ``opt_state_bytes``: ``nbytes`` of ``model.parameters()``,
  of every ``.grad`` after backward (sparse gradients: indices + values) and of every tensor
  in ``optimizer.state`` after a real ``optimizer.step()``;
* ``peak_bytes``: params + batch inputs + the peak of live bytes of every storage created by an
  aten op during both steps. Storages are tracked by a ``TorchDispatchMode`` with a weakref
  finalizer per storage, so a tensor counts from the op that creates it until PyTorch frees it
  (activations saved for backward, gradients, optimizer state and temporaries alike).
  Allocations *inside* one aten kernel (workspaces) are not visible; the GPU caching allocator's
  rounding/fragmentation and the CUDA context are not included (see docs/predictor.md);
* ``act_fwd_bytes``: live new bytes at the end of the steady-state forward (saved activations);
* ``cuda_reserved_bytes`` / ``cuda_allocated_bytes``: the ordered allocations and frees (the
  resident tensors first, then every traced storage) replayed through the model of PyTorch's
  CUDA caching allocator (:mod:`predictor.caching_allocator`), the steady-state step repeated
  until the cache is stable: what ``max_memory_reserved`` / ``max_memory_allocated`` would
  report for this step, workspaces allocated inside GPU kernels aside;
* ``flops_step`` / ``flops_fwd``: ``torch.utils.flop_counter.FlopCounterMode`` (matmul/conv/
  attention FLOPs; element-wise ops are not counted by PyTorch's counter), on a forward and
  backward of their own after the traced steps (the counter's module tracking keeps tensors
  alive under activation checkpointing);
* ``bytes_moved_step``: sum over non-view aten ops of input + output bytes; embedding lookups
  count only the gathered rows, not the whole table;
* ``n_ops_step``: non-view aten ops per steady-state step (~ kernel launches on a GPU);
* ``activations_per_sample``: elements of all non-view op outputs of one forward pass
  (incl. the loss) divided by the batch size — the ``activations`` feature of the schema;
  ``leaf_activations_per_sample`` is the narrower torchinfo-style sum over leaf modules.

Under ``FakeTensorMode`` the same ops run with shape-only tensors: allocation sizes are those
PyTorch would allocate, without the RAM. ``dataset.py`` re-runs cheap configs for real and
checks that both modes give the same bytes.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from predictor import caching_allocator
from predictor.generate import kernel_gaps, models

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _storages(t: torch.Tensor) -> list[torch.UntypedStorage]:
    if t.layout == torch.strided:
        return [t.untyped_storage()]
    if t.is_sparse:
        return [t._indices().untyped_storage(), t._values().untyped_storage()]
    return []


def tensor_bytes(t: torch.Tensor) -> int:
    return sum(s.nbytes() for s in _storages(t))


class StepTracer(TorchDispatchMode):
    """Live-storage accounting, bytes moved and op count for everything dispatched inside."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}
        self.cur = 0
        self.peak = 0
        self.bytes_moved = 0
        self.n_ops = 0
        self.count_fwd = False
        self.fwd_elems = 0
        # the ordered allocations and frees, (serial, bytes) / (serial, -1), for the caching
        # allocator replay (predictor.caching_allocator); serials never repeat, ids may
        self.events: list[tuple[int, int]] = []
        self._serial: dict[int, int] = {}
        # serial -> bytes the CUDA program allocates instead (see :func:`cuda_dropout`)
        self.cuda_bytes: dict[int, int] = {}

    def book(self, nbytes: int) -> None:
        """An allocation made outside the dispatch (a parameter, the batch) that lives on."""
        self.events.append((len(self.events), nbytes))

    def _free(self, key: int) -> None:
        nb = self.live.pop(key, None)
        serial = self._serial.pop(key, None)
        if serial is not None:
            self.events.append((serial, -1))
        if nb:
            self.cur -= nb

    def cuda_events(self) -> list[tuple[int, int]]:
        """:attr:`events` with the sizes the CUDA program allocates where they differ."""
        return [(k, self.cuda_bytes.get(k, nb) if nb >= 0 else nb) for k, nb in self.events]

    def reset_counters(self) -> None:
        self.bytes_moved = 0
        self.n_ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        out = kernel_gaps.complete(func, args, func(*args, **(kwargs or {})))
        if func.namespace == "prim":
            return out
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        ins = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        # An output on an input's storage (a view, an in-place update such as the sparse
        # optimizers' ``param.add_(grad)``, an ``out=`` argument) allocates nothing; counting
        # it would book a parameter or an optimizer state a second time.
        aliased = {id(st) for t in ins for st in _storages(t)}
        for t in outs:
            for st in _storages(t):
                key = id(st)
                if key in self.live or key in aliased:
                    continue
                nb = st.nbytes()
                self.live[key] = nb
                self._serial[key] = len(self.events)
                self.events.append((len(self.events), nb))
                weakref.finalize(st, self._free, key)
                self.cur += nb
        self.peak = max(self.peak, self.cur)
        if not func.is_view:
            self.n_ops += 1
            if self.count_fwd:
                self.fwd_elems += sum(t.numel() for t in outs)
            out_b = sum(t.numel() * t.element_size() for t in outs)
            if "embedding" in func.name():
                # a lookup reads the gathered rows (= output size) and the ids, not the table
                in_b = out_b + sum(t.numel() * t.element_size() for t in ins
                                   if not t.is_floating_point())
            else:
                in_b = sum(t.numel() * t.element_size() for t in ins if t.layout == torch.strided)
            self.bytes_moved += in_b + out_b
        return out


@contextlib.contextmanager
def cuda_dropout(tracer: StepTracer):  # noqa: ANN201
    """Record dropout as the CUDA dispatcher runs it. On CUDA ``at::dropout`` calls the fused
    ``native_dropout``, which keeps a **bool** mask for backward; on the CPU it is unfused
    (``noise = empty_like(x).bernoulli_(1 - p).div_(1 - p); x * noise``) and keeps a noise
    tensor of ``x``'s dtype, 2-4x the bytes. Both allocate the mask first, then the output,
    so the replay only needs the mask's CUDA size (:meth:`StepTracer.cuda_events`); the
    CPU label is left as the CPU allocator sees it. A BERT with attention dropout keeps
    ``layers x (B h s^2 + 2 B s d)`` such elements: up to 860 MiB less on a GPU."""
    import torch.nn.functional as F

    orig = F.dropout

    def dropout(input, p=0.5, training=True, inplace=False):  # noqa: A002, ANN001, ANN202
        start = len(tracer.events)
        out = orig(input, p, training, inplace)
        if training and not inplace and 0.0 < p < 1.0 and input.numel() > 0:
            mine = {id(st) for st in _storages(out)}
            noise = input.numel() * input.element_size()
            for st_id, serial in tracer._serial.items():
                if (serial >= start and st_id not in mine
                        and tracer.live.get(st_id) == noise):
                    tracer.cuda_bytes[serial] = input.numel()  # torch.bool
        return out

    F.dropout = dropout
    try:
        yield
    finally:
        F.dropout = orig


class _LeafActivations:
    """Forward output elements of leaf modules (what torchinfo calls forward pass size)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.elems = 0
        self.handles = [
            m.register_forward_hook(self._hook)
            for m in model.modules() if not list(m.children())
        ]

    def _hook(self, _m, _inp, out) -> None:  # noqa: ANN001
        self.elems += sum(t.numel() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


class _Lookups:
    """Embedding tables and the ids each one looks up per sample (shared tables add up). A
    table is its weight: modules that share one (an encoder's and a decoder's token
    embeddings tied to one matrix) are one table, looked up by both."""

    def __init__(self, model: torch.nn.Module, batch_size: int) -> None:
        self.batch = batch_size
        self.ids: dict[int, list] = {}
        self.handles = [
            m.register_forward_hook(self._hook, with_kwargs=True) for m in model.modules()
            if isinstance(m, torch.nn.Embedding | torch.nn.EmbeddingBag)
        ]

    def _hook(self, m, args, kwargs, _out) -> None:  # noqa: ANN001
        # the ids: positional, or ``input=`` (TorchRec calls its bags with keywords)
        ids = args[0] if args else kwargs.get("input")
        if not isinstance(ids, torch.Tensor):
            return
        entry = self.ids.setdefault(id(m.weight), [m.num_embeddings, m.embedding_dim, 0.0])
        entry[2] += ids.numel() / self.batch

    def tables(self) -> list[list]:
        return list(self.ids.values())

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def _state_bytes(opt: torch.optim.Optimizer) -> int:
    return sum(tensor_bytes(v) for st in opt.state.values() for v in st.values()
               if isinstance(v, torch.Tensor))


class Optimizers:
    """Several optimizers stepped as one (e.g. SparseAdam for the tables, Adam for the rest)."""

    def __init__(self, opts: list[Any]):
        self.opts = opts

    def step(self) -> None:
        for o in self.opts:
            o.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.opts:
            o.zero_grad(set_to_none=set_to_none)

    @property
    def state(self) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for o in self.opts:
            out.update(o.state)
        return out


def _resident(model: torch.nn.Module, opt: Any, inputs: list[torch.Tensor]) -> list:
    seen: set[int] = set()
    out = []

    def add(t: Any) -> None:
        if isinstance(t, torch.Tensor):
            for st in _storages(t):
                if id(st) not in seen:
                    seen.add(id(st))
                    out.append(t)
                    break

    for mod in model.modules():
        for t in (*mod._parameters.values(), *mod._buffers.values()):
            add(t)
    for st in opt.state.values():
        for v in st.values():
            add(v)
    for t in inputs:
        add(t)
    return out


def _count_flops(opt: Any, compute_loss: Any) -> tuple[int, int]:
    """FLOPs of one forward and of a whole step (forward and backward; the counter prices no
    optimizer op), counted on a pass of their own after the traced steps: the counter's
    module tracking keeps tensors alive that a step would have freed (with activation
    checkpointing it more than doubled a BERT's peak), so it never runs while memory is
    measured."""
    with FlopCounterMode(display=False) as flops:
        loss = compute_loss()
        forward = flops.get_total_flops()
        loss.backward()
        del loss
    opt.zero_grad(set_to_none=True)
    return forward, flops.get_total_flops()


def trace_training(model: torch.nn.Module, opt: Any, compute_loss: Any,
                   inputs: list[torch.Tensor], batch_size: int,
                   allocator: bool = False) -> dict[str, Any]:
    """Two training steps (warm-up + steady state) of ``model``: ``compute_loss()`` runs the
    forward pass and returns the scalar loss, ``opt`` has ``step``/``zero_grad``/``state``.
    Works on real and on fake tensors. Returns the measured columns (see the module doc):
    besides the whole peak, the steady-state step's phases: ``act_fwd_bytes`` (live at the
    end of the forward: what is kept for backward), ``fwd_peak_bytes`` (the forward's peak
    above the step's start, transients included), ``bwd_peak_bytes`` (peak live above the
    step's start during backward: saved activations, gradients being produced and the
    backward's transients) and ``step_peak_bytes`` (the optimizer step's transient peak
    above what was live when it started)."""
    from predictor.generate.allocator import AllocatorTrace

    param_bytes = sum(tensor_bytes(p) for p in model.parameters())
    # state an optimizer creates up front (Adagrad's sums) exists before the tracer starts
    init_state_bytes = _state_bytes(opt)
    input_bytes = sum(tensor_bytes(t) for t in inputs)
    tracer = StepTracer()
    # what exists before the step, in the order a GPU job allocates it: the model's
    # parameters and buffers as it is built, the optimizer's up-front state, the batch
    for t in _resident(model, opt, inputs):
        tracer.book(tensor_bytes(t))
    acts = None
    alloc = AllocatorTrace() if allocator else contextlib.nullcontext()
    with alloc, tracer, cuda_dropout(tracer):
        for step in range(2):
            if step == 1:
                steady_from = len(tracer.events)
                tracer.reset_counters()
                acts = _LeafActivations(model)
                lookups = _Lookups(model, batch_size)
                base = tracer.cur
                tracer.count_fwd = True
                tracer.peak, peak_before = tracer.cur, tracer.peak
            loss = compute_loss()
            if step == 1:
                tracer.count_fwd = False
                act_fwd = tracer.cur - base
                acts.remove()
                lookups.remove()
                # the forward's transients (an addmm output before its activation) can top
                # everything the backward holds at once
                fwd_peak = tracer.peak - base
                tracer.peak, peak_before = tracer.cur, max(peak_before, tracer.peak)
            loss.backward()
            del loss
            if step == 1:
                bwd_peak = tracer.peak - base
                grad_bytes = sum(
                    tensor_bytes(p.grad) for p in model.parameters() if p.grad is not None
                )
                before_step = tracer.cur
                tracer.peak, peak_before = tracer.cur, max(peak_before, tracer.peak)
            opt.step()
            if step == 1:
                step_peak = tracer.peak - before_step
                tracer.peak = max(peak_before, tracer.peak)
            opt.zero_grad(set_to_none=True)
        events = tracer.cuda_events()
    flops_fwd, flops_step = _count_flops(opt, compute_loss)
    cached = caching_allocator.replay(events, events[steady_from:])
    opt_state_bytes = _state_bytes(opt)
    base_bytes = param_bytes + input_bytes + init_state_bytes
    b = batch_size
    out = {
        "n_params": sum(p.numel() for p in model.parameters()),
        "n_layers": models.count_layers(model),
        "n_emb_params": sum({  # a weight shared by several tables counts once
            id(p): p.numel() for m in model.modules()
            if isinstance(m, torch.nn.Embedding | torch.nn.EmbeddingBag) for p in m.parameters()
        }.values()),
        "macs_per_sample": flops_fwd / 2 / b,
        "activations_per_sample": tracer.fwd_elems / b,
        "leaf_activations_per_sample": acts.elems / b if acts else 0,
        "param_bytes": param_bytes,
        "grad_bytes": grad_bytes,
        "opt_state_bytes": opt_state_bytes,
        "input_bytes": input_bytes,
        "act_fwd_bytes": act_fwd,
        "fwd_peak_bytes": fwd_peak,
        "bwd_peak_bytes": bwd_peak,
        "step_peak_bytes": step_peak,
        "peak_bytes": base_bytes + tracer.peak,
        "flops_fwd": flops_fwd,
        "flops_step": flops_step,
        "bytes_moved_step": tracer.bytes_moved,
        "n_ops_step": tracer.n_ops,
        "tables": lookups.tables(),
        "cuda_reserved_bytes": cached.peak_reserved,
        "cuda_allocated_bytes": cached.peak_allocated,
    }
    if allocator:
        out["alloc_peak_bytes"] = base_bytes + alloc.peak
    return out


def measure(cfg: dict[str, Any], fake: bool, allocator: bool = False) -> dict[str, Any]:
    """Two training steps of ``cfg`` on the CPU; returns the measured columns. With
    ``allocator`` (real tensors only) the steps also run under the profiler's memory events
    and ``alloc_peak_bytes`` is the same peak as the CPU allocator saw it."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    if allocator and fake:
        raise ValueError("allocator truth needs real tensors (fake=False)")
    t0 = time.perf_counter()
    dtype = DTYPES[cfg["dtype"]]
    mode = FakeTensorMode(allow_non_fake_inputs=False) if fake else contextlib.nullcontext()
    with mode:
        torch.manual_seed(0)
        model, make_batch, loss_fn = models.build(cfg, dtype)
        opt = models.make_optimizer(cfg["optimizer"], model, cfg.get("optimizer_impl"))
        batch = make_batch()
        m = trace_training(model, opt, lambda: loss_fn(model, batch), list(batch),
                           cfg["batch_size"], allocator=allocator)
    return {
        "exec_mode": "cpu-fake" if fake else "cpu-real",
        "label_source": "cpu",
        **m,
        "wall_s": round(time.perf_counter() - t0, 3),
    }
