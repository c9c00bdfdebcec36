"""Feature schema of a training job and the numeric features the models use.

Pure: no I/O, no torch. Two inputs are accepted:

* ``sparse.io/model`` — JSON matching :class:`ModelSpec` (documented in docs/predictor.md),
  validated by msgspec with a path to the offending field in every error;
* ``kube-gpu-sparse/task_info`` — the original system's flat record (``macs``, ``params``,
  ``batch_size``, ``embedding_size_total``, ``embedding_dim_total``, ``embedding_table_count``),
  converted to a :class:`ModelSpec` by :func:`from_task_info`.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

import msgspec

from predictor import gpus

ANN_MODEL = "sparse.io/model"
ANN_TASK_INFO = "kube-gpu-sparse/task_info"
MAX_ANNOTATION_BYTES = 64 * 1024

Family = Literal[
    "wide_deep", "deepfm", "dlrm", "recommendation",
    "resnet", "cnn", "yolo", "bert", "transformer", "rnn", "rl", "gan", "other",
]
Optimizer = Literal[
    "sgd", "momentum", "adagrad", "rowwise_adagrad", "adam", "adamw", "sparse_adam", "rmsprop",
]
Dtype = Literal["fp32", "fp16", "bf16"]

# Bounds: generous for real models, small enough that products of them stay finite floats.
Rows = Annotated[int, msgspec.Meta(ge=1, le=10**11)]
Dim = Annotated[int, msgspec.Meta(ge=1, le=65536)]
Width = Annotated[int, msgspec.Meta(ge=1, le=10**6)]
Count = Annotated[int, msgspec.Meta(ge=1, le=100_000)]
Pooling = Annotated[float, msgspec.Meta(gt=0, le=100_000)]
NonNegBig = Annotated[float, msgspec.Meta(ge=0, le=1e16)]
MeasuredBytes = Annotated[float, msgspec.Meta(ge=0, le=1e15)]

JOB_CLASSES = ("recommendation", "cnn", "cnn-small", "transformer", "rnn", "rl", "gan")
RECOMMENDATION_FAMILIES = frozenset({"wide_deep", "deepfm", "dlrm", "recommendation"})

# Optimizer-state elements per parameter element (TorchRec planner's multipliers; row-wise
# Adagrad keeps one value per row, i.e. 1/dim per element, applied per table).
OPT_STATE_MULT: dict[str, float] = {
    "sgd": 0.0, "momentum": 1.0, "adagrad": 1.0, "rowwise_adagrad": 1.0, "adam": 2.0,
    "adamw": 2.0, "sparse_adam": 2.0, "rmsprop": 1.0,
}
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
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
OptimizerImpl = Literal["foreach", "single", "fused"]
# Fraction of the forward op outputs (``activations``) a CNN keeps for backward, from the block
# structure: conv -> BN -> in-place activation keeps conv and BN outputs (2 of 3 outputs);
# a ResNet basic block (conv, BN, ReLU_, conv, BN, add, ReLU_) keeps 4 of 7; a Darknet
# residual (two conv-BN-LeakyReLU_ + add) keeps 5 of 7.
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
CNN_SAVED_FRACTION = {"resnet": 4 / 7, "yolo": 5 / 7, "cnn": 2 / 3}
CNN_FAMILIES = tuple(CNN_SAVED_FRACTION)
# YOLOv3 heads (COCO): 3 anchors x (4 box + objectness + 80 classes) channels at strides 8, 16
# and 32, as elements per input element (input = 3 x H x W).
YOLO_HEAD_ELEMS_PER_INPUT = 3 * (5 + 80) * (1 / 64 + 1 / 256 + 1 / 1024) / 3
# Vocabulary-wide tensors alive at the start of a transformer's backward, per token: the
# log-softmax output kept by cross-entropy, the NLL gradient and the log-softmax gradient.
LOSS_VOCAB_TENSORS = 3
OTHER_SAVED_FRACTION = 0.5  # MLP-style nets: a non-in-place activation saves its output only


class SchemaError(ValueError):
    """The annotation is not a valid model description; the message names the field."""


class Table(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One embedding table (``count`` identical tables)."""

    rows: Rows
    dim: Dim
    pooling: Pooling = 1.0  # ids looked up per sample (multi-hot length; seq_len for tokens)
    count: Count = 1


class ModelSpec(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Structure of one training job (one replica on one GPU)."""

    family: Family
    batch_size: Annotated[int, msgspec.Meta(ge=1, le=10**7)]
    optimizer: Optimizer = "adam"
    dtype: Dtype = "fp32"
    gpu_model: str = gpus.DEFAULT_GPU
    macs: NonNegBig = 0.0  # forward multiply-accumulates per sample
    params: NonNegBig = 0.0  # all parameters; 0 = derive from tables + MLPs
    activations: NonNegBig = 0.0  # forward output elements per sample summed over layers
    inputs: NonNegBig = 0.0  # input tensor elements per sample besides ids (image C x H x W)
    layers: Annotated[int, msgspec.Meta(ge=0, le=10**6)] = 0  # convolution + linear layers
    tables: Annotated[list[Table], msgspec.Meta(max_length=10_000)] = []
    dense_features: Annotated[int, msgspec.Meta(ge=0, le=10**6)] = 0
    bottom_mlp: Annotated[list[Width], msgspec.Meta(max_length=1000)] = []
    top_mlp: Annotated[list[Width], msgspec.Meta(max_length=1000)] = []
    sparse_grad: bool = False  # nn.EmbeddingBag(sparse=True)
    # how the optimizer steps: ``foreach`` (PyTorch's default on CUDA), ``single``
    # (``foreach=False``) or ``fused`` (``fused=True``); read when ``step_bytes`` is not given
    optimizer_impl: OptimizerImpl = "foreach"
    # job-fields level, optional: output elements of the leaf modules' forward per sample
    # (what torchinfo's summary counts as its forward pass size); 0 = not given
    leaf_activations: NonNegBig = 0.0
    # Measured by ``sparse-predictor describe`` (one traced training step); None = not given,
    # the analytic rules apply. Bytes; ``saved``/``backward`` per sample.
    saved_bytes: MeasuredBytes | None = None  # live at the end of the forward pass (kept)
    # backward's peak minus saved activations minus gradients, per sample: negative when
    # activations are freed before every gradient exists
    backward_bytes: Annotated[float, msgspec.Meta(ge=-1e15, le=1e15)] | None = None
    step_bytes: MeasuredBytes | None = None  # the optimizer step's transient peak
    state_bytes: MeasuredBytes | None = None  # optimizer state after a step
    batch_bytes: MeasuredBytes | None = None  # the inputs of one sample (ids, features, target)
    # the traced step replayed as the CUDA program runs it through PyTorch's caching
    # allocator: its reserved peak minus the traced peak (segment rounding, cached free
    # blocks; negative where CUDA kernels keep less, e.g. fused dropout's bool masks);
    # bytes at this batch size
    slack_bytes: Annotated[float, msgspec.Meta(ge=-1e15, le=1e15)] | None = None
    schema_version: Literal[1] = 1

    def __post_init__(self) -> None:
        if self.gpu_model not in gpus.CATALOGUE:
            raise ValueError(
                f"unknown gpu_model {self.gpu_model!r}; known: {', '.join(sorted(gpus.CATALOGUE))}"
            )
        n_tables = sum(t.count for t in self.tables)
        if n_tables > 100_000:
            raise ValueError(f"{n_tables} embedding tables in total; at most 100000 are accepted")
        if self.sparse_grad and self.optimizer not in ("sgd", "momentum", "adagrad", "sparse_adam"):
            raise ValueError(f"sparse_grad is not supported by optimizer {self.optimizer!r}")
        if self.optimizer == "sparse_adam" and not self.sparse_grad:
            raise ValueError("optimizer 'sparse_adam' needs sparse_grad: true")


class TaskInfo(msgspec.Struct, frozen=True):
    """The original system's ``kube-gpu-sparse/task_info`` (unknown fields are ignored)."""

    batch_size: Annotated[int, msgspec.Meta(ge=1, le=10**7)]
    macs: NonNegBig = 0.0
    params: NonNegBig = 0.0
    embedding_size_total: NonNegBig = 0.0  # rows summed over tables
    embedding_dim_total: NonNegBig = 0.0  # dims summed over tables
    embedding_table_count: Annotated[int, msgspec.Meta(ge=0, le=100_000)] = 0


class JobFields(msgspec.Struct, forbid_unknown_fields=True, frozen=True, rename="camel"):
    """The model fields a ``RecommendDLJob`` (and the original ``task_info``) carries, camelCase
    as in the CRD: ``macs`` per sample, ``params``, ``batchSize``, ``vocabularySize[]`` and
    ``embeddingDim[]`` per table (one dim for all tables is accepted), or the totals
    ``embeddingSizeTotal`` / ``embeddingDimTotal`` / ``embeddingTableCount``; optional
    ``optimizer``, ``dtype`` and ``gpuModel``."""

    batch_size: Annotated[int, msgspec.Meta(ge=1, le=10**7)]
    macs: NonNegBig = 0.0
    params: NonNegBig = 0.0
    vocabulary_size: Annotated[list[Rows], msgspec.Meta(max_length=100_000)] = []
    embedding_dim: Annotated[list[Dim], msgspec.Meta(max_length=100_000)] = []
    embedding_size_total: NonNegBig = 0.0
    embedding_dim_total: NonNegBig = 0.0
    embedding_table_count: Annotated[int, msgspec.Meta(ge=0, le=100_000)] = 0
    optimizer: Optimizer | None = None
    dtype: Dtype | None = None
    gpu_model: str | None = None
    # optional: the tables are nn.Embedding(sparse=True) / EmbeddingBag(sparse=True), so their
    # gradients hold only the rows a batch touched (unset: dense, PyTorch's default; SparseAdam
    # implies sparse)
    sparse_gradients: bool | None = None
    # optional: how the optimizer steps (``foreach``: PyTorch's default on CUDA; ``single``:
    # built with ``foreach=False``; ``fused``: ``fused=True``); unset: foreach
    optimizer_impl: OptimizerImpl | None = None
    # optional: ids looked up per sample in each table (multi-hot length, sequence length; one
    # value for all tables is accepted); unset: one id per table and sample
    ids_per_sample: Annotated[list[Pooling], msgspec.Meta(max_length=100_000)] = []
    # optional: output elements per sample of the forward of every leaf module (a module
    # without children), summed: torchinfo's ``summary(model, input_size=...)`` prints it as
    # "Forward/backward pass size (MB)" = 2 x this x batch x dtype bytes / 1e6; unset: the
    # activations are bounded from ``macs`` and ``params`` alone
    leaf_activations: NonNegBig | None = None


# The optional job fields, in the groups the evaluation reports them by: the gradient layout
# of the tables and the ids per sample, and the activations a model summary states.
OPTIONAL_LAYOUT = ("sparseGradients", "idsPerSample", "optimizerImpl")
OPTIONAL_ACTIVATIONS = ("leafActivations",)
OPTIONAL_JOB_FIELDS = (*OPTIONAL_LAYOUT, *OPTIONAL_ACTIVATIONS)


JOB_FIELD_KEYS = frozenset({"batchSize", "vocabularySize", "embeddingDim", "embeddingSizeTotal",
                            "embeddingDimTotal", "embeddingTableCount"})


def job_fields_spec(job: JobFields, gpu_model: str = gpus.DEFAULT_GPU) -> ModelSpec:
    """The spec of a job described by its job fields only. Unknown optimizer: Adam (the
    largest state multiplier, so the estimate errs on the safe side); SparseAdam implies
    sparse gradients; tables look up one id per sample."""
    vocab, dims = job.vocabulary_size, job.embedding_dim
    if vocab:
        if len(dims) == 1:
            dims = dims * len(vocab)
        if len(dims) != len(vocab):
            raise ValueError(f"embeddingDim has {len(job.embedding_dim)} entries, "
                             f"vocabularySize {len(vocab)}: give one dim per table or one for all")
        ids = job.ids_per_sample or [1.0]
        if len(ids) == 1:
            ids = ids * len(vocab)
        if len(ids) != len(vocab):
            raise ValueError(f"idsPerSample has {len(job.ids_per_sample)} entries, "
                             f"vocabularySize {len(vocab)}: give one per table or one for all")
        tables = group_tables([(r, d, p) for r, d, p in zip(vocab, dims, ids, strict=True)])
    elif job.embedding_table_count and job.embedding_size_total:
        n = job.embedding_table_count
        rows = max(1, min(10**11, round(job.embedding_size_total / n)))
        dim = max(1, min(65536, round(job.embedding_dim_total / n) or 1))
        tables = [Table(rows=rows, dim=dim, pooling=1.0, count=n)]
    elif dims:
        raise ValueError("embeddingDim without vocabularySize")
    else:
        tables = []
    optimizer = job.optimizer or "adam"
    sparse = optimizer == "sparse_adam" or bool(job.sparse_gradients)
    if sparse and optimizer not in ("sgd", "momentum", "adagrad", "sparse_adam"):
        raise ValueError(f"sparseGradients is not supported by optimizer {optimizer!r}")
    return ModelSpec(
        family="recommendation" if tables else "other", batch_size=job.batch_size,
        optimizer=optimizer, dtype=job.dtype or "fp32", gpu_model=job.gpu_model or gpu_model,
        macs=job.macs, params=job.params, tables=tables,
        sparse_grad=sparse, optimizer_impl=job.optimizer_impl or "foreach",
        leaf_activations=job.leaf_activations or 0.0,
    )


def input_level(spec: ModelSpec) -> str:
    """``described`` when the spec carries what a traced model gives (activations or the
    measured phase sizes), else ``job`` (the job fields only)."""
    return "described" if (spec.saved_bytes is not None or spec.activations > 0) else "job"


def to_job_fields(spec: ModelSpec,
                  optional: bool | tuple[str, ...] = False) -> dict[str, Any]:
    """The camelCase job fields a ``RecommendDLJob`` would carry for ``spec``; with
    ``optional`` also the optional ones (``True``: all of :data:`OPTIONAL_JOB_FIELDS`, or
    those named) the spec knows."""
    names = OPTIONAL_JOB_FIELDS if optional is True else (optional or ())
    out: dict[str, Any] = {"macs": spec.macs, "params": spec.params,
                           "batchSize": spec.batch_size}
    if spec.tables:
        out["vocabularySize"] = [t.rows for t in spec.tables for _ in range(t.count)]
        out["embeddingDim"] = [t.dim for t in spec.tables for _ in range(t.count)]
    out["optimizer"] = spec.optimizer
    out["dtype"] = spec.dtype
    if "sparseGradients" in names and spec.sparse_grad:
        out["sparseGradients"] = True
    if "optimizerImpl" in names and spec.optimizer_impl != "foreach":
        out["optimizerImpl"] = spec.optimizer_impl
    if "idsPerSample" in names and spec.tables:
        out["idsPerSample"] = [t.pooling for t in spec.tables for _ in range(t.count)]
    if "leafActivations" in names and spec.leaf_activations > 0:
        out["leafActivations"] = spec.leaf_activations
    return out


_spec_decoder = msgspec.json.Decoder(ModelSpec)
_task_decoder = msgspec.json.Decoder(TaskInfo, strict=False)  # strict=False: "512" -> 512


def _check_size(raw: str | bytes, what: str) -> bytes:
    data = raw.encode() if isinstance(raw, str) else raw
    if len(data) > MAX_ANNOTATION_BYTES:
        raise SchemaError(f"{what}: {len(data)} bytes, larger than {MAX_ANNOTATION_BYTES}")
    return data


def parse_model(raw: str | bytes, gpu_model: str | None = None) -> ModelSpec:
    """Decode and validate a ``sparse.io/model`` annotation: either the full schema
    (:class:`ModelSpec`, snake_case) or the job fields (:class:`JobFields`, camelCase),
    told apart by their keys. ``gpu_model`` is the default for job fields without
    ``gpuModel``."""
    data = _check_size(raw, ANN_MODEL)
    try:
        obj = msgspec.json.decode(data)
        if isinstance(obj, dict) and JOB_FIELD_KEYS & obj.keys() and "family" not in obj:
            job = msgspec.convert(obj, JobFields)
            return job_fields_spec(job, gpu_model or gpus.DEFAULT_GPU)
        return _spec_decoder.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise SchemaError(f"{ANN_MODEL}: {exc}") from None
    except RecursionError:
        raise SchemaError(f"{ANN_MODEL}: nesting too deep") from None
    except ValueError as exc:
        raise SchemaError(f"{ANN_MODEL}: {exc}") from None


def from_task_info(raw: str | bytes, gpu_model: str = gpus.DEFAULT_GPU) -> ModelSpec:
    """Convert the original ``task_info``: tables are assumed equal-sized, optimizer Adam
    (the largest state multiplier, so the estimate errs on the safe side), fp32, pooling 1."""
    data = _check_size(raw, ANN_TASK_INFO)
    try:
        ti = _task_decoder.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise SchemaError(f"{ANN_TASK_INFO}: {exc}") from None
    except RecursionError:
        raise SchemaError(f"{ANN_TASK_INFO}: nesting too deep") from None
    tables: list[Table] = []
    n = ti.embedding_table_count
    if n and ti.embedding_size_total:
        rows = max(1, min(10**11, round(ti.embedding_size_total / n)))
        dim = max(1, min(65536, round(ti.embedding_dim_total / n) or 1))
        tables = [Table(rows=rows, dim=dim, pooling=1.0, count=n)]
    family = "recommendation" if tables else "other"
    try:
        return ModelSpec(
            family=family, batch_size=ti.batch_size, macs=ti.macs, params=ti.params,
            tables=tables, optimizer="adam", gpu_model=gpu_model,
        )
    except ValueError as exc:
        raise SchemaError(f"{ANN_TASK_INFO}: {exc}") from None


def from_annotations(annotations: dict[str, str] | None) -> ModelSpec | None:
    """The spec a pod describes, ``None`` if it carries neither annotation.

    ``sparse.io/model`` wins over ``task_info``; the GPU model is taken from
    ``sparse.io/gpu-model`` (first of a ``|``-list) for ``task_info``.
    """
    ann = annotations or {}
    gpu = (ann.get("sparse.io/gpu-model") or gpus.DEFAULT_GPU).split("|")[0].strip()
    if gpu not in gpus.CATALOGUE:
        gpu = gpus.DEFAULT_GPU
    if ANN_MODEL in ann:
        return parse_model(ann[ANN_MODEL], gpu_model=gpu)
    if ANN_TASK_INFO in ann:
        return from_task_info(ann[ANN_TASK_INFO], gpu_model=gpu)
    return None


def group_tables(tables: list[tuple[int, int, float]]) -> list[Table]:
    """(rows, dim, ids per sample) of every table, identical ones merged into ``count``."""
    counts: dict[tuple[int, int, float], int] = {}
    for r, d, p in tables:
        key = (max(1, int(r)), max(1, int(d)), round(max(float(p), 1e-3), 3))
        counts[key] = counts.get(key, 0) + 1
    return [Table(rows=r, dim=d, pooling=p, count=c) for (r, d, p), c in counts.items()]


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


def transformer_shape(spec: ModelSpec) -> tuple[int, float, int, int, float] | None:
    """(d_model, seq_len, vocab, heads, layers) of a BERT-style encoder described by its token
    table (rows = vocab, dim = d_model, pooling = tokens per sample) and ``params``; heads are
    d/64 (BERT convention), layers solve ``params = tables + head + L (12 d^2 + 13 d)``."""
    if not spec.tables:
        return None
    tok = max(spec.tables, key=lambda t: t.rows * t.dim)
    d, seq, vocab = tok.dim, tok.pooling, tok.rows
    emb = sum(t.rows * t.dim * t.count for t in spec.tables)
    head = d * vocab + vocab
    layers = max(1.0, (spec.params - emb - head) / (12 * d * d + 13 * d)) if spec.params else 1.0
    return d, seq, vocab, max(1, d // 64), layers


def saved_activation_bytes(spec: ModelSpec) -> float:
    """Analytic bytes of the activations kept for backward, per family structure.

    Transformers (post-LN encoder, explicit attention with dropout): per token and layer
    ``b (17 d + 2 h s) + (h s + 2 d)`` (d-wide tensors: LN/qkv/attention/proj/FFN outputs,
    two s-wide attention maps per head, 1-byte dropout masks), plus ``3 V b`` per token for
    the vocabulary-wide loss: cross-entropy keeps the log-softmax output (the logits are freed
    once it exists), and the backward starts by materialising two more tensors of that size
    (the NLL gradient and the log-softmax gradient) while everything saved is still alive.
    CNNs: ``CNN_SAVED_FRACTION`` of the forward op outputs. Others: ``OTHER_SAVED_FRACTION``;
    DLRM adds its dot interaction: the backward of the pairwise-product selection materialises
    a ``B x F x F`` gradient (F = tables + the bottom MLP's output) while the forward's saved
    tensors are still alive.
    """
    b = DTYPE_BYTES[spec.dtype]
    bsz = spec.batch_size
    if spec.saved_bytes is not None:  # measured by describe: no family rule needed
        return bsz * (spec.saved_bytes + (spec.backward_bytes or 0.0))
    if spec.family in ("bert", "transformer"):
        shape = transformer_shape(spec)
        if shape is not None:
            d, seq, vocab, h, layers = shape
            per_tok_layer = b * (17 * d + 2 * h * seq) + (h * seq + 2 * d)
            return bsz * seq * (layers * per_tok_layer + LOSS_VOCAB_TENSORS * vocab * b)
    frac = CNN_SAVED_FRACTION.get(spec.family, OTHER_SAVED_FRACTION)
    saved = frac * bsz * spec.activations * b
    if spec.family == "yolo" and b < 4:
        # the detection loss upcasts every head output to fp32 and keeps that copy for backward
        saved += bsz * YOLO_HEAD_ELEMS_PER_INPUT * spec.inputs * 4
    if spec.family == "dlrm" and spec.tables:
        fields = sum(t.count for t in spec.tables) + 1
        saved += bsz * fields * fields * b
    return saved


def _main_dim(spec: ModelSpec) -> float:
    """Embedding width of the largest table (the token / item table of a sequence model)."""
    return float(max(spec.tables, key=lambda t: t.rows * t.dim).dim)


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
    if spec.optimizer == "rowwise_adagrad" and emb_params:
        m_emb = sum(t.rows * t.count for t in spec.tables) / emb_params  # one state per row
    else:
        m_emb = m
    lookups = sum(t.pooling * t.count for t in spec.tables)  # ids per sample
    pooled = sum(t.dim * t.count for t in spec.tables)  # pooled embedding width per sample
    gathered = sum(t.pooling * t.dim * t.count for t in spec.tables)
    gpu = gpus.get(spec.gpu_model)
    # analytic memory phases (MiB): optimizer step vs backward
    p_mib = (emb_params + dense_params) * b * mib
    grad_mib = ((dense_params * b + spec.batch_size * (gathered * b + lookups * 8)) * mib
                if spec.sparse_grad else p_mib)
    hold_mib = emb_params * b * mib * (1 + m_emb) + dense_params * b * mib * (1 + m)
    if spec.state_bytes is not None:
        hold_mib = p_mib + spec.state_bytes * mib
    if spec.step_bytes is not None:
        step_temp_mib = spec.step_bytes * mib
    elif spec.sparse_grad:
        # the dense part is stepped as usual, the tables in place (see OPT_STEP_TEMP_SPARSE)
        step_temp_mib = (dense_params * b * mib * OPT_STEP_TEMP[spec.optimizer]
                         + (grad_mib - dense_params * b * mib)
                         * OPT_STEP_TEMP_SPARSE.get(spec.optimizer, 1.0))
    elif spec.optimizer_impl == "fused":
        step_temp_mib = 0.0
    elif spec.optimizer_impl == "single":
        # the largest parameter: the largest table, or (no tables) at most the dense part
        largest = max((t.rows * t.dim for t in spec.tables), default=0) or dense_params
        step_temp_mib = largest * b * mib * OPT_STEP_TEMP_SINGLE[spec.optimizer]
    else:
        step_temp_mib = p_mib * OPT_STEP_TEMP[spec.optimizer]
    step_mib = hold_mib + grad_mib + step_temp_mib
    saved_mib = saved_activation_bytes(spec) * mib
    # the batch (ids, input tensors) and the pooled lookups live through the whole step
    io_mib = spec.batch_size * (lookups * 8 + pooled * b + spec.inputs * b) * mib
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
        "dense_mib": dense_params * b * mib,
        "m_emb": m_emb,
        "m_dense": m,
        "sparse": 1.0 if spec.sparse_grad else 0.0,
        "conv": 1.0 if spec.family in CNN_FAMILIES else 0.0,
        "act_mib": spec.batch_size * spec.activations * b * mib,
        # a convolutional model's mean layer output (activations over conv/linear layers):
        # the size cuDNN's convolution workspaces follow (memory_model.allowance_columns)
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
        "act_dim_mib": spec.batch_size * spec.macs / _main_dim(spec) * b * mib
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


def job_activation_terms(spec: ModelSpec, dense_params: float, b: int) -> dict[str, float]:
    """Activations kept for backward, bounded from the job fields alone (MiB, per batch).

    ``macs / dense parameters`` is how often each weight is used per sample: about 1 for
    the MLPs of a recommendation model, the token count of a transformer, the pixel count of
    a convolution. The MACs up to one use per weight are MLP-like: a layer of width w does w
    MACs per output and w ~ sqrt(parameters), so they keep ``macs / sqrt(dense params)``
    outputs (``mlp_act_mib``). The MACs beyond that are positions reusing the weights; each
    keeps per-position outputs, bounded the same way (``reuse_width_mib``) and, with
    embedding tables, by the table width, the residual stream of a transformer over token
    embeddings (``reuse_dim_mib``). Lookups of one id per table and sample are ``io_mib``.

    With the optional ``leaf_activations`` (the leaf modules' outputs, which a model summary
    counts) the module outputs are known (``leaf_act_mib``) and replace the two width bounds;
    the table-width bound stays, for the functional ops between modules (attention scores,
    interactions) that no module outputs."""
    mib = 1.0 / 2**20
    dense = max(1.0, dense_params or spec.macs)
    first = min(spec.macs, dense)
    reuse = max(0.0, spec.macs - dense)
    per = spec.batch_size * b * mib
    leaf = spec.leaf_activations > 0
    return {
        "mlp_act_mib": 0.0 if leaf else per * first / math.sqrt(dense),
        "reuse_width_mib": 0.0 if leaf else per * reuse / math.sqrt(dense),
        "reuse_dim_mib": per * reuse / _main_dim(spec) if spec.tables else 0.0,
        "leaf_act_mib": per * spec.leaf_activations,
    }


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


def to_dict(spec: ModelSpec) -> dict[str, Any]:
    return msgspec.to_builtins(spec)
