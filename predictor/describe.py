"""Build the ``sparse.io/model`` annotation from a real PyTorch model (imports torch).

``describe(model, example_inputs, optimizer, loss_fn=None)`` runs two training steps (warm-up
and steady state) of the model under ``FakeTensorMode`` on the CPU: the same aten ops as a real
step, on shape-only tensors, so a model with 40 GiB of tables is described in seconds with no
real memory and no GPU. The op stream is traced by the generator's ``StepTracer`` (the same
code that labels the training set), and the result is the annotation a user puts on the pod:
MACs, parameters, activations, layers, inputs and tables counted from the model, plus the
measured phase sizes (``saved_bytes``, ``backward_bytes``, ``step_bytes``, ``state_bytes``).

The user's model and optimizers are not modified: parameters and buffers are swapped for fake
copies during the trace and put back afterwards, and the optimizers are rebuilt on the copies
with the same class and hyper-parameters (so foreach / single-tensor / fused is kept).
Sparse gradients make the optimizer step's sizes depend on the ids drawn (how many are
unique), and an op such as ``pack_padded_sequence`` shapes its output by the lengths' values,
which fake tensors cannot know: such models are traced on real copies instead, when the
memory that takes is available. A model too large to build can be built on the ``meta``
device (no memory) and is traced as on the CPU.

The ``describe`` CLI takes ``MODULE:FACTORY``; the factory is called without arguments and
returns ``(model, example_inputs, optimizer)`` or ``(model, example_inputs, optimizer,
loss_fn)`` (a dict with those keys is accepted too), see docs/predictor.md.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable
from typing import Any, get_args

import msgspec

from predictor import gpus, schema

OPTIMIZER_NAMES = {"SGD": "sgd", "Adagrad": "adagrad", "Adam": "adam", "AdamW": "adamw",
                   "SparseAdam": "sparse_adam", "RMSprop": "rmsprop"}
# A real trace holds a copy of the parameters, their gradients and up to two optimizer
# states, besides the activations.
REAL_TRACE_FACTOR = 4
AUTOCAST_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}
DTYPE_NAMES = {"torch.float32": "fp32", "torch.float16": "fp16", "torch.bfloat16": "bf16"}


class DescribeError(ValueError):
    """The model, inputs or optimizer cannot be described; the message says why."""


def _optimizer_name(opts: list[Any]) -> str:
    names = [type(o).__name__ for o in opts]
    if "SparseAdam" in names:
        return "sparse_adam"
    first = opts[0]
    name = OPTIMIZER_NAMES.get(type(first).__name__, "adam")  # state_bytes is measured anyway
    if name == "sgd" and any(g.get("momentum", 0) for g in first.param_groups):
        return "momentum"
    return name


def _optimizer_impl(opts: list[Any]) -> str:
    """How the (first) optimizer steps: ``fused=True``, ``foreach=False`` (single-tensor),
    else foreach (``foreach=None`` is foreach on CUDA)."""
    defaults = getattr(opts[0], "defaults", {})
    if defaults.get("fused"):
        return "fused"
    return "single" if defaults.get("foreach") is False else "foreach"


def _family(model: Any, tables: list[schema.Table]) -> str:
    from torch import nn

    mods = list(model.modules())
    if any(isinstance(m, nn.modules.conv._ConvNd) for m in mods):
        return "cnn"
    if any(isinstance(m, nn.MultiheadAttention) for m in mods) and not any(
            isinstance(m, nn.EmbeddingBag) for m in mods):
        outs = {m.out_features for m in mods if isinstance(m, nn.Linear)}
        if any(t.rows in outs for t in tables):  # a language-model head over the vocabulary
            return "transformer"
    return "recommendation" if tables else "other"


def _rebuild(opt: Any, mapping: dict[int, Any]) -> Any:
    """The same optimizer class on the copies, with the user's hyper-parameters. Only the
    defaults its constructor takes are passed: a subclass may fix one of its base's
    (``AdamW`` is ``Adam`` with ``decoupled_weight_decay=True``); the groups keep them all."""
    # ``capturable`` (CUDA graphs) keeps the step count as a one-element tensor on the GPU,
    # which the CPU trace cannot run; the memory is the same without it
    cpu_only = {"capturable": False} if opt.defaults.get("capturable") else {}
    groups = [{**{k: v for k, v in g.items() if k != "params"}, **cpu_only,
               "params": [mapping[id(p)] for p in g["params"]]} for g in opt.param_groups]
    defaults = {**opt.defaults, **cpu_only}
    cls = type(opt)
    taken = inspect.signature(cls.__init__).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in taken.values()):
        return cls(groups, **{k: v for k, v in defaults.items() if k in taken})
    return cls(groups, **defaults)


def _swap(model: Any, make: Callable[[Any], Any]) -> tuple[dict[int, Any], list]:
    """Replace every parameter and buffer of ``model`` by ``make(t)``; returns the mapping
    old id -> new parameter and what :func:`_restore` needs."""
    from torch import nn

    mapping: dict[int, Any] = {}
    saved = []
    for mod in model.modules():
        for name, p in list(mod._parameters.items()):
            if p is None:
                continue
            if id(p) not in mapping:
                mapping[id(p)] = nn.Parameter(make(p.detach()), requires_grad=p.requires_grad)
            saved.append((mod._parameters, name, p))
            mod._parameters[name] = mapping[id(p)]
        for name, b in list(mod._buffers.items()):
            if b is None:
                continue
            saved.append((mod._buffers, name, b))
            mod._buffers[name] = make(b)
    return mapping, saved


def _restore(saved: list) -> None:
    for store, name, t in reversed(saved):
        store[name] = t


def _trace_step(model: Any, inputs: tuple, opts: list[Any], loss_fn: Callable | None,
                sparse: bool, autocast: Any = None, kwargs: dict | None = None
                ) -> dict[str, Any]:
    """The step on fake tensors; on real copies where fake ones cannot tell what it does:
    sparse gradients (the optimizer's work depends on how many drawn ids are unique), an op
    whose output shape depends on tensor values (``pack_padded_sequence``: the lengths), or a
    forward that shape-only tensors cannot run at all (a custom or extension op without a fake
    kernel, a detour through NumPy). A forward that fails for its own reasons fails the same
    way on the real copies, with the user's own error."""
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
    )

    if sparse:
        why = "its tables take sparse gradients"
    else:
        try:
            return _trace(model, inputs, opts, loss_fn, fake=True, autocast=autocast,
                          kwargs=kwargs)
        except (DynamicOutputShapeException, DataDependentOutputException) as exc:
            why = f"{exc} has outputs shaped by tensor values"
        except (RuntimeError, NotImplementedError) as exc:  # UnsupportedOperator is one
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            why = f"shape-only tensors cannot run its forward: {first}"
    check_room_for_real_step(model, f"describing this model takes a real training step ({why})")
    return _trace(model, inputs, opts, loss_fn, fake=False, autocast=autocast, kwargs=kwargs)


def check_room_for_real_step(model: Any, what: str) -> None:
    """Raise :class:`DescribeError` (starting with ``what``) when a real step of ``model`` on
    the CPU cannot run here: parameters on the meta device, or too little memory free."""
    if any(t.device.type == "meta" for t in (*model.parameters(), *model.buffers())):
        raise DescribeError(f"{what}, and its parameters are on the meta device, which holds"
                            " no values: build it on the CPU")
    need = REAL_TRACE_FACTOR * sum(p.nbytes for p in model.parameters())
    free = _available_bytes()
    if free is not None and need > free:
        raise DescribeError(f"{what}, about {need / 2**30:.1f} GiB on the CPU, and"
                            f" {free / 2**30:.1f} GiB is available: run it where more memory"
                            " is free")


def _available_bytes() -> int | None:
    """Memory available for new allocations now (Linux ``MemAvailable``); None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _trace(model: Any, inputs: tuple, opts: list[Any], loss_fn: Callable | None,
           fake: bool, autocast: Any = None, allocator: bool = False,
           kwargs: dict | None = None) -> dict[str, Any]:
    import contextlib

    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._pytree import tree_flatten, tree_map

    from predictor.generate import measure

    # allow_non_fake_inputs: a loss closure may hold real targets; they are converted on use
    mode = FakeTensorMode(allow_non_fake_inputs=True) if fake else contextlib.nullcontext()

    def make(t: Any) -> Any:
        if not fake:
            return t.clone()
        if t.device.type == "meta":  # built without memory: traced as a CPU tensor
            return mode.fake_tensor_converter.from_meta_and_device(mode, t, torch.device("cpu"))
        return mode.from_tensor(t)

    mapping, saved = _swap(model, make)
    try:
        with mode:
            ins, kw = tree_map(lambda t: make(t) if isinstance(t, torch.Tensor) else t,
                               (inputs, kwargs or {}))
            opt = measure.Optimizers([_rebuild(o, mapping) for o in opts])
            flat = [t for t in tree_flatten((ins, kw))[0] if isinstance(t, torch.Tensor)]
            if not flat:
                raise DescribeError("example_inputs hold no tensor")
            batch = int(flat[0].shape[0]) if flat[0].dim() else 1

            def compute_loss() -> Any:
                # mixed precision as a training loop runs it: forward and loss under autocast
                # (its cast weights cached until it exits), backward after
                with (torch.autocast("cpu", dtype=autocast) if autocast is not None
                      else contextlib.nullcontext()):
                    out = model(*ins, **kw)
                    if loss_fn is not None:
                        return _scalar(loss_fn(out, *ins))
                    outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)
                            and t.is_floating_point()]
                    if not outs:
                        raise DescribeError("the model returns no floating tensor: pass loss_fn")
                    return sum(o.float().mean() for o in outs)

            m = measure.trace_training(model, opt, compute_loss, flat, batch,
                                       allocator=allocator)
    finally:
        _restore(saved)
    m["batch_size"] = batch
    m["flat_inputs"] = [(tuple(t.shape), t.dtype) for t in flat]
    return m


def describe(model: Any, example_inputs: Any, optimizer: Any,
             loss_fn: Callable | None = None, *, family: str | None = None,
             gpu_model: str | None = None, autocast: Any = None,
             example_kwargs: dict | None = None,
             data_parallel_workers: int | None = None,
             embedding_sharding: str | None = None) -> dict[str, Any]:
    """The ``sparse.io/model`` annotation (a JSON-able dict) of one training step of ``model``
    on the batch ``example_inputs`` (a tuple of positional arguments, a single object is
    wrapped) with ``optimizer`` (one ``torch.optim.Optimizer`` built on the model's
    parameters, or a list of them). ``loss_fn(output, *example_inputs)`` returns the scalar
    loss; default: the mean of the output. ``autocast``: the job trains with mixed precision
    (``torch.autocast`` to ``torch.bfloat16`` / ``torch.float16``, or ``"bf16"`` /
    ``"fp16"``): the forward and the loss are traced under it. ``example_kwargs``: keyword
    arguments of the forward besides the positional ones (``model(*example_inputs,
    **example_kwargs)``, as Hugging Face models take ``labels=``).
    ``data_parallel_workers``: the job's workers sync their gradients with
    ``DistributedDataParallel``, this many of them (0: they do not); default: the size of
    the process group of a model wrapped in DDP (the wrapped module is traced, one process's
    step; its ``gradient_as_bucket_view`` is kept), and unsaid for a model passed unwrapped
    (the prediction worker then reads the pod's ``WORLD_SIZE``). ``embedding_sharding``:
    the tables are sharded over those workers by TorchRec (``table-wise``, ``row-wise`` or
    ``column-wise``; the model is described unsharded, as it is built before
    ``DistributedModelParallel`` wraps it): each worker is booked its shards, not the tables
    (docs/predictor.md, "Sharded tables"); lookups of ``nn.Embedding`` tables (TorchRec's
    EmbeddingCollection) are exchanged one vector per id."""
    import torch

    model, wrapped, view = _unwrap_data_parallel(model)
    if data_parallel_workers is None:
        data_parallel_workers = wrapped
    elif data_parallel_workers < 0:
        raise DescribeError(f"data_parallel_workers must be >= 0, got {data_parallel_workers}")
    if embedding_sharding is not None:
        if embedding_sharding not in get_args(schema.EmbeddingSharding):
            raise DescribeError(f"embedding_sharding must be one of"
                                f" {', '.join(get_args(schema.EmbeddingSharding))},"
                                f" got {embedding_sharding!r}")
        if not data_parallel_workers:
            raise DescribeError("embedding_sharding needs data_parallel_workers: the workers"
                                " the tables are sharded over")
    inputs, opts, autocast = _arguments(model, example_inputs, optimizer, autocast)
    sparse = any(getattr(m, "sparse", False) for m in model.modules()
                 if isinstance(m, torch.nn.Embedding | torch.nn.EmbeddingBag))
    m = _trace_step(model, inputs, opts, loss_fn, sparse, autocast, _kwargs(example_kwargs))
    ann = _annotation(model, m, opts, sparse, family, gpu_model)
    for k in ("data_parallel_workers", "gradient_as_bucket_view"):
        ann.pop(k, None)
    if data_parallel_workers is not None:
        ann["data_parallel_workers"] = int(data_parallel_workers)
        if data_parallel_workers and view:
            ann["gradient_as_bucket_view"] = True
    if embedding_sharding is not None:
        if not ann.get("tables"):
            raise DescribeError("embedding_sharding: the model has no embedding tables")
        if ann.get("sparse_grad"):  # the fused kernels replace the tables' sparse gradients
            ann.pop("sparse_grad")
            if ann.get("optimizer") == "sparse_adam":
                ann["optimizer"] = "adam"
        ann["embedding_sharding"] = embedding_sharding
        # tables looked up one vector per id (nn.Embedding, TorchRec's EmbeddingCollection)
        # exchange every id's vector, not one per sample
        ann["unpooled_lookups"] = any(type(m) is torch.nn.Embedding for m in model.modules())
    return ann


def _unwrap_data_parallel(model: Any) -> tuple[Any, int | None, bool]:
    """The module a data-parallel wrapper trains, how many workers sync its gradients with
    ``DistributedDataParallel`` (its process group's size; 0 for one process over several
    GPUs, which keeps no buckets) and whether they are bucket views; None workers for a
    model passed unwrapped, which does not say."""
    import torch

    if type(model).__name__ == "DistributedModelParallel":  # TorchRec's, not imported here
        raise DescribeError(
            "describe the model as it is built before DistributedModelParallel wraps it (its"
            " tables unsharded, on the meta device if they are large), with"
            " embedding_sharding= the plan's sharding (table-wise, row-wise or column-wise)"
            " and data_parallel_workers= the world size (CLI: --embedding-sharding,"
            " --data-parallel-workers)")
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return (model.module, max(1, model.process_group.size()),
                bool(model.gradient_as_bucket_view))
    if isinstance(model, torch.nn.DataParallel):
        return model.module, 0, False
    return model, None, False


def real_step(model: Any, example_inputs: Any, optimizer: Any,
              loss_fn: Callable | None = None, *, autocast: Any = None,
              example_kwargs: dict | None = None) -> dict[str, Any]:
    """The step ``describe`` traces, run for real on the CPU on copies of the model (the
    model and optimizers are left as they are), under the tracer and the CPU allocator's
    memory events: the measured columns, ``peak_bytes`` and ``alloc_peak_bytes`` among them
    (:func:`predictor.generate.measure.trace_training`). A data-parallel wrapper's module is
    stepped alone: one process's step, without the gradients' sync and its buckets."""
    model, _, _ = _unwrap_data_parallel(model)
    inputs, opts, autocast = _arguments(model, example_inputs, optimizer, autocast)
    check_room_for_real_step(model, "a real step of this model")
    return _trace(model, inputs, opts, loss_fn, fake=False, autocast=autocast, allocator=True,
                  kwargs=_kwargs(example_kwargs))


def _kwargs(example_kwargs: Any) -> dict:
    if example_kwargs is None:
        return {}
    if not isinstance(example_kwargs, dict) or not all(isinstance(k, str)
                                                       for k in example_kwargs):
        raise DescribeError("example_kwargs must be a dict of keyword arguments")
    return example_kwargs


def _scalar(loss: Any) -> Any:
    """The loss ``loss_fn`` returned, checked: backward needs one scalar tensor."""
    import torch

    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        what = (f"a tensor of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor)
                else type(loss).__name__)
        raise DescribeError(f"loss_fn must return the scalar loss, got {what}")
    return loss


def _arguments(model: Any, example_inputs: Any, optimizer: Any, autocast: Any
               ) -> tuple[tuple, list[Any], Any]:
    """``describe``'s arguments checked: the inputs as a tuple, the optimizers as a list, the
    autocast dtype (or None)."""
    import torch

    if isinstance(autocast, str):
        if autocast not in AUTOCAST_DTYPES:
            raise DescribeError(f"autocast must be one of {sorted(AUTOCAST_DTYPES)}, got"
                                f" {autocast!r}")
        autocast = getattr(torch, AUTOCAST_DTYPES[autocast])
    elif autocast is not None and autocast not in (torch.bfloat16, torch.float16):
        raise DescribeError(f"autocast must be torch.bfloat16 or torch.float16, got {autocast}")

    if not isinstance(model, torch.nn.Module):
        raise DescribeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    opts = list(optimizer) if isinstance(optimizer, list | tuple) else [optimizer]
    if not opts or not all(isinstance(o, torch.optim.Optimizer) for o in opts):
        raise DescribeError("optimizer must be a torch.optim.Optimizer or a list of them")
    for o in opts:
        closure = inspect.signature(o.step).parameters.get("closure")
        if closure is not None and closure.default is inspect.Parameter.empty:
            raise DescribeError(f"{type(o).__name__} steps by calling a closure that"
                                " re-evaluates the model, as many times as it needs: its"
                                " memory is not one training step's; describe takes"
                                " optimizers that step once per batch")
    owned = {id(p) for p in model.parameters()}
    if any(id(p) not in owned for o in opts for g in o.param_groups for p in g["params"]):
        raise DescribeError("the optimizer holds parameters that are not the model's")
    return inputs, opts, autocast


def _annotation(model: Any, m: dict[str, Any], opts: list[Any], sparse: bool,
                family: str | None, gpu_model: str | None) -> dict[str, Any]:
    """The annotation of the traced step ``m``."""
    b = m["batch_size"]
    tables = schema.group_tables([(int(r), int(d), float(p)) for r, d, p in m["tables"]])
    floats = [(shape, dt) for shape, dt in m["flat_inputs"] if dt.is_floating_point]
    image_like = sum(_per_sample(shape) for shape, _ in floats if len(shape) >= 3)
    dense = sum(shape[-1] for shape, _ in floats if len(shape) == 2 and shape[-1] > 1)
    param_dtypes = [p.dtype for p in model.parameters() if p.is_floating_point()]
    dtype = DTYPE_NAMES.get(str(param_dtypes[0]) if param_dtypes else "", "fp32")
    opt_name = _optimizer_name(opts)
    spec = schema.ModelSpec(
        family=family or _family(model, tables), batch_size=b, optimizer=opt_name,
        dtype=dtype, gpu_model=gpu_model or gpus.DEFAULT_GPU,
        macs=round(float(m["macs_per_sample"]), 3), params=float(m["n_params"]),
        activations=round(float(m["activations_per_sample"]), 3),
        inputs=float(image_like), layers=int(m["n_layers"]), tables=tables,
        dense_features=int(dense), sparse_grad=sparse and opt_name in (
            "sgd", "momentum", "adagrad", "sparse_adam"), optimizer_impl=_optimizer_impl(opts),
        **_measured(m, b),
    )
    return {k: v for k, v in msgspec.to_builtins(spec).items()
            if v is not None and v != [] and k not in ("schema_version", "unpooled_lookups")}


def _per_sample(shape: tuple) -> int:
    n = 1
    for s in shape[1:]:
        n *= int(s)
    return n


def _measured(m: dict[str, Any], batch: int) -> dict[str, float]:
    from predictor import dataset

    return dataset.measured_fields(m, batch)


def load_factory(target: str) -> Callable[[], Any]:
    """``MODULE:FACTORY`` (``pkg.mod:make`` or ``path/to/file.py:make``) to the callable."""
    if ":" not in target:
        raise DescribeError(f"{target!r}: expected MODULE:FACTORY, e.g. mymodels.dlrm:make")
    mod_name, _, attr = target.rpartition(":")
    try:
        if mod_name.endswith(".py"):
            spec = importlib.util.spec_from_file_location("_described_model", mod_name)
            if spec is None or spec.loader is None:
                raise DescribeError(f"cannot load {mod_name}")
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        else:
            mod = importlib.import_module(mod_name)
    except (ImportError, FileNotFoundError) as exc:
        raise DescribeError(f"cannot import {mod_name}: {exc}") from None
    fn = getattr(mod, attr, None)
    if not callable(fn):
        raise DescribeError(f"{mod_name} has no callable {attr!r}")
    return fn


def factory_parts(made: Any, target: str) -> tuple:
    """``(model, example_inputs, optimizer, loss_fn, example_kwargs)`` from what a factory
    returned."""
    if isinstance(made, dict):
        return (made.get("model"), made.get("example_inputs", ()), made.get("optimizer"),
                made.get("loss_fn"), made.get("example_kwargs"))
    if isinstance(made, tuple) and len(made) in (3, 4):
        return (*made, None, None) if len(made) == 3 else (*made, None)
    raise DescribeError(f"{target} must return (model, example_inputs, optimizer"
                        "[, loss_fn]) or a dict with those keys")


def describe_factory(target: str, **kw: Any) -> dict[str, Any]:
    """Call the factory ``MODULE:FACTORY`` and describe what it returns."""
    model, inputs, optimizer, loss_fn, kwargs = factory_parts(load_factory(target)(), target)
    return describe(model, inputs, optimizer, loss_fn, example_kwargs=kwargs, **kw)


__all__ = ["DescribeError", "describe", "describe_factory", "factory_parts", "load_factory",
           "real_step"]
