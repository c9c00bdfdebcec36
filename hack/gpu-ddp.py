#!/usr/bin/env python3
"""What a DistributedDataParallel worker holds beyond its own training step, on one GPU.

    python3 hack/gpu-ddp.py                 # on a lent GPU machine (NCCL, one process)
    python3 hack/gpu-ddp.py --device cpu    # here (gloo)

For three models (a table with dense gradients, the same table with sparse gradients, an MLP)
it runs training steps alone, under DDP and under DDP with gradient_as_bucket_view, and prints
the peak the allocator reached (CUDA: max_memory_allocated over the steady steps; CPU: the
project's tracer with the profiler's memory events, parameters and batch included) and, on
CUDA, the process memory NVML reports (the CUDA context and NCCL's own buffers included).

The predictor books DDP's buckets as the trainable dense gradients (the "grads" column) and,
in the backward, (workers + 1) x the sparse gradient (docs/predictor.md, "Data-parallel
workers"). NCCL has no sparse allreduce: a run DDP refuses is printed as skipped. Needs torch
(pynvml for the NVML column; msgspec for --device cpu). One line per run on stdout, also
written to $OUT/gpu-ddp.csv when OUT is set.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

MIB = 2**20


class TableModel(nn.Module):
    def __init__(self, sparse: bool, rows: int, dim: int = 64) -> None:
        super().__init__()
        self.table = nn.EmbeddingBag(rows, dim, mode="sum", sparse=sparse)
        self.mlp = nn.Sequential(nn.Linear(dim, 1024), nn.ReLU(), nn.Linear(1024, 1))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.table(ids))


def cases(rows: int) -> dict[str, tuple]:
    ids = torch.randint(0, rows, (4096, 20))
    mlp_in = torch.randn(4096, 2048)
    return {
        "table-dense": (lambda: TableModel(False, rows), ids, torch.optim.Adam),
        "table-sparse": (lambda: TableModel(True, rows), ids,
                         lambda ps: torch.optim.SGD(ps, lr=0.1)),
        "mlp": (lambda: nn.Sequential(nn.Linear(2048, 4096), nn.ReLU(), nn.Linear(4096, 4096),
                                      nn.ReLU(), nn.Linear(4096, 1)), mlp_in, torch.optim.Adam),
    }


def nvml_used_mib() -> float | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
            if p.pid == os.getpid() and p.usedGpuMemory:
                return p.usedGpuMemory / MIB
    except Exception:  # no NVML, or no per-process figure in this container
        return None
    return None


def run(device: str, build, batch: torch.Tensor, make_opt, wrap: str) -> dict[str, float]:
    torch.manual_seed(0)
    model = build().to(device)
    trained = model
    if wrap != "alone":
        trained = DistributedDataParallel(
            model, device_ids=[0] if device == "cuda" else None,
            gradient_as_bucket_view=(wrap == "ddp-bucket-view"))
    opt = make_opt([p for p in trained.parameters() if p.requires_grad])
    x = batch.to(device)
    table = getattr(model, "table", None)
    sparse = {id(table.weight)} if table is not None and table.sparse else set()
    grads = sum(p.numel() * p.element_size() for p in model.parameters()
                if p.requires_grad and id(p) not in sparse)  # what DDP's buckets copy

    if device == "cpu":  # the project's tracer and the profiler's memory events
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
        from predictor.generate import measure

        m = measure.trace_training(trained, opt, lambda: trained(x).float().mean(), [x],
                                   len(x), allocator=True)
        return {"peak_mib": round(m["alloc_peak_bytes"] / MIB, 1), "nvml_mib": None,
                "grads_mib": round(grads / MIB, 1)}
    for step in range(5):
        if step == 2:  # steady state: DDP rebuilds its buckets after the first iteration
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        trained(x).float().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return {"peak_mib": round(torch.cuda.max_memory_allocated() / MIB, 1),
            "nvml_mib": None if (used := nvml_used_mib()) is None else round(used, 1),
            "grads_mib": round(grads / MIB, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cuda", "cpu"],
                    default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--rows", type=int, default=200_000, help="rows of the table")
    args = ap.parse_args()
    store = tempfile.mkdtemp()
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo",
                            init_method=f"file://{store}/pg", rank=0, world_size=1)
    out = os.environ.get("OUT")
    writer = None
    if out:
        os.makedirs(out, exist_ok=True)
        f = open(os.path.join(out, "gpu-ddp.csv"), "w", newline="")  # noqa: SIM115
        writer = csv.writer(f)
        writer.writerow(["model", "wrap", "peak_mib", "nvml_mib", "grads_mib"])
    print(f"{'model':14s} {'wrap':16s} {'peak MiB':>9s} {'NVML MiB':>9s} {'grads MiB':>9s}")
    try:
        for name, (build, batch, make_opt) in cases(args.rows).items():
            for wrap in ("alone", "ddp", "ddp-bucket-view"):
                try:
                    r = run(args.device, build, batch, make_opt, wrap)
                except RuntimeError as exc:  # e.g. sparse gradients over NCCL
                    print(f"{name:14s} {wrap:16s} skipped: {str(exc).splitlines()[0]}")
                    continue
                if args.device == "cuda":
                    torch.cuda.empty_cache()
                nvml = "-" if r["nvml_mib"] is None else f"{r['nvml_mib']:.1f}"
                print(f"{name:14s} {wrap:16s} {r['peak_mib']:9.1f} {nvml:>9s}"
                      f" {r['grads_mib']:9.1f}", flush=True)
                if writer:
                    writer.writerow([name, wrap, r["peak_mib"], r["nvml_mib"], r["grads_mib"]])
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
