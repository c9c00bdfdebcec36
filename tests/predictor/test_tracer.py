"""The CPU tracer against allocator-level truth (the profiler's memory events)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from predictor.generate import measure  # noqa: E402
from predictor.generate.allocator import allocator_peak  # noqa: E402

MIB = 2**20


def _sparse_table(optimizer: str):  # noqa: ANN202
    torch.manual_seed(0)
    emb = torch.nn.EmbeddingBag(200_000, 16, mode="sum", sparse=True)  # 12.2 MiB
    if optimizer == "sgd":
        opt = torch.optim.SGD(emb.parameters(), lr=0.1)
    elif optimizer == "adagrad":
        opt = torch.optim.Adagrad(emb.parameters(), lr=0.1)
    else:
        opt = torch.optim.SparseAdam(list(emb.parameters()), lr=0.1)
    ids = torch.randint(0, 200_000, (512, 4))
    emb(ids).sum().backward()
    opt.step()  # warm-up: lazily created state exists from here on
    return emb, opt, ids


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "sparse_adam"])
def test_sparse_optimizer_step_in_place_updates_are_not_new_memory(optimizer: str) -> None:
    """``param.add_(sparse_grad)`` returns the parameter's own storage: nothing is allocated."""
    emb, opt, ids = _sparse_table(optimizer)
    table = emb.weight.numel() * 4
    emb(ids).sum().backward()
    truth = allocator_peak(opt.step)
    emb(ids).sum().backward()
    tracer = measure.StepTracer()
    with tracer:
        opt.step()
    assert truth < 0.2 * table  # the step allocates only the touched rows' temporaries
    assert abs(tracer.peak - truth) <= 0.05 * truth + 0.1 * MIB, (tracer.peak, truth)


def test_views_of_parameters_are_not_new_memory() -> None:
    """A Linear's weight goes through ``aten.t`` (a view): the tracer must not book it."""
    lin = torch.nn.Linear(512, 512)
    x = torch.randn(8, 512)
    tracer = measure.StepTracer()
    with tracer:
        y = lin(x)
    assert tracer.peak == y.numel() * 4


@pytest.mark.parametrize("cfg", [
    {"family": "dlrm", "tables": [[30000, 16, 3.0]] * 3, "dense_features": 13,
     "bottom_mlp": [64], "top_mlp": [64], "batch_size": 256, "optimizer": "adagrad",
     "dtype": "fp32", "sparse_grad": True},
    {"family": "bert", "d_model": 128, "heads": 2, "layers": 2, "seq_len": 32, "vocab": 4096,
     "batch_size": 4, "optimizer": "adam", "dtype": "fp32"},
])
def test_whole_step_label_matches_the_allocator(cfg: dict) -> None:
    m = measure.measure(cfg, fake=False, allocator=True)
    assert abs(m["peak_bytes"] - m["alloc_peak_bytes"]) <= 0.04 * m["alloc_peak_bytes"], m
    fake = measure.measure(cfg, fake=True) if not cfg.get("sparse_grad") else m
    assert fake["peak_bytes"] == pytest.approx(m["peak_bytes"], rel=1e-3)
