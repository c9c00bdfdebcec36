"""The numeric features the memory and compute models use, derived from a :class:`ModelSpec`:
the optimizer's state and step temporaries, the memory phases (backward vs optimizer step),
the job class, and the predicted step time. Pure: no I/O, no torch.

The terms live in ``predictor.activations`` (what backward keeps) and ``predictor.step_time``
(roofline times, kernel launches); the annotation schema in ``predictor.schema``. This module
re-exports the schema's parsers, so ``predictor.features`` stays the one entry point callers
read a pod's model from.
"""

from __future__ import annotations

import math

# ``name as name``: re-exported; the controller, the simulator, the tests and
# docs/predictor.md read a pod's model through this module (the controller's tests take
# JobFields away to test its fallback)
from predictor import gpus, sharding
from predictor.activations import CNN_FAMILIES, job_activation_terms, main_dim
from predictor.activations import saved_activation_bytes as saved_activation_bytes
from predictor.activations import transformer_shape as transformer_shape
from predictor.schema import ANN_MODEL as ANN_MODEL
from predictor.schema import ANN_TASK_INFO as ANN_TASK_INFO
from predictor.schema import DTYPE_BYTES, ModelSpec
from predictor.schema import MAX_ANNOTATION_BYTES as MAX_ANNOTATION_BYTES
from predictor.schema import OPTIONAL_LAYOUT as OPTIONAL_LAYOUT
from predictor.schema import JobFields as JobFields
from predictor.schema import SchemaError as SchemaError
from predictor.schema import Table as Table
from predictor.schema import from_annotations as from_annotations
from predictor.schema import from_task_info as from_task_info
from predictor.schema import input_level as input_level
from predictor.schema import parse_model as parse_model
from predictor.schema import to_dict as to_dict
from predictor.schema import to_job_fields as to_job_fields
from predictor.step_time import DISPATCH_S, KERNEL_MIN_S, dispatch_features, roofline_times
from predictor.step_time import kernels_per_step as kernels_per_step

JOB_CLASSES = ("recommendation", "cnn", "cnn-small", "transformer", "rnn", "rl", "gan")
RECOMMENDATION_FAMILIES = frozenset({"wide_deep", "deepfm", "dlrm", "recommendation"})

# Optimizer-state elements per parameter element (TorchRec planner's multipliers; row-wise
# Adagrad keeps one value per row, i.e. 1/dim per element, applied per table).
OPT_STATE_MULT: dict[str, float] = {
    "sgd": 0.0, "momentum": 1.0, "adagrad": 1.0, "rowwise_adagrad": 1.0, "adam": 2.0,
    "adamw": 2.0, "sparse_adam": 2.0, "rmsprop": 1.0,
}
# Optimizer implementations with the same state/temporary pattern share one indicator.
# rowwise_adagrad (FBGEMM, not in the CPU dataset) is priced as full Adagrad: conservative.
OPT_GROUP = {
    "sgd": "sgd", "momentum": "momentum", "adagrad": "adagrad", "rowwise_adagrad": "adagrad",
    "adam": "adam", "adamw": "adam", "sparse_adam": "sparse_adam", "rmsprop": "rmsprop",
}
OPT_GROUPS = ("sgd", "momentum", "adagrad", "adam", "sparse_adam", "rmsprop")
# Parameter-sized temporaries of the foreach optimizer step (PyTorch implementation: Adam/AdamW,
# RMSprop and SparseAdam take a sqrt of their second-moment state into a new buffer; Adagrad
# adds eps out of place to that sqrt, so two such buffers are alive at once; SGD and momentum
# update in place).
OPT_STEP_TEMP: dict[str, float] = {
    "sgd": 0.0, "momentum": 0.0, "adagrad": 2.0, "rowwise_adagrad": 2.0, "adam": 1.0,
    "adamw": 1.0, "sparse_adam": 1.0, "rmsprop": 1.0,
}
# The single-tensor step (``foreach=False``) runs parameter by parameter and frees each one's
# temporaries before the next: its peak is the largest parameter's temporaries (Adam/AdamW:
# the sqrt of the second moment and its eps-shifted quotient, two buffers; Adagrad and
# RMSprop one; the traced rows show 2.0-2.6 / 1.0-1.5 / 1.0-1.6 x the largest table). The
# fused step (``fused=True``) runs in one kernel without parameter-sized temporaries.
OPT_STEP_TEMP_SINGLE: dict[str, float] = {
    "sgd": 0.0, "momentum": 0.0, "adagrad": 1.0, "rowwise_adagrad": 1.0, "adam": 2.0,
    "adamw": 2.0, "sparse_adam": 1.0, "rmsprop": 1.0,
}
# With sparse gradients the optimizers update the parameter and its state in place
# (``index_add_``-style ``add_``/``addcmul_`` of a sparse tensor into dense storage): the
# allocator sees no parameter-sized buffer (0.00 / 0.20 / 0.38 MiB for SGD / Adagrad /
# SparseAdam on a 61 MiB table). What the step allocates is sized by the sparse gradient:
# its coalesced copy (values + indices) and, for Adagrad / SparseAdam, the squared values and
# the update of the touched rows, about 3 (Adagrad) and 5 (SparseAdam) row-sized tensors over the
# unique ids, which are typically 10-30 % of the ids a batch looks up (data-dependent; the
# traced rows show 0.1-0.9x). SGD adds the gradient into the weight in place. Per byte of the
# (uncoalesced) sparse gradient of the tables:
OPT_STEP_TEMP_SPARSE: dict[str, float] = {"sgd": 0.0, "momentum": 1.0, "adagrad": 0.5,
                                          "sparse_adam": 1.0}


def job_class(spec: ModelSpec) -> str:
    """Coarse class used by the interference model (see extender ``sparse.io/job-class``)."""
    f = spec.family
    if f in RECOMMENDATION_FAMILIES:
        return "recommendation"
    if f in ("resnet", "cnn", "yolo"):
        # small CNNs (CIFAR-sized ResNet-18 and below): < 1 GMAC per sample and < 15 M params
        return "cnn-small" if (spec.macs < 1e9 and spec.params < 15e6) else "cnn"
    if f in ("bert", "transformer"):
        return "transformer"
    if f in ("rnn", "rl", "gan"):
        return f
    return "cnn" if spec.macs > 0 and not spec.tables else "recommendation"


def mlp_params(spec: ModelSpec) -> float:
    """Parameters of the bottom/top MLPs (weights + biases), from the declared widths."""
    total = 0.0
    prev = spec.dense_features
    for w in spec.bottom_mlp:
        total += prev * w + w
        prev = w
    emb_out = sum(t.dim * t.count for t in spec.tables)
    prev = (prev if spec.bottom_mlp else spec.dense_features) + emb_out
    for w in spec.top_mlp:
        total += prev * w + w
        prev = w
    return total



def derive(spec: ModelSpec) -> dict[str, float]:
    """Numeric features (bytes as MiB) shared by the memory and the compute model."""
    b = DTYPE_BYTES[spec.dtype]
    mib = 1.0 / 2**20
    emb_params = float(sum(t.rows * t.dim * t.count for t in spec.tables))
    # ``params`` counts every parameter; one smaller than the tables alone can only be the
    # dense part (how many teams quote a recommendation model's size), so it is taken as that.
    if not spec.params:
        dense_params = mlp_params(spec)
    elif spec.params > emb_params:
        dense_params = spec.params - emb_params
    else:
        dense_params = spec.params
    m = OPT_STATE_MULT[spec.optimizer]
    n_tables = sum(t.count for t in spec.tables)
    # tables sharded over the workers: this worker holds its shards only (the compute terms
    # keep the whole tables: a worker looks its shards up for every worker's samples)
    shard = (sharding.worker_shard(spec.tables, spec.embedding_sharding,
                                   spec.data_parallel_workers, spec.unpooled_lookups)
             if spec.embedding_sharding is not None else None)
    held_emb = shard.params if shard is not None else emb_params
    if spec.optimizer == "rowwise_adagrad" and held_emb:  # one state per row
        rows_held = (shard.rows if shard is not None
                     else sum(t.rows * t.count for t in spec.tables))
        m_emb = rows_held / held_emb
    else:
        m_emb = m
    lookups = sum(t.pooling * t.count for t in spec.tables)  # ids per sample
    pooled = sum(t.dim * t.count for t in spec.tables)  # pooled embedding width per sample
    gathered = sum(t.pooling * t.dim * t.count for t in spec.tables)
    gpu = gpus.get(spec.gpu_model)
    # analytic memory phases (MiB): optimizer step vs backward
    p_mib = (held_emb + dense_params) * b * mib
    dense_p_mib = dense_params * b * mib
    if shard is not None:  # the fused kernels update the shards inside the backward
        grad_mib = dense_p_mib
    elif spec.sparse_grad:  # sized by the ids a batch draws: priced from the lookups
        grad_mib = (dense_params * b + spec.batch_size * (gathered * b + lookups * 8)) * mib
    elif spec.grad_bytes is not None:  # measured: frozen parameters have no gradient
        grad_mib = spec.grad_bytes * mib
    else:
        grad_mib = p_mib
    hold_mib = held_emb * b * mib * (1 + m_emb) + dense_p_mib * (1 + m)
    # measured phase sizes are those of the unsharded model: a sharded one's state and step
    # are priced from the shards
    if spec.state_bytes is not None and shard is None:
        hold_mib = p_mib + spec.state_bytes * mib
    if spec.step_bytes is not None and shard is None:
        step_temp_mib = spec.step_bytes * mib
    elif spec.sparse_grad:
        # the dense part is stepped as usual, the tables in place (see OPT_STEP_TEMP_SPARSE)
        step_temp_mib = (dense_params * b * mib * OPT_STEP_TEMP[spec.optimizer]
                         + (grad_mib - dense_params * b * mib)
                         * OPT_STEP_TEMP_SPARSE.get(spec.optimizer, 1.0))
    elif spec.optimizer_impl == "fused":
        step_temp_mib = 0.0
    elif spec.optimizer_impl == "single":
        # the largest parameter: the largest table (sharded tables are not the optimizer's),
        # or at most the dense part
        tables = spec.tables if shard is None else []
        largest = max((t.rows * t.dim for t in tables), default=0) or dense_params
        step_temp_mib = largest * b * mib * OPT_STEP_TEMP_SINGLE[spec.optimizer]
    else:  # foreach: what the optimizer steps (the dense part only, when sharded)
        step_temp_mib = (p_mib if shard is None else dense_p_mib) * OPT_STEP_TEMP[spec.optimizer]
    # DistributedDataParallel: buckets as large as the dense gradients, allocated with the
    # first backward and kept; the gradients are copied into them (or, as bucket views, are
    # them: no second copy while the optimizer steps). Sparse gradients are not bucketed: the
    # sparse allreduce gathers every worker's and sums them, transients of the backward.
    buckets_mib = gathered_sync_mib = 0.0
    if spec.data_parallel_workers:
        dense_grad_mib = dense_p_mib if spec.sparse_grad else grad_mib
        buckets_mib = dense_grad_mib
        gathered_sync_mib = (spec.data_parallel_workers + 1) * (grad_mib - dense_grad_mib)
    if shard is not None:
        # the lookups this worker received, or their gradient, which the collectives that
        # exchanged them may still hold when the next step starts (sharding.RETAINED_EXCHANGES)
        hold_mib += (sharding.RETAINED_EXCHANGES * spec.batch_size
                     * (gathered if spec.unpooled_lookups else pooled) * b * mib)
    step_mib = (hold_mib + grad_mib + step_temp_mib
                + (0.0 if spec.gradient_as_bucket_view else buckets_mib))
    hold_mib += buckets_mib
    grad_mib += gathered_sync_mib  # the backward's: the step phase is summed above
    if shard is not None:
        # the exchange of lookups, measured on the CPU (hack/torchrec-shards.py): the
        # shards' pooled outputs for the job's whole batch twice (the collective's buffer
        # and its input; row-wise, in the forward, the partial sums and the reduce-scatter's
        # copy; table-wise, in the backward, the outputs' gradients and their exchange) and
        # the ids they were looked up with, while the activations are kept
        grad_mib += (spec.data_parallel_workers * spec.batch_size
                     * (2 * shard.outputs * b + shard.ids * 8) * mib)
    saved_mib = saved_activation_bytes(spec) * mib
    # the batch (ids, input tensors) and the pooled lookups live through the whole step
    looked_up = gathered if spec.unpooled_lookups and shard is not None else pooled
    io_mib = spec.batch_size * (lookups * 8 + looked_up * b + spec.inputs * b) * mib
    if spec.batch_bytes is not None:
        # measured: the pooled lookups are among the saved bytes; the batch is what the
        # example inputs held (ids shared by several tables count once)
        io_mib = spec.batch_size * spec.batch_bytes * mib
    # Backward ends with every gradient materialised while the earliest activations are still
    # saved, so the backward phase counts the gradients too; the step phase adds the
    # optimizer's temporaries instead of activations.
    bwd_mib = hold_mib + saved_mib + io_mib + grad_mib
    step_regime = 1.0 if step_mib > bwd_mib else 0.0
    opt_group = OPT_GROUP[spec.optimizer]
    onehot = {f"o_{g}": 1.0 if g == opt_group else 0.0 for g in OPT_GROUPS}
    times = roofline_times(spec, b, emb_params, dense_params, m_emb, m, gathered, gpu)
    return {
        **onehot,
        **times,
        **dispatch_features(spec, times, gpu),
        "emb_mib": emb_params * b * mib,
        # the table shards this worker holds and their optimizer state (sharded tables only)
        "shards_mib": held_emb * b * mib * (1 + m_emb) if shard is not None else 0.0,
        "dense_mib": dense_params * b * mib,
        "m_emb": m_emb,
        "m_dense": m,
        "sparse": 1.0 if spec.sparse_grad else 0.0,
        "conv": 1.0 if spec.family in CNN_FAMILIES else 0.0,
        "act_mib": spec.batch_size * spec.activations * b * mib,
        # a convolutional model's mean layer output (activations over conv/linear layers):
        # the size cuDNN's convolution workspaces follow (allowance.allowance_columns)
        "conv_layer_mib": (spec.batch_size * spec.activations / max(spec.layers, 1) * b * mib
                           if spec.family in CNN_FAMILIES else 0.0),
        "io_mib": io_mib,
        "slack_mib": (spec.slack_bytes or 0.0) * mib,
        "step_mib": step_mib,
        "hold_mib": hold_mib,
        "grad_mib": grad_mib,
        "saved_mib": saved_mib,
        "step_regime": step_regime,
        "bwd_regime": 1.0 - step_regime,
        "pooled_mib": spec.batch_size * pooled * b * mib,
        # uncoalesced sparse gradient of the lookups: values + int64 ids
        "gathered_mib": spec.batch_size * (gathered * b + lookups * 8) * mib,
        "step_temp_mib": step_temp_mib,
        # job-fields level: activations from MACs alone. A layer of width w does w MACs per
        # input element, and w ~ sqrt(parameters per layer), so activations ~ macs / sqrt(dense
        # parameters); the plain MAC count is the other bound (one output per MAC)
        "act_macs_mib": spec.batch_size * spec.macs * b * mib,
        # (dense parameters unknown: each MLP weight is used once per sample, so about macs)
        "act_width_mib": spec.batch_size * spec.macs
        / math.sqrt(max(1.0, dense_params or spec.macs))
        * b * mib,
        # with tables, the layers read embedding-wide vectors: one output per ``dim`` MACs
        # (a transformer's d-wide layers, a vocabulary-wide output layer over d-dim rows)
        "act_dim_mib": spec.batch_size * spec.macs / main_dim(spec) * b * mib
        if spec.tables else 0.0,
        **job_activation_terms(spec, dense_params, b),
        "batch": float(spec.batch_size),
        "dtype_bytes": float(b),
        "log_batch": math.log10(spec.batch_size),
        "log_macs": math.log10(1.0 + spec.macs),
        "log_flops_step": math.log10(1.0 + 6.0 * spec.macs * spec.batch_size),
        "log_params": math.log10(1.0 + emb_params + dense_params),
        "log_dense_params": math.log10(1.0 + dense_params),
        "log_emb_params": math.log10(1.0 + emb_params),
        "log_act": math.log10(1.0 + spec.activations * spec.batch_size),
        "log_lookups": math.log10(1.0 + lookups * spec.batch_size),
        "n_tables": float(n_tables),
        "mlp_depth": float(len(spec.bottom_mlp) + len(spec.top_mlp)),
        "log_peak_flops": math.log10(gpus.peak_flops(gpu, spec.dtype)),
        "log_mem_bw": math.log10(gpu.mem_bw_gbs * 1e9),
        "log_intensity": math.log10(1.0 + 6.0 * spec.macs * spec.batch_size)
        - math.log10(1.0 + spec.batch_size * (lookups * 8 + gathered * b)
                     + (emb_params * 0 + dense_params) * b * 4),
    }



def step_seconds(spec: ModelSpec) -> float:
    """Predicted seconds of one training step alone on the target GPU, from the structure: the
    GPU time of its work (:func:`roofline_times`, TF32 convolutions as in
    :func:`dispatch_features`) plus the smallest kernel time per launch, or the host's launch
    time of its kernels when that is longer (eager PyTorch). An estimate for ordering jobs,
    within about x2 of the measured step on the H200 rows (docs/jobs.md, queue bands)."""
    d = derive(spec)
    kernels = 10 ** d["log_kernels"]
    t_gpu = 10 ** d["log_busy_per_launch"] * kernels * DISPATCH_S
    return max(kernels * DISPATCH_S, t_gpu + kernels * KERNEL_MIN_S)

