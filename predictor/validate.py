"""``describe`` against a real training step of the same model (imports torch).

The annotation ``describe`` writes (a step traced on fake tensors) is predicted, and the same
step then runs for real on the CPU, on copies of the model, under the tracer and the PyTorch
profiler's memory events: the tracer's peak is what the training labels are made of, the
allocator's the bytes the CPU allocator handed out (workspaces inside kernels included). The
job-fields estimate of the same model (what a ``RecommendDLJob`` carries) is shown next to
them. ``sparse-predictor validate-tracer`` runs it on the architectures of
:mod:`predictor.generate.outside` or on a user's ``MODULE:FACTORY``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from predictor import describe as describing
from predictor import estimate, schema

MIB = 2**20


@dataclass(frozen=True)
class Check:
    train_mib: float  # predicted from describe's annotation (no context, no margin)
    traced_mib: float  # the tracer's peak of the real step: what a training label is
    allocator_mib: float  # the CPU allocator's peak of the real step
    job_mib: float  # predicted from the job fields alone

    def error(self, mib: float) -> float:
        """``mib`` over the allocator's peak, minus one."""
        return mib / self.allocator_mib - 1.0


def check(model: Any, example_inputs: Any, optimizer: Any, loss_fn: Callable | None = None,
          example_kwargs: dict | None = None, *, autocast: Any = None,
          estimator: estimate.Estimator | None = None) -> Check:
    """Describe ``model`` (arguments as :func:`predictor.describe.describe`), predict it, and
    measure the same step for real."""
    import msgspec

    # one process's step on both sides: a DDP model's buckets are not run here
    annotation = describing.describe(model, example_inputs, optimizer, loss_fn,
                                     autocast=autocast, example_kwargs=example_kwargs,
                                     data_parallel_workers=0)
    real = describing.real_step(model, example_inputs, optimizer, loss_fn, autocast=autocast,
                                example_kwargs=example_kwargs)
    est = estimator or estimate.Estimator.load()
    spec = msgspec.convert(annotation, schema.ModelSpec)
    job = schema.parse_model(msgspec.json.encode(schema.to_job_fields(spec)))
    return Check(train_mib=est.predict(spec).train_mib, traced_mib=real["peak_bytes"] / MIB,
                 allocator_mib=real["alloc_peak_bytes"] / MIB,
                 job_mib=est.predict(job).train_mib)
