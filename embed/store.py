"""The embedding store on Redis (a server or a Redis Cluster): write tables, read rows.

Reads are one pipeline per lookup: the blocks a batch needs, grouped by hash tag, in ``MGET``s
of at most ``MAX_KEYS_PER_COMMAND`` keys (Redis' pipelining guide: keep batches near 10k).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import redis

from embed import layout
from embed.layout import TableMeta

MAX_KEYS_PER_COMMAND = 8192


def connect(url: str, **kwargs: Any) -> redis.Redis:
    """redis://, rediss:// or unix:// URL; ``redis+cluster://`` for a Redis Cluster."""
    if url.startswith("redis+cluster://"):
        from redis.cluster import RedisCluster

        return RedisCluster.from_url("redis://" + url.removeprefix("redis+cluster://"), **kwargs)
    return redis.Redis.from_url(url, **kwargs)


def group_by_tag(meta: TableMeta, blocks: np.ndarray) -> list[np.ndarray]:
    """Positions into ``blocks`` per hash tag, each cut to the command size limit."""
    if meta.partitions == 1:
        groups = [np.arange(len(blocks))]
    else:
        part = blocks % meta.partitions
        groups = [np.flatnonzero(part == p) for p in range(meta.partitions)]
    out = []
    for g in groups:
        out.extend(g[i:i + MAX_KEYS_PER_COMMAND] for i in range(0, len(g), MAX_KEYS_PER_COMMAND))
    return [g for g in out if len(g)]


def mget_blocks(client: Any, meta: TableMeta, blocks: np.ndarray,
                keys: list[str] | None = None) -> list[bytes | None]:
    """Raw values of ``blocks`` (None where absent), one round trip."""
    keys = keys if keys is not None else layout.block_keys(meta, blocks)
    groups = group_by_tag(meta, blocks)
    if len(groups) == 1 and len(groups[0]) == len(keys):
        return client.mget(keys) if keys else []
    pipe = client.pipeline(transaction=False)
    for g in groups:
        pipe.mget([keys[i] for i in g.tolist()])
    values: list[bytes | None] = [None] * len(keys)
    for g, got in zip(groups, pipe.execute(), strict=True):
        for i, v in zip(g.tolist(), got, strict=True):
            values[i] = v
    return values


class EmbeddingStore:
    def __init__(self, client: Any) -> None:
        self.client = client
        self._meta: dict[str, TableMeta] = {}

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> EmbeddingStore:
        return cls(connect(url, **kwargs))

    # --- metadata ---------------------------------------------------------------------------

    def meta(self, table: str) -> TableMeta:
        meta = self._meta.get(table)
        if meta is None:
            fields = self.client.hgetall(layout.meta_key(layout.check_table_name(table)))
            if not fields:
                raise KeyError(f"no embedding table {table!r} in the store")
            meta = self._meta[table] = TableMeta.from_hash(table, fields)
        return meta

    def tables(self) -> list[TableMeta]:
        names = set()
        for key in self.client.scan_iter(match=f"{layout.PREFIX}{{*}}:meta", count=1000):
            key = key.decode() if isinstance(key, bytes) else key
            names.add(key[len(layout.PREFIX) + 1:key.rfind("}")])
        return [self.meta(n) for n in sorted(names)]

    # --- writing ----------------------------------------------------------------------------

    def write_table(self, meta: TableMeta, chunks: Iterable[np.ndarray],
                    progress: Callable[[int], None] | None = None) -> None:
        """Write a table from row chunks (in order; any chunk sizes). Meta goes last, so a
        reader never sees a table half written as complete."""
        self.client.delete(layout.meta_key(meta.name))
        self._meta.pop(meta.name, None)
        pending = np.zeros((0, meta.dim), dtype=meta.np_dtype)
        block = 0
        written = 0
        for chunk in chunks:
            chunk = np.asarray(chunk, dtype=meta.np_dtype).reshape(-1, meta.dim)
            pending = np.concatenate([pending, chunk]) if len(pending) else chunk
            whole = len(pending) // meta.block_rows * meta.block_rows
            if whole:
                block = self._write_blocks(meta, block, pending[:whole])
                written += whole
                pending = pending[whole:]
                if progress:
                    progress(whole)
        if len(pending):
            block = self._write_blocks(meta, block, pending)
            written += len(pending)
            if progress:
                progress(len(pending))
        if written != meta.rows:
            raise ValueError(f"table {meta.name!r}: wrote {written} rows, meta says {meta.rows}")
        self.client.hset(layout.meta_key(meta.name), mapping=meta.to_hash())

    def _write_blocks(self, meta: TableMeta, first: int, rows: np.ndarray) -> int:
        n = -(-len(rows) // meta.block_rows)
        blocks = np.arange(first, first + n)
        keys = layout.block_keys(meta, blocks)
        raw = np.ascontiguousarray(rows, dtype=meta.np_dtype)
        size = meta.block_rows * meta.row_bytes
        data = raw.tobytes()
        pipe = self.client.pipeline(transaction=False)
        for g in group_by_tag(meta, blocks):
            pipe.mset({keys[i]: data[i * size:(i + 1) * size] for i in g.tolist()})
        pipe.execute()
        return first + n

    # --- reading ----------------------------------------------------------------------------

    def fetch(self, meta: TableMeta, blocks: np.ndarray) -> list[bytes | None]:
        return mget_blocks(self.client, meta, blocks)

    def lookup(self, table: str, ids: np.ndarray) -> np.ndarray:
        meta = self.meta(table)
        ids = layout.check_ids(meta, ids)
        blocks = np.unique(ids // meta.block_rows)
        return layout.gather(meta, ids, blocks, self.fetch(meta, blocks))
