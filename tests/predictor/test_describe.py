"""describe(): the annotation read off a real PyTorch model under FakeTensorMode."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")

from predictor import dataset, features  # noqa: E402
from predictor.cli import main  # noqa: E402
from predictor.describe import DescribeError, describe  # noqa: E402
from predictor.generate import measure, models  # noqa: E402

DLRM = {"family": "dlrm", "tables": [[20000, 16, 3.0], [5000, 16, 1.0]], "dense_features": 13,
        "bottom_mlp": [64], "top_mlp": [64, 32], "batch_size": 256, "optimizer": "adam",
        "dtype": "fp32", "sparse_grad": False}


def test_describe_matches_the_generator_measurement_and_leaves_the_model_alone() -> None:
    torch.manual_seed(0)
    model, make_batch, loss_fn = models.build(DLRM, torch.float32)
    opt = models.make_optimizer("adam", model)
    dense, y, *ids = make_batch()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    params = list(model.parameters())
    ann = describe(model, (dense, list(ids)), opt,
                   lambda out, *_: torch.nn.functional.binary_cross_entropy_with_logits(out, y))
    # the user's model and optimizer are untouched
    assert list(model.parameters()) == params and not opt.state
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())
    m = measure.measure(DLRM, fake=True)
    want = dataset.measured_fields(m, DLRM["batch_size"])
    for k in ("step_bytes", "state_bytes"):
        assert ann[k] == pytest.approx(want[k], rel=1e-6), k
    # the label batch has the target too; the described one does not: saved bytes match
    assert ann["saved_bytes"] == pytest.approx(want["saved_bytes"], rel=0.02)
    assert ann["params"] == m["n_params"] and ann["layers"] == m["n_layers"]
    assert ann["batch_size"] == 256 and ann["dense_features"] == 13
    assert sorted((t["rows"], t["pooling"]) for t in ann["tables"]) == [(5000, 1.0), (20000, 3.0)]
    spec = features.parse_model(json.dumps(ann))
    assert features.input_level(spec) == "described" and spec.optimizer == "adam"


def test_describe_handles_optimizer_lists_and_sparse_tables() -> None:
    emb = torch.nn.EmbeddingBag(10_000, 8, mode="mean", sparse=True)
    head = torch.nn.Linear(8, 1)
    model = torch.nn.Sequential(emb, head)
    ids = torch.randint(0, 10_000, (64, 4))
    ann = describe(model, ids, [torch.optim.SparseAdam(list(emb.parameters())),
                                torch.optim.Adam(head.parameters())])
    assert ann["optimizer"] == "sparse_adam" and ann["sparse_grad"] is True
    assert ann["tables"] == [{"rows": 10_000, "dim": 8, "pooling": 4.0, "count": 1}]
    assert ann["state_bytes"] >= 2 * 10_000 * 8 * 4


def test_describe_rejects_what_it_cannot_trace() -> None:
    lin = torch.nn.Linear(4, 4)
    with pytest.raises(DescribeError, match="torch.nn.Module"):
        describe(object(), torch.randn(2, 4), torch.optim.SGD(lin.parameters()))
    other = torch.nn.Linear(4, 4)
    with pytest.raises(DescribeError, match="not the model's"):
        describe(lin, torch.randn(2, 4), torch.optim.SGD(other.parameters()))
    with pytest.raises(DescribeError, match="LBFGS steps by calling a closure"):
        describe(lin, torch.randn(2, 4), torch.optim.LBFGS(lin.parameters()))


def test_cli_describe_module_factory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mymodel.py").write_text(textwrap.dedent("""
        import torch

        def make():
            model = torch.nn.Sequential(torch.nn.Embedding(1000, 16), torch.nn.Flatten(),
                                        torch.nn.Linear(16 * 8, 1))
            ids = torch.randint(0, 1000, (32, 8))
            opt = torch.optim.Adagrad(model.parameters(), foreach=False)
            return model, (ids,), opt, lambda out, ids: out.square().mean()

        def broken():
            return 42

        class Scored(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = torch.nn.Embedding(1000, 16)

            def forward(self, ids, *, weights):
                return (self.emb(ids).sum(-1) * weights).mean()

        def keywords():
            model = Scored()
            return {"model": model, "example_inputs": (torch.randint(0, 1000, (32, 8)),),
                    "example_kwargs": {"weights": torch.rand(32, 8)},
                    "optimizer": torch.optim.SGD(model.parameters(), lr=0.1)}
    """))
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, ["describe", "mymodel:keywords"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output.strip().splitlines()[-1])["batch_size"] == 32
    r = CliRunner().invoke(main, ["describe", "mymodel:make"])
    assert r.exit_code == 0, r.output
    ann = json.loads(r.output.strip().splitlines()[-1])
    assert ann["optimizer"] == "adagrad" and ann["tables"][0]["pooling"] == 8.0
    assert ann["optimizer_impl"] == "single"  # foreach=False, kept for the job fields
    spec = features.parse_model(json.dumps(ann))
    assert features.input_level(spec) == "described"
    r = CliRunner().invoke(main, ["describe", "mymodel:make", "--autocast", "bf16"])
    assert r.exit_code == 0, r.output
    mixed = json.loads(r.output.strip().splitlines()[-1])
    assert mixed["saved_bytes"] < ann["saved_bytes"]
    r = CliRunner().invoke(main, ["describe", "mymodel:broken"])
    assert r.exit_code != 0 and "must return" in r.output
    r = CliRunner().invoke(main, ["describe", "nomodule:make"])
    assert r.exit_code != 0 and "cannot import" in r.output


def test_describe_takes_optimizers_whose_defaults_their_constructor_does_not() -> None:
    # AdamW is Adam with decoupled_weight_decay fixed: its defaults hold a key AdamW's
    # constructor refuses; the copy must still be an AdamW with the user's settings
    model = torch.nn.Sequential(torch.nn.Embedding(5_000, 16), torch.nn.Flatten(),
                                torch.nn.Linear(16 * 4, 1))
    for opt in (torch.optim.AdamW(model.parameters(), weight_decay=0.05, foreach=False),
                torch.optim.AdamW(model.parameters(), lr=1e-4)):
        ann = describe(model, torch.randint(0, 5_000, (32, 4)), opt)
        assert ann["optimizer"] == "adamw"
        assert ann["optimizer_impl"] == ("single" if opt.defaults["foreach"] is False
                                         else "foreach")
        params = sum(p.numel() * 4 for p in model.parameters())
        assert ann["state_bytes"] >= 2 * params  # both moments
    # capturable=True (a CUDA-graphs setting) runs on GPUs only: the CPU copy steps without it
    ids = torch.randint(0, 5_000, (32, 4))
    graphs = torch.optim.Adam(model.parameters(), capturable=True)
    plain = torch.optim.Adam(model.parameters())
    assert describe(model, ids, graphs) == describe(model, ids, plain)
    assert graphs.defaults["capturable"] and graphs.param_groups[0]["capturable"]


class Sequence(torch.nn.Module):
    """Ids over 24 steps through a two-layer LSTM (oneDNN's kernel on the CPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(2_000, 16)
        self.rnn = torch.nn.LSTM(16, 24, num_layers=2, batch_first=True)
        self.head = torch.nn.Linear(24, 1)

    def forward(self, ids):  # noqa: ANN001, ANN201
        out, _ = self.rnn(self.emb(ids))
        return self.head(out[:, -1]).squeeze(-1)


def test_an_lstm_is_described_as_the_real_step_measures_it() -> None:
    # PyTorch's fake kernel of the oneDNN LSTM layer returns no workspace; the real one keeps
    # several times its output for backward: the description must see it
    torch.manual_seed(0)
    model = Sequence()
    ids = torch.randint(0, 2_000, (96, 24))  # batch and steps beyond the probed sizes
    opt = torch.optim.Adam(model.parameters())
    ann = describe(model, ids, opt)
    real = measure.trace_training(model, opt, lambda: model(ids).mean(), [ids], 96)
    assert real["act_fwd_bytes"] > 2 * (2 * 96 * 24 * 24 * 4)  # more than the two outputs
    want = dataset.measured_fields(real, 96)
    for k in ("saved_bytes", "backward_bytes", "step_bytes"):
        assert ann[k] == pytest.approx(want[k], rel=1e-3), k
    # the FLOP counter has no formula for the layer: the MACs are the gates' projections
    lstm = 24 * 4 * 24 * ((16 + 24) + (24 + 24))  # steps x gates x units x (inputs + units)
    assert ann["macs"] == pytest.approx(lstm + 24, rel=1e-6)  # + the head


def test_a_large_lstm_workspace_is_fitted_from_small_real_runs(monkeypatch) -> None:  # noqa: ANN001
    from predictor.generate import kernel_gaps

    layer = torch.nn.LSTM(16, 24, batch_first=True)
    x = torch.zeros(300, 40, 16)
    seen = []

    class Grab(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN201
            out = func(*args, **(kwargs or {}))
            if func is kernel_gaps.MKLDNN_RNN:
                seen.append((args, out[3].nbytes))
            return out

    with Grab():
        layer(x)
    (args, real), = seen
    assert kernel_gaps._rnn_workspace(args) == real  # small: run at its own sizes
    monkeypatch.setattr(kernel_gaps, "EXACT_UP_TO", 0)  # as if large: fitted
    assert kernel_gaps._rnn_workspace(args) == pytest.approx(real, rel=5e-3)


class PackedSequence(torch.nn.Module):
    """Padded histories of different lengths, packed into a GRU (a data-dependent shape)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(3_000, 16)
        self.rnn = torch.nn.GRU(16, 24, batch_first=True)
        self.head = torch.nn.Linear(24, 1)

    def forward(self, ids, lengths):  # noqa: ANN001, ANN201
        packed = torch.nn.utils.rnn.pack_padded_sequence(self.emb(ids), lengths,
                                                         batch_first=True, enforce_sorted=False)
        _, hidden = self.rnn(packed)
        return self.head(hidden[-1]).squeeze(-1)


def test_a_step_shaped_by_tensor_values_is_traced_for_real_when_memory_allows(
        monkeypatch) -> None:  # noqa: ANN001
    from predictor import describe as describing

    torch.manual_seed(0)
    model = PackedSequence()
    inputs = (torch.randint(0, 3_000, (64, 20)), torch.randint(1, 21, (64,)))
    opt = torch.optim.Adam(model.parameters())
    ann = describe(model, inputs, opt)
    real = measure.trace_training(model, opt, lambda: model(*inputs).mean(), list(inputs), 64)
    want = dataset.measured_fields(real, 64)
    for k in ("saved_bytes", "backward_bytes", "step_bytes"):
        assert ann[k] == pytest.approx(want[k], rel=1e-6), k
    monkeypatch.setattr(describing, "_available_bytes", lambda: 1024)
    with pytest.raises(DescribeError, match="pack_padded_sequence.*GiB is available"):
        describe(model, inputs, opt)


@torch.library.custom_op("sparse_test::hash_ids", mutates_args=())
def hash_ids(ids: torch.Tensor, rows: int) -> torch.Tensor:
    """An op of the user's own with no fake kernel: shape-only tensors cannot run it."""
    return (ids * 2_654_435_761) % rows


class HashedIds(torch.nn.Module):
    def __init__(self, device: str = "cpu") -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(5_000, 16, device=device)
        self.head = torch.nn.Linear(16, 1, device=device)

    def forward(self, ids):  # noqa: ANN001, ANN201
        return self.head(self.emb(hash_ids(ids, 5_000)).mean(1))


def test_a_forward_fake_tensors_cannot_run_is_traced_for_real() -> None:
    torch.manual_seed(0)
    model = HashedIds()
    ids = torch.randint(0, 10**9, (64, 8))
    opt = torch.optim.Adam(model.parameters())
    ann = describe(model, ids, opt)
    real = measure.trace_training(model, opt, lambda: model(ids).mean(), [ids], 64)
    want = dataset.measured_fields(real, 64)
    for k in ("saved_bytes", "backward_bytes", "step_bytes", "state_bytes"):
        assert ann[k] == pytest.approx(want[k], rel=1e-6), k
    meta = HashedIds("meta")
    with pytest.raises(DescribeError, match="cannot run its forward.*fake impl.*meta device"):
        describe(meta, ids, torch.optim.Adam(meta.parameters()))


def test_a_model_built_on_the_meta_device_is_described_as_on_the_cpu() -> None:
    def build(device: str) -> tuple:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.EmbeddingBag(20_000, 16, mode="sum", device=device),
                                    torch.nn.Linear(16, 8, device=device), torch.nn.ReLU(),
                                    torch.nn.Linear(8, 1, device=device))
        return model, torch.optim.Adagrad(model.parameters())

    ids = torch.randint(0, 20_000, (64, 3))
    on_cpu, on_meta = (describe(m, ids, opt) for m, opt in (build("cpu"), build("meta")))
    assert on_meta == on_cpu
    emb = torch.nn.EmbeddingBag(20_000, 16, mode="sum", sparse=True, device="meta")
    with pytest.raises(DescribeError, match="sparse gradients.*meta device"):
        describe(emb, ids, torch.optim.SGD(emb.parameters(), lr=0.1))


def test_mixed_precision_is_traced_under_autocast_as_a_training_loop_runs_it() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(4_000, 64), torch.nn.Linear(64, 256),
                                torch.nn.GELU(), torch.nn.Linear(256, 64))
    ids = torch.randint(0, 4_000, (32, 16))
    opt = torch.optim.AdamW(model.parameters())
    full = describe(model, ids, opt)
    bf16 = describe(model, ids, opt, autocast=torch.bfloat16)
    assert describe(model, ids, opt, autocast="bf16") == bf16
    assert bf16["saved_bytes"] < 0.75 * full["saved_bytes"]  # half-width activations kept
    assert bf16["dtype"] == full["dtype"] == "fp32"  # the parameters stay fp32

    def step() -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return model(ids).float().mean()

    real = dataset.measured_fields(measure.trace_training(model, opt, step, [ids], 32), 32)
    for k in ("saved_bytes", "backward_bytes", "step_bytes"):
        assert bf16[k] == pytest.approx(real[k], rel=1e-6), k
    assert describe(model, ids, opt, autocast="fp16")["saved_bytes"] < full["saved_bytes"]
    with pytest.raises(DescribeError, match="autocast"):
        describe(model, ids, opt, autocast="fp8")


def test_validate_tracer_sets_describe_against_a_real_step(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "seqmodel.py").write_text(textwrap.dedent("""
        import torch

        class Seq(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = torch.nn.Embedding(2000, 16)
                self.rnn = torch.nn.LSTM(16, 24, batch_first=True)
                self.head = torch.nn.Linear(24, 1)

            def forward(self, ids):
                return self.head(self.rnn(self.emb(ids))[0][:, -1]).squeeze(-1)

        def make():
            model = Seq()
            return model, (torch.randint(0, 2000, (64, 20)),), torch.optim.Adam(model.parameters())

        def broken():
            return 42
    """))
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, ["validate-tracer", "seqmodel:make"])
    assert r.exit_code == 0, r.output
    row = next(line for line in r.output.splitlines() if line.startswith("seqmodel:make"))
    described, traced, allocator = (float(x) for x in row.split()[1:4])
    assert described == pytest.approx(traced, rel=1e-3) and allocator >= traced
    r = CliRunner().invoke(main, ["validate-tracer", "seqmodel:make", "seqmodel:broken",
                                  "nomodule:make"])
    assert r.exit_code != 0 and "must return" in r.output and "cannot import" in r.output
    assert "2 of 3 could not be checked" in r.output


@pytest.mark.slow
def test_architectures_outside_the_training_families_are_described_as_traced() -> None:
    from predictor.generate import outside
    from predictor.validate import check

    for name, factory in outside.ARCHITECTURES.items():
        torch.manual_seed(0)
        c = check(*factory(32))
        assert c.train_mib == pytest.approx(c.traced_mib, rel=1e-3), name
        assert c.allocator_mib >= 0.98 * c.traced_mib, name


class TiedTokens(torch.nn.Module):
    """An encoder's and a decoder's token tables tied to one matrix, which also scores the
    output (as T5 ties them), and a forward that takes the targets by keyword."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = torch.nn.Embedding(8_000, 32)
        self.dec = torch.nn.Embedding(8_000, 32)
        self.dec.weight = self.enc.weight
        self.mix = torch.nn.Linear(32, 32)

    def forward(self, source, *, targets):  # noqa: ANN001, ANN201
        hidden = self.mix(self.enc(source).mean(1, keepdim=True) + self.dec(targets))
        logits = hidden @ self.enc.weight.t()
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


def test_a_table_shared_by_two_modules_is_one_table_and_keywords_reach_the_forward() -> None:
    from predictor.validate import check

    torch.manual_seed(0)
    model = TiedTokens()
    source, targets = torch.randint(0, 8_000, (32, 20)), torch.randint(0, 8_000, (32, 6))
    opt = torch.optim.Adam(model.parameters())
    ann = describe(model, (source,), opt, lambda loss, *_: loss,
                   example_kwargs={"targets": targets})
    assert ann["tables"] == [{"rows": 8_000, "dim": 32, "pooling": 26.0, "count": 1}]
    assert ann["params"] == 8_000 * 32 + 32 * 32 + 32
    c = check(model, (source,), opt, lambda loss, *_: loss, {"targets": targets})
    assert c.train_mib == pytest.approx(c.traced_mib, rel=0.01)
    with pytest.raises(DescribeError, match="scalar loss, got NoneType"):
        describe(model, (source,), opt, lambda loss, *_: None,
                 example_kwargs={"targets": targets})
    with pytest.raises(DescribeError, match="example_kwargs"):
        describe(model, (source,), opt, example_kwargs=[targets])


class Checkpointed(torch.nn.Module):
    """Token embeddings and MLP blocks under activation checkpointing (recomputed in the
    backward, as Hugging Face's gradient_checkpointing_enable() runs them)."""

    def __init__(self, checkpointing: bool) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(4_000, 64)
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(),
                                torch.nn.Linear(256, 64)) for _ in range(4))
        self.checkpointing = checkpointing

    def forward(self, ids):  # noqa: ANN001, ANN201
        x = self.emb(ids)
        for block in self.blocks:
            x = (torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
                 if self.checkpointing else block(x)) + x
        return x.mean()


def test_activation_checkpointing_is_measured_as_it_trains() -> None:
    # the FLOP counter's module tracking kept recomputed tensors alive: it must not run
    # while memory is measured
    from predictor.validate import check

    ids = torch.randint(0, 4_000, (64, 64))
    saved = {}
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = Checkpointed(checkpointing)
        c = check(model, ids, torch.optim.AdamW(model.parameters()))
        assert c.train_mib == pytest.approx(c.allocator_mib, rel=0.01), checkpointing
        assert c.traced_mib == pytest.approx(c.allocator_mib, rel=0.01), checkpointing
        saved[checkpointing] = describe(model, ids, torch.optim.AdamW(model.parameters())
                                        )["saved_bytes"]
    assert saved[True] < 0.5 * saved[False]


class FineTuned(torch.nn.Module):
    """Users' table trained, the pretrained item table frozen."""

    def __init__(self) -> None:
        super().__init__()
        self.items = torch.nn.Embedding(60_000, 32)
        self.items.weight.requires_grad_(False)
        self.users = torch.nn.Embedding(2_000, 32)
        self.mlp = torch.nn.Linear(64, 1)

    def forward(self, users, items):  # noqa: ANN001, ANN201
        return self.mlp(torch.cat([self.users(users), self.items(items)], 1))


def test_frozen_parameters_are_booked_without_gradients() -> None:
    # a pretrained table fine-tuned around (requires_grad=False) has no gradient and no
    # optimizer state: booking one as for a trained table over-reserved the step by its size
    from predictor.validate import check

    torch.manual_seed(0)
    model = FineTuned()
    u, i = torch.randint(0, 2_000, (64,)), torch.randint(0, 60_000, (64,))
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad])
    ann = describe(model, (u, i), opt)
    assert ann["grad_bytes"] == 4 * (2_000 * 32 + 64 + 1)
    c = check(model, (u, i), opt)
    assert c.train_mib == pytest.approx(c.traced_mib, rel=1e-3)


class SparseBags(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bags = torch.nn.EmbeddingBag(50_000, 32, mode="sum", sparse=True)
        self.head = torch.nn.Linear(32, 1)

    def forward(self, ids):  # noqa: ANN001, ANN201
        return self.head(self.bags(ids))


def test_a_ddp_worker_is_described_with_what_its_sync_holds(tmp_path: Path) -> None:
    # DistributedDataParallel keeps buckets as large as the dense gradients for the whole run
    # (the gradients are copied into them, or are views of them) and gathers every worker's
    # sparse gradients to sum them: the allocator's peak of a real DDP step (one gloo
    # process) is not above the description, and at most one gradient copy below it
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from predictor import estimate
    from predictor.validate import check

    est = estimate.Estimator.load()
    torch.manual_seed(0)
    table = FineTuned()
    table.items.weight.requires_grad_(True)
    mlp = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(),
                              torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                              torch.nn.Linear(1024, 1))
    cases = [  # the optimizer step's peak, the backward's, sparse gradients
        (table, (torch.randint(0, 2_000, (64,)), torch.randint(0, 60_000, (64,))),
         torch.optim.Adam, 0.0),
        (mlp, (torch.randn(2048, 256),), torch.optim.Adam, 0.0),
        (SparseBags(), (torch.randint(0, 50_000, (1024, 20)),),
         lambda ps: torch.optim.SGD(ps, lr=0.1), 1024 * 20 * (32 * 4 + 8) / 2**20),
    ]
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0,
                            world_size=1)
    try:
        for model, inputs, make_opt, sparse_mib in cases:
            dense_mib = sum(p.nbytes for p in model.parameters()) / 2**20 if not sparse_mib \
                else sum(p.nbytes for p in model.head.parameters()) / 2**20
            for view in (False, True):
                ddp = DistributedDataParallel(model, gradient_as_bucket_view=view)
                opt = make_opt(list(ddp.parameters()))
                ann = describe(ddp, inputs, opt)
                assert ann["data_parallel_workers"] == 1
                assert ann.get("gradient_as_bucket_view", False) is view
                real = measure.trace_training(
                    ddp, opt, lambda m=ddp, x=inputs: m(*x).float().mean(), list(inputs),
                    len(inputs[0]), allocator=True)
                used = real["alloc_peak_bytes"] / 2**20
                booked = est.predict(features.parse_model(json.dumps(ann))).train_mib
                # gloo's gather of sparse gradients allocates on threads of its own, which
                # the allocator's events count as they come: up to one gradient of leeway
                assert used <= booked * 1.001 + sparse_mib, (type(model).__name__, view)
                assert booked <= used + dense_mib + sparse_mib, (type(model).__name__, view)
        # the optimizer step's peak with copies: exactly the buckets more than alone
        ddp = DistributedDataParallel(table)
        opt = torch.optim.Adam(ddp.parameters())
        ann = describe(ddp, cases[0][1], opt)
        alone = {k: v for k, v in ann.items() if k != "data_parallel_workers"}
        params_mib = sum(p.nbytes for p in table.parameters()) / 2**20
        assert (est.predict(features.parse_model(json.dumps(ann))).train_mib
                - est.predict(features.parse_model(json.dumps(alone))).train_mib) == (
            pytest.approx(params_mib, rel=1e-3))
        # validate-tracer sets one process's step (no sync) against its description
        c = check(ddp, cases[0][1], opt)
        assert c.train_mib == pytest.approx(c.traced_mib, rel=1e-3)
    finally:
        dist.destroy_process_group()
    # unwrapped, the model does not say; the argument does, and more workers gather more
    bags, ids = cases[2][0], cases[2][1]
    sgd = torch.optim.SGD(bags.parameters(), lr=0.1)
    assert "data_parallel_workers" not in describe(bags, ids, sgd)
    one, eight = (describe(bags, ids, sgd, data_parallel_workers=n) for n in (1, 8))
    assert eight["data_parallel_workers"] == 8
    more = (est.predict(features.parse_model(json.dumps(eight))).train_mib
            - est.predict(features.parse_model(json.dumps(one))).train_mib)
    assert more == pytest.approx(7 * cases[2][3], rel=0.05)
    # sharded by TorchRec over the workers: the shards' state, no sparse gradient
    sharded = describe(bags, ids, sgd, data_parallel_workers=8, embedding_sharding="row-wise")
    assert sharded["embedding_sharding"] == "row-wise" and not sharded.get("sparse_grad")
    spec = features.parse_model(json.dumps(sharded))
    assert est.predict(spec).train_mib < est.predict(
        features.parse_model(json.dumps(eight))).train_mib
    assert sharded["unpooled_lookups"] is False  # bags: one pooled vector per sample
    with pytest.raises(DescribeError, match="data_parallel_workers"):
        describe(bags, ids, sgd, embedding_sharding="row-wise")
    with pytest.raises(DescribeError, match="embedding_sharding"):
        describe(bags, ids, sgd, data_parallel_workers=2, embedding_sharding="diagonal")


class KeywordLookups(torch.nn.Module):
    """A sequence model whose table is called with ``input=``, as TorchRec calls its own."""

    def __init__(self) -> None:
        super().__init__()
        self.items = torch.nn.Embedding(10_000, 32)
        self.head = torch.nn.Linear(32, 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.items(input=ids).mean(1))


def test_tables_called_with_keywords_are_found_and_unpooled_when_sharded() -> None:
    model = KeywordLookups()
    ids = torch.randint(0, 10_000, (64, 20))
    opt = torch.optim.Adagrad(model.parameters())
    ann = describe(model, ids, opt, data_parallel_workers=2, embedding_sharding="table-wise")
    assert ann["tables"] == [{"rows": 10_000, "dim": 32, "pooling": 20.0, "count": 1}]
    assert ann["unpooled_lookups"] is True
    spec = features.parse_model(json.dumps(ann))
    assert features.derive(spec)["shards_mib"] == pytest.approx(10_000 * 32 * 4 * 2 / 2**20)


def test_a_model_torchrec_has_sharded_is_refused_with_what_to_describe() -> None:
    class DistributedModelParallel(torch.nn.Module):  # the name TorchRec's wrapper has
        def __init__(self) -> None:
            super().__init__()
            self.module = KeywordLookups()

    model = DistributedModelParallel()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(DescribeError, match="before DistributedModelParallel wraps it"):
        describe(model, torch.randint(0, 10_000, (8, 4)), opt)
