"""The annotation schema of a training job: what ``sparse.io/model`` and the original
``kube-gpu-sparse/task_info`` may say, validated and converted to one :class:`ModelSpec`.

Pure: no I/O, no torch. Two inputs are accepted:

* ``sparse.io/model`` — JSON matching :class:`ModelSpec` (documented in docs/predictor.md),
  validated by msgspec with a path to the offending field in every error; or the job fields
  (:class:`JobFields`, camelCase as in the ``RecommendDLJob`` CRD);
* ``kube-gpu-sparse/task_info`` — the original system's flat record (``macs``, ``params``,
  ``batch_size``, ``embedding_size_total``, ``embedding_dim_total``, ``embedding_table_count``),
  converted to a :class:`ModelSpec` by :func:`from_task_info`.
"""

from __future__ import annotations

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
MAX_WORKERS = 100_000  # processes of one data-parallel job
Workers = Annotated[int, msgspec.Meta(ge=0, le=MAX_WORKERS)]
OptimizerImpl = Literal["foreach", "single", "fused"]
# how TorchRec shards the tables over the job's workers: whole tables per worker, each table's
# rows split evenly over the workers, or each table cut into column blocks dealt out as tables
# (predictor.sharding)
EmbeddingSharding = Literal["table-wise", "row-wise", "column-wise"]
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


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
    # the job's workers sync their gradients with PyTorch's DistributedDataParallel, this many
    # of them (0: they do not): its reducer keeps every dense gradient in buckets of its own
    # for the whole run, and gathers every worker's sparse gradients to sum them
    data_parallel_workers: Workers = 0
    # DDP built with ``gradient_as_bucket_view=True``: the gradients are views of the buckets
    gradient_as_bucket_view: bool = False
    # the tables are sharded over the ``data_parallel_workers`` workers (TorchRec's
    # DistributedModelParallel): each worker holds its shards only, updated by the fused
    # embedding kernels inside the backward (no table gradient is kept), and exchanges the
    # lookups of the whole job's batch with the others; None: every worker holds every table
    embedding_sharding: EmbeddingSharding | None = None
    # the lookups are kept one vector per id (TorchRec's EmbeddingCollection: a sequence
    # model's history), not pooled per sample: what sharded tables exchange grows with the ids
    unpooled_lookups: bool = False
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
    # dense gradients after backward: less than the parameters where some are frozen
    # (``requires_grad=False``: a pretrained table, a backbone being fine-tuned)
    grad_bytes: MeasuredBytes | None = None
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
        if self.embedding_sharding is not None:
            if not self.tables:
                raise ValueError("embedding_sharding needs tables to shard")
            if self.data_parallel_workers < 1:
                raise ValueError("embedding_sharding needs data_parallel_workers: the workers"
                                 " the tables are sharded over")
            if self.sparse_grad:
                raise ValueError("embedding_sharding and sparse_grad exclude each other: the"
                                 " fused kernels of sharded tables keep no table gradient")


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
    # optional: the job's workers sync their gradients with PyTorch's DistributedDataParallel,
    # this many of them; unset or 0: they do not (the job controller sets it for jobs of
    # several replicas unless the job says otherwise)
    data_parallel_workers: Workers | None = None
    # optional: that DDP is built with ``gradient_as_bucket_view=True``
    gradient_as_bucket_view: bool | None = None
    # optional: the tables are sharded over the ``dataParallelWorkers`` workers by TorchRec
    # (``table-wise``, ``row-wise`` or ``column-wise``); unset: every worker holds every table
    embedding_sharding: EmbeddingSharding | None = None
    # optional: the lookups are kept one vector per id (TorchRec's EmbeddingCollection), not
    # pooled per sample (EmbeddingBagCollection); read for sharded tables
    unpooled_lookups: bool | None = None


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
    if job.embedding_sharding is not None:
        if not tables:
            raise ValueError("embeddingSharding needs the tables it shards (vocabularySize)")
        if not job.data_parallel_workers:
            raise ValueError("embeddingSharding needs dataParallelWorkers: the workers the"
                             " tables are sharded over")
        if sparse:
            raise ValueError("embeddingSharding excludes sparseGradients and sparse_adam:"
                             " the fused kernels of sharded tables keep no table gradient")
    return ModelSpec(
        family="recommendation" if tables else "other", batch_size=job.batch_size,
        optimizer=optimizer, dtype=job.dtype or "fp32", gpu_model=job.gpu_model or gpu_model,
        macs=job.macs, params=job.params, tables=tables,
        sparse_grad=sparse, optimizer_impl=job.optimizer_impl or "foreach",
        leaf_activations=job.leaf_activations or 0.0,
        data_parallel_workers=job.data_parallel_workers or 0,
        gradient_as_bucket_view=bool(job.gradient_as_bucket_view),
        embedding_sharding=job.embedding_sharding,
        unpooled_lookups=bool(job.unpooled_lookups),
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
    if spec.data_parallel_workers:  # how the job runs, which the job knows
        out["dataParallelWorkers"] = spec.data_parallel_workers
        if spec.gradient_as_bucket_view:
            out["gradientAsBucketView"] = True
        if spec.embedding_sharding is not None:
            out["embeddingSharding"] = spec.embedding_sharding
            if spec.unpooled_lookups:
                out["unpooledLookups"] = True
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

def to_dict(spec: ModelSpec) -> dict[str, Any]:
    return msgspec.to_builtins(spec)
