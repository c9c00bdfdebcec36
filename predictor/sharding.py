"""What one worker holds of embedding tables sharded over a job's workers, as TorchRec's
``DistributedModelParallel`` shards them. Pure.

A sharded table is not replicated: each worker keeps its shards and their optimizer state,
and FBGEMM's fused kernels update them inside the backward, so no table gradient is kept.
What a worker pays instead is the exchange of lookups: its shards are looked up for the
whole job's batch (every worker's samples), so it receives those samples' ids for its shards
(the input all-to-all) and holds the shards' pooled outputs for all of them (the output
all-to-all; row-wise, each table's partial sums before they are reduce-scattered), and the
gradients of those outputs in the backward. These are the sizes TorchRec's planner prices
per shard (``calculate_shard_storages``: the shard, its optimizer state, the input and output
sizes).

Which tables a worker gets is the planner's choice: largest first, each to the worker with the
least cost so far (:func:`_largest_pieces`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from predictor.schema import Table


@dataclass(frozen=True)
class WorkerShard:
    """One worker's part of the tables: ``params`` table elements and ``rows`` table rows
    (row-wise optimizer state keeps one value per row of each shard); per sample of the job's
    batch, the ``ids`` it receives and the pooled ``outputs`` it computes."""

    params: float
    rows: float
    ids: float
    outputs: float


# Buffers of the lookups a worker received (or of their gradient) that outlive their step, as
# the collectives that exchanged them happen to release them: measured workers trained step
# by step began their steps holding none, one or two of them; every worker is booked two.
# (TorchRec's pipelined loop held up to four of unpooled lookups: docs/predictor.md.)
RETAINED_EXCHANGES = 2

# TorchRec's planner splits a table column-wise into blocks of the smallest divisor of its
# width that is at least this and a multiple of 4 (the whole width when there is none)
MIN_COLUMN_BLOCK = 128


def column_block(dim: int) -> int:
    """Width of the column-wise shards TorchRec's planner cuts a ``dim``-wide table into."""
    return next((i for i in range(MIN_COLUMN_BLOCK, dim) if dim % i == 0 and i % 4 == 0), dim)


def _largest_pieces(pieces: list[tuple[int, int, float]], workers: int,
                    unpooled: bool) -> WorkerShard:
    """The fullest worker's part of the ``(rows, width, ids per sample)`` pieces (whole
    tables, or column blocks). TorchRec's planner takes the pieces largest first and gives
    each to the worker with the least cost so far: pieces that cost alike (the same width and
    ids per sample) are dealt out in turn, so the fullest worker holds the 1st, the
    (workers + 1)th, ... largest. Pieces that cost differently make the order the planner's
    cost model's: the worker is then booked the ⌈pieces / workers⌉ largest, each figure
    taken over its own largest ones."""
    k = math.ceil(len(pieces) / workers)
    alike = len({(d, p) for _, d, p in pieces}) <= 1

    def top(values: list[float]) -> float:
        ranked = sorted(values, reverse=True)
        return float(sum(ranked[::workers] if alike else ranked[:k]))

    return WorkerShard(params=top([r * d for r, d, _ in pieces]),
                       rows=top([r for r, _, _ in pieces]),
                       ids=top([p for _, _, p in pieces]),
                       outputs=top([d * (p if unpooled else 1) for _, d, p in pieces]))


def worker_shard(tables: Sequence[Table], sharding: str, workers: int,
                 unpooled: bool = False) -> WorkerShard:
    """The part of ``tables`` one of ``workers`` workers holds under ``sharding``
    (``table-wise``, ``row-wise`` or ``column-wise``), the worker that holds the most.
    ``unpooled``: the lookups are kept one vector per id (TorchRec's EmbeddingCollection), so
    a shard's output per sample is its ids times its width."""
    w = max(1, workers)
    each = [t for t in tables for _ in range(t.count)]
    if sharding == "table-wise":
        return _largest_pieces([(t.rows, t.dim, t.pooling) for t in each], w, unpooled)
    if sharding == "column-wise":
        # each table cut into column blocks, dealt out as whole tables are; a block looks up
        # every id of its table
        return _largest_pieces([(t.rows, column_block(t.dim), t.pooling) for t in each
                                for _ in range(t.dim // column_block(t.dim))], w, unpooled)
    if sharding == "row-wise":
        # rows split evenly, the first workers taking the remainder. Pooled, every worker
        # computes partial sums of every table for every sample of the job's batch; unpooled,
        # it sends back the vectors of the ids it holds, a share of them
        return WorkerShard(params=sum(math.ceil(t.rows / w) * t.dim for t in each),
                           rows=sum(math.ceil(t.rows / w) for t in each),
                           ids=sum(t.pooling for t in each) / w,
                           outputs=(sum(t.pooling * t.dim for t in each) / w if unpooled
                                    else sum(t.dim for t in each)))
    raise ValueError(f"unknown embedding sharding {sharding!r}")
