#!/usr/bin/env python3
"""What one worker of a TorchRec job with sharded embedding tables holds, on the CPU.

    python3 hack/torchrec-shards.py [--workers 2 4] [--sharding table_wise row_wise column_wise]
        [--optimizer rowwise_adagrad adagrad sgd] [--tables 8] [--rows 200000 | R1 R2 ...]
        [--dim 64] [--batch 2048] [--ids-per-sample 4 | P1 P2 ...] [--unpooled] [--pipeline]

Needs torch, fbgemm-gpu(-cpu) and torchrec of matching versions, in a venv of their own (the
project's code is not imported): torch 2.14.0, fbgemm-gpu-cpu 1.9.0 and torchrec 1.9.2 from
PyPI worked (torchrec's other dependencies: tensordict, torchmetrics==1.0.3, tqdm,
pyre-extensions). For each case it starts ``workers`` gloo processes that train a DLRM
(``torchrec.models.dlrm.DLRM``; with ``--unpooled`` a sequence model instead, its lookups kept
one vector per id by an ``EmbeddingCollection``) whose tables TorchRec's planner shards with
the given sharding type (row-wise, which TorchRec offers on GPUs only, through a sharder that
allows it on the CPU: the kernels are the same), the tables updated by FBGEMM's fused kernels
inside the backward (``apply_optimizer_in_backward``; FBGEMM's CPU kernels take row-wise
Adagrad, Adagrad and SGD) and the dense part by Adam under DDP, as TorchRec's examples train.
Each rank reads the CPU allocator's bytes (the profiler's memory events) from before the model
is built to the end of the third step and prints the steady step's peak (the third, once DDP's
buckets exist), the peak and the level at the end of its forward, backward and optimizer step,
its shards' bytes, and the job fields that describe the case (``job``: what the predictor is
given). One JSON line per rank and case on stdout, also appended to
``$OUT/torchrec-shards.jsonl`` when OUT is set; ``predictor/data/sharded-tables-cpu.jsonl``
holds those of the cases docs/predictor.md ("Sharded tables") lists.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

MIB = 2**20
# allocations of these odd sizes mark the steady step's start and end in the profiler's events
STEADY, FORWARD, BACKWARD, END = 777_001, 777_003, 777_005, 777_007
PHASES = {FORWARD: "forward", BACKWARD: "backward", END: "step"}


def _mark(nbytes: int) -> None:
    marker = torch.empty(nbytes, dtype=torch.uint8)
    del marker
OPTIMIZERS = ("rowwise_adagrad", "adagrad", "sgd")  # FBGEMM's CPU kernels


def _optimizer(name: str):
    import torchrec.optim as trec_optim

    return {"rowwise_adagrad": (trec_optim.RowWiseAdagrad, {"lr": 0.01}),
            "adagrad": (torch.optim.Adagrad, {"lr": 0.01}),
            "sgd": (torch.optim.SGD, {"lr": 0.01})}[name]


def _ids(case: dict) -> list[int]:
    """Ids each table looks up per sample (one value: every table)."""
    ids = case["ids_per_sample"]
    return list(ids) * (len(case["rows"]) if len(ids) == 1 else 1)


def _batch(case: dict, rank: int):
    from torchrec.datasets.utils import Batch
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    g = torch.Generator().manual_seed(1000 + rank)
    b, ids = case["batch"], _ids(case)
    lengths = torch.cat([torch.full((b,), p, dtype=torch.int32) for p in ids])
    values = torch.cat([torch.randint(0, rows, (b * p,), generator=g)
                        for rows, p in zip(case["rows"], ids, strict=True)])
    kjt = KeyedJaggedTensor.from_lengths_sync(
        keys=[f"f{i}" for i in range(len(ids))], values=values, lengths=lengths)
    dense = torch.randn(b, case["dense_in"], generator=g)
    labels = torch.randint(0, 2, (b,), generator=g).float()
    return Batch(dense_features=dense, sparse_features=kjt, labels=labels)


def _worker(rank: int, world: int, store: str, case: dict, out: str | None) -> None:
    from torch.profiler import ProfilerActivity, profile

    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with prof:
        shard_bytes, state_bytes, dense_params = _train(rank, world, case)
    events = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    from torch._C._profiler import _EventType

    while stack:
        node = stack.pop()
        if node.tag == _EventType.Allocation and str(node.extra_fields.device) == "cpu":
            events.append((node.start_time_ns, int(node.extra_fields.alloc_size)))
        stack.extend(node.children)
    events.sort()
    marks = {n: t for t, n in events if n in (STEADY, *PHASES)}
    cur = peak = start_level = 0
    phase_peak = dict.fromkeys(PHASES.values(), 0)
    phase_end = dict.fromkeys(PHASES.values(), 0)
    for t, nbytes in events:
        if t < marks[STEADY]:
            cur += nbytes
            start_level = cur
            continue
        if t > marks[END]:
            break
        cur += nbytes
        peak = max(peak, cur)
        # the phase this event is in: the first mark not passed yet
        phase = next(PHASES[m] for m in (FORWARD, BACKWARD, END) if t <= marks[m])
        phase_peak[phase] = max(phase_peak[phase], cur)
        phase_end[phase] = cur
    row = {**{k: v for k, v in case.items() if k != "rows"}, "tables": len(case["rows"]),
           "table_rows": case["rows"], "rank": rank, "workers": world,
           "shard_mib": round(shard_bytes / MIB, 2), "opt_state_mib": round(state_bytes / MIB, 2),
           "steady_start_mib": round(start_level / MIB, 2), "peak_mib": round(peak / MIB, 2),
           "phase_peak_mib": {k: round(v / MIB, 2) for k, v in phase_peak.items()},
           "phase_end_mib": {k: round(v / MIB, 2) for k, v in phase_end.items()},
           "job": job_fields(case, world, dense_params)}
    line = json.dumps(row)
    print(line, flush=True)
    if out:
        with open(os.path.join(out, "torchrec-shards.jsonl"), "a") as f:
            f.write(line + "\n")
    dist.destroy_process_group()


class SequenceModel(torch.nn.Module):
    """A sequence recommender's shape: each table's ids of a sample looked up one vector per
    id (TorchRec's EmbeddingCollection, unpooled), averaged over the sequence, and an MLP."""

    def __init__(self, collection: torch.nn.Module, dim: int, lengths: list[int]) -> None:
        super().__init__()
        self.collection, self.dim, self.lengths = collection, dim, lengths
        self.mlp = torch.nn.Sequential(torch.nn.Linear(len(lengths) * dim, 512),
                                       torch.nn.ReLU(), torch.nn.Linear(512, 256),
                                       torch.nn.ReLU(), torch.nn.Linear(256, 1))

    def forward(self, batch) -> tuple[torch.Tensor, None]:  # noqa: ANN001
        looked_up = self.collection(batch.sparse_features)
        x = torch.cat([looked_up[f"f{i}"].values().view(-1, n, self.dim).mean(1)
                       for i, n in enumerate(self.lengths)], dim=1)
        logits = self.mlp(x).squeeze(-1)
        return torch.nn.functional.binary_cross_entropy_with_logits(logits, batch.labels), None


def _pipelined_steps(dmp: torch.nn.Module, opt: object, batch: object) -> None:
    """Steps of TorchRec's ``TrainPipelineSparseDist`` (its examples' loop: the next batch's
    ids are exchanged while this one trains); the fourth is measured, its phases unmarked."""
    import itertools

    from torchrec.distributed.train_pipeline import TrainPipelineSparseDist

    pipeline = TrainPipelineSparseDist(dmp, opt, torch.device("cpu"))
    batches = itertools.repeat(batch)
    for step in range(4):
        if step == 3:
            dist.barrier()
            _mark(STEADY)
        pipeline.progress(batches)
    for mark in (FORWARD, BACKWARD, END):
        _mark(mark)


def _model(case: dict) -> tuple[torch.nn.Module, torch.nn.Module, list, list[torch.nn.Module]]:
    """(model, its embedding module, the table configs, the dense modules) of the case."""
    from torchrec import (
        EmbeddingBagCollection,
        EmbeddingBagConfig,
        EmbeddingCollection,
        EmbeddingConfig,
    )
    from torchrec.models.dlrm import DLRM, DLRMTrain

    dim, meta = case["dim"], torch.device("meta")
    if case.get("unpooled"):
        tables = [EmbeddingConfig(name=f"t{i}", embedding_dim=dim, num_embeddings=rows,
                                  feature_names=[f"f{i}"]) for i, rows in enumerate(case["rows"])]
        model = SequenceModel(EmbeddingCollection(tables=tables, device=meta), dim, _ids(case))
        return model, model.collection, tables, [model.mlp]
    tables = [EmbeddingBagConfig(name=f"t{i}", embedding_dim=dim, num_embeddings=rows,
                                 feature_names=[f"f{i}"]) for i, rows in enumerate(case["rows"])]
    model = DLRMTrain(DLRM(embedding_bag_collection=EmbeddingBagCollection(tables=tables,
                                                                           device=meta),
                           dense_in_features=case["dense_in"],
                           dense_arch_layer_sizes=[512, 256, dim],
                           over_arch_layer_sizes=[512, 256, 1]))
    return (model, model.model.sparse_arch, tables,
            [model.model.dense_arch, model.model.over_arch])


def _train(rank: int, world: int, case: dict) -> tuple[int, int, int]:
    from torchrec.distributed import DistributedModelParallel
    from torchrec.distributed.embedding import EmbeddingCollectionSharder
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
    from torchrec.distributed.planner.types import ParameterConstraints
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
    from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
    from torchrec.optim.optimizers import in_backward_optimizer_filter

    model, embedding, tables, dense = _model(case)
    cls, kw = _optimizer(case["optimizer"])
    apply_optimizer_in_backward(cls, embedding.parameters(), kw)
    constraints = {t.name: ParameterConstraints(sharding_types=[case["sharding"]],
                                                compute_kernels=["fused"]) for t in tables}
    planner = EmbeddingShardingPlanner(
        topology=Topology(world_size=world, compute_device="cpu"), constraints=constraints)

    class CpuSharder(EmbeddingBagCollectionSharder):
        """TorchRec offers row-wise sharding on GPUs only; its CPU kernels are the same."""

        def sharding_types(self, compute_device_type: str) -> list[str]:
            return [*super().sharding_types(compute_device_type), "row_wise"]

    sharders = [EmbeddingCollectionSharder() if case.get("unpooled") else CpuSharder()]
    plan = planner.collective_plan(model, sharders, dist.GroupMember.WORLD)
    dmp = DistributedModelParallel(model, device=torch.device("cpu"), plan=plan,
                                   sharders=sharders)
    dense_opt = KeyedOptimizerWrapper(dict(in_backward_optimizer_filter(dmp.named_parameters())),
                                      lambda ps: torch.optim.Adam(ps, lr=0.001))
    opt = CombinedOptimizer([dmp.fused_optimizer, dense_opt])
    shard_bytes = 0
    for t in dmp.state_dict().values():  # the local shards of the tables
        if hasattr(t, "local_shards"):
            shard_bytes += sum(s.tensor.numel() * s.tensor.element_size()
                               for s in t.local_shards())
    batch = _batch(case, rank)
    if case.get("pipeline"):
        _pipelined_steps(dmp, opt, batch)
    for step in range(0 if case.get("pipeline") else 3):
        if step == 2:
            dist.barrier()
            _mark(STEADY)
        loss, _ = dmp(batch)
        if step == 2:
            _mark(FORWARD)
        loss.backward()
        if step == 2:
            _mark(BACKWARD)
        opt.step()
        opt.zero_grad(set_to_none=True)
    if not case.get("pipeline"):
        _mark(END)
    state_bytes = 0
    for st in dmp.fused_optimizer.state.values():
        for v in (st.values() if isinstance(st, dict) else []):
            if hasattr(v, "local_shards"):
                state_bytes += sum(s.tensor.numel() * s.tensor.element_size()
                                   for s in v.local_shards())
            elif torch.is_tensor(v):
                state_bytes += v.numel() * v.element_size()
    dense_params = sum(p.numel() for m in dense for p in m.parameters())
    return shard_bytes, state_bytes, dense_params


def job_fields(case: dict, workers: int, dense_params: int) -> dict:
    """The RecommendDLJob fields of the case: MACs are the dense layers' (each weight once
    per sample) and DLRM's dot interaction's (features^2 x dim per sample)."""
    n, dim = len(case["rows"]), case["dim"]
    unpooled = bool(case.get("unpooled"))
    job = {"batchSize": case["batch"],
           "macs": dense_params + (0 if unpooled else (n + 1) ** 2 * dim),
           "params": dense_params + sum(case["rows"]) * dim, "vocabularySize": case["rows"],
           "embeddingDim": [dim], "idsPerSample": case["ids_per_sample"],
           "optimizer": case["optimizer"], "dataParallelWorkers": workers,
           "embeddingSharding": case["sharding"].replace("_", "-")}
    if unpooled:
        job["unpooledLookups"] = True
    return job


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--sharding", nargs="+", default=["table_wise", "row_wise"])
    ap.add_argument("--optimizer", nargs="+", default=["rowwise_adagrad"], choices=OPTIMIZERS)
    ap.add_argument("--tables", type=int, default=8)
    ap.add_argument("--rows", type=int, nargs="+", default=[200_000],
                    help="rows of each table (one value: every table)")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--ids-per-sample", type=int, nargs="+", default=[4],
                    help="ids each table looks up per sample (one value: every table)")
    ap.add_argument("--pipeline", action="store_true",
                    help="train with TorchRec's TrainPipelineSparseDist")
    ap.add_argument("--unpooled", action="store_true",
                    help="a sequence model: EmbeddingCollection, one vector per id")
    args = ap.parse_args()
    out = os.environ.get("OUT")
    if out:
        os.makedirs(out, exist_ok=True)
    for world in args.workers:
        for sharding in args.sharding:
            for optimizer in args.optimizer:
                case = {"sharding": sharding, "optimizer": optimizer, "dim": args.dim,
                        "batch": args.batch, "ids_per_sample": args.ids_per_sample,
                        "dense_in": 13, "unpooled": args.unpooled,
                        "pipeline": args.pipeline,
                        "rows": (args.rows * args.tables if len(args.rows) == 1
                                 else args.rows)}
                store = os.path.join(tempfile.mkdtemp(), "pg")
                mp.spawn(_worker, args=(world, store, case, out), nprocs=world, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
