"""The store's key layout: Redis Cluster-ready, one key per block of rows. Pure (NumPy only).

    emb:{<table>}:meta          hash: rows, dim, dtype (float32|float16), block_rows, partitions
    emb:{<table>}:<block>       block_rows x dim little-endian values (the last block may be short)
    emb:{<table>/p<i>}:<block>  the same when the table is split into ``partitions`` (i = block
                                mod partitions), so one table can span several cluster shards

Everything between ``{`` and ``}`` is the Redis Cluster hash tag: all keys of a table (or of one
partition) share a slot, so one pipelined ``MGET`` fetches any set of its blocks without a
``CROSSSLOT`` error, on a single server and on a cluster alike. One row per block (the default)
keeps random lookups from over-fetching neighbours; larger blocks save per-key overhead (~60
bytes in Redis) on tables read in runs of ids.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PREFIX = "emb:"
DTYPES = {"float32": np.dtype("<f4"), "float16": np.dtype("<f2")}
MAX_TABLE_NAME = 200


def check_table_name(name: str) -> str:
    if not name or len(name) > MAX_TABLE_NAME or any(c in name for c in "{}/ \n\r\t"):
        raise ValueError(f"bad table name {name!r}: 1..{MAX_TABLE_NAME} characters, "
                         "no braces, slashes or whitespace")
    return name


@dataclass(frozen=True)
class TableMeta:
    name: str
    rows: int
    dim: int
    dtype: str = "float32"
    block_rows: int = 1
    partitions: int = 1

    def __post_init__(self) -> None:
        check_table_name(self.name)
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        if self.rows < 0 or self.dim < 1 or self.block_rows < 1 or self.partitions < 1:
            raise ValueError("rows >= 0, dim >= 1, block_rows >= 1, partitions >= 1")

    @property
    def np_dtype(self) -> np.dtype:
        return DTYPES[self.dtype]

    @property
    def row_bytes(self) -> int:
        return self.dim * self.np_dtype.itemsize

    @property
    def blocks(self) -> int:
        return -(-self.rows // self.block_rows)

    def to_hash(self) -> dict[str, str]:
        return {"rows": str(self.rows), "dim": str(self.dim), "dtype": self.dtype,
                "block_rows": str(self.block_rows), "partitions": str(self.partitions)}

    @classmethod
    def from_hash(cls, name: str, fields: dict) -> TableMeta:
        f = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes)
             else v) for k, v in fields.items()}
        return cls(name, int(f["rows"]), int(f["dim"]), f.get("dtype", "float32"),
                   int(f.get("block_rows", 1)), int(f.get("partitions", 1)))


def meta_key(table: str) -> str:
    return f"{PREFIX}{{{table}}}:meta"


def tag(meta: TableMeta, block: int) -> str:
    if meta.partitions == 1:
        return meta.name
    return f"{meta.name}/p{block % meta.partitions}"


def block_key(meta: TableMeta, block: int) -> str:
    return f"{PREFIX}{{{tag(meta, block)}}}:{block}"


def block_keys(meta: TableMeta, blocks: np.ndarray) -> list[str]:
    if meta.partitions == 1:
        head = f"{PREFIX}{{{meta.name}}}:"
        return [head + str(b) for b in blocks.tolist()]
    return [block_key(meta, b) for b in blocks.tolist()]


def table_of_key(key: str | bytes) -> str | None:
    """The table a block key belongs to (None for meta keys and foreign keys)."""
    if isinstance(key, bytes):
        key = key.decode(errors="replace")
    if not key.startswith(PREFIX + "{") or key.endswith(":meta"):
        return None
    inner = key[len(PREFIX) + 1:key.find("}")]
    return inner.split("/p", 1)[0] if inner else None


def check_ids(meta: TableMeta, ids: np.ndarray) -> np.ndarray:
    ids = np.asarray(ids).ravel()
    if ids.dtype.kind not in "iu":
        raise ValueError(f"ids must be integers, got {ids.dtype}")
    ids = ids.astype(np.int64, copy=False)
    if len(ids) and (ids.min() < 0 or ids.max() >= meta.rows):
        raise IndexError(f"ids out of range for table {meta.name!r} ({meta.rows} rows)")
    return ids


def pack(rows: np.ndarray, meta: TableMeta) -> bytes:
    return np.ascontiguousarray(rows, dtype=meta.np_dtype).tobytes()


def gather(meta: TableMeta, ids: np.ndarray, blocks: np.ndarray,
           values: list[bytes | None]) -> np.ndarray:
    """Rows for ``ids`` (as float32) from the raw values of ``blocks`` (sorted, unique)."""
    out = np.empty((len(ids), meta.dim), dtype=np.float32)
    if meta.block_rows == 1:
        if any(v is None for v in values):
            raise KeyError(f"table {meta.name!r}: missing blocks")
        flat = np.frombuffer(b"".join(values), dtype=meta.np_dtype).reshape(-1, meta.dim)
        out[:] = flat[np.searchsorted(blocks, ids)]
        return out
    pos = np.searchsorted(blocks, ids // meta.block_rows)
    within = ids % meta.block_rows
    decoded = [None if v is None else np.frombuffer(v, dtype=meta.np_dtype).reshape(-1, meta.dim)
               for v in values]
    for i, (p, w) in enumerate(zip(pos.tolist(), within.tolist(), strict=True)):
        block = decoded[p]
        if block is None:
            raise KeyError(f"table {meta.name!r}: missing block {int(blocks[p])}")
        out[i] = block[w]
    return out
