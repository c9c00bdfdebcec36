"""The node cache's shared-memory tier: the node's hottest blocks in one read-only file per table
on the node's tmpfs, written by the DaemonSet's agent and mapped by every training process.

Why a second tier: a hit in the node-local Redis still moves every row through a Redis reply
that the client parses, so a 4,096-id batch costs about what the same read from a store on the
loopback costs; the local network is saved, the per-row work is not. A mapped snapshot turns a
hit into a ``searchsorted`` over the held block ids and a gather from shared pages, with no
copy per process and no round trip (the design of HugeCTR's hierarchical parameter server,
whose fastest tier is a memory-resident copy of the hottest rows in front of its Redis tier).

What is held is chosen by the engine that already ranks the rows: the node Redis'
``allkeys-lfu`` counters (``OBJECT FREQ``). The agent scans the cache incrementally (a bounded
number of keys per refresh, so Redis is never blocked), keeps the best candidates, and writes the
top blocks that fit ``budget_bytes``. Redis does not see the hits the tier serves, so a held
row's counter decays (``lfu-decay-time``) until, hours later, it falls out of the tier; a row
still hot climbs back within a refresh or two (its next reads go to Redis), a row no one reads
any more does not: the tier forgets dead rows without code of its own.

Snapshot file ``<dir>/<table>.tier`` (little-endian), immutable once written:

    header (64 bytes): magic, version, dtype code, dim, block_rows, blocks, table rows, ns
    blocks x int64 block ids, sorted
    blocks x block_rows x dim values (fp32 or fp16; a short last block is zero-padded)

It is written to a temporary file in the same folder and ``os.replace``d, so a reader sees the
old snapshot or the new one, never a torn one, and needs no lock; a mapping of a replaced file
stays valid (the kernel keeps the inode while it is mapped). Readers check the file's identity
at most every ``check_s`` seconds. Rows are as fresh as the last refresh: the same contract as
the node cache itself (read-only or asynchronously updated tables).
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from embed import layout
from embed.layout import TableMeta

log = logging.getLogger("sparse.embed.tier")

MAGIC = b"SPEMTIER"
VERSION = 1
HEADER = struct.Struct("<8sIIIIQQQ")  # magic, version, dtype, dim, block_rows, blocks, rows, ns
HEADER_BYTES = 64
DTYPE_CODES = {"float32": 0, "float16": 1}
SUFFIX = ".tier"


def _align(n: int) -> int:
    return -(-n // 64) * 64


def path_of(folder: str | Path, table: str) -> Path:
    return Path(folder) / f"{layout.check_table_name(table)}{SUFFIX}"


def write_snapshot(folder: str | Path, meta: TableMeta, blocks: np.ndarray,
                   values: list[bytes]) -> Path:
    """Write ``blocks`` (unique) with their raw values as the table's snapshot, atomically."""
    blocks = np.asarray(blocks, dtype=np.int64)
    order = np.argsort(blocks, kind="stable")
    blocks = blocks[order]
    size = meta.block_rows * meta.row_bytes
    header = HEADER.pack(MAGIC, VERSION, DTYPE_CODES[meta.dtype], meta.dim, meta.block_rows,
                         len(blocks), meta.rows, time.time_ns()).ljust(HEADER_BYTES, b"\0")
    ids = blocks.astype("<i8").tobytes()
    target = path_of(folder, meta.name)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(header)
        f.write(ids.ljust(_align(len(ids)), b"\0"))
        for i in order.tolist():
            v = values[i]
            f.write(v if len(v) == size else v.ljust(size, b"\0"))  # short last block
    os.replace(tmp, target)
    return target


class Snapshot:
    """One mapped snapshot: sorted block ids and their rows, read-only."""

    def __init__(self, path: str | Path) -> None:
        with open(path, "rb") as f:
            self.identity = os.fstat(f.fileno()).st_ino
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        (magic, version, code, self.dim, self.block_rows, count, self.rows,
         self.written_ns) = HEADER.unpack_from(self._map, 0)
        if magic != MAGIC or version != VERSION or code not in DTYPE_CODES.values():
            raise ValueError(f"{path}: not a tier snapshot of version {VERSION}")
        self.dtype = next(k for k, v in DTYPE_CODES.items() if v == code)
        np_dtype = layout.DTYPES[self.dtype]
        data_at = HEADER_BYTES + _align(8 * count)
        need = data_at + count * self.block_rows * self.dim * np_dtype.itemsize
        if len(self._map) < need:
            raise ValueError(f"{path}: truncated ({len(self._map)} of {need} bytes)")
        self.blocks = np.frombuffer(self._map, dtype="<i8", count=count, offset=HEADER_BYTES)
        self.values = np.frombuffer(self._map, dtype=np_dtype, count=count * self.block_rows
                                    * self.dim, offset=data_at).reshape(-1, self.dim)

    def fits(self, meta: TableMeta) -> bool:
        return (self.dim, self.block_rows, self.dtype, self.rows) == (
            meta.dim, meta.block_rows, meta.dtype, meta.rows)

    def __len__(self) -> int:
        return len(self.blocks)

    def split(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mask of ``ids`` held here, their rows as float32 in order), vectorised."""
        if not len(self.blocks) or not len(ids):
            return np.zeros(len(ids), dtype=bool), np.zeros((0, self.dim), dtype=np.float32)
        block = ids // self.block_rows if self.block_rows > 1 else ids
        pos = np.searchsorted(self.blocks, block)
        np.minimum(pos, len(self.blocks) - 1, out=pos)
        mask = self.blocks[pos] == block
        at = pos[mask]
        if self.block_rows > 1:
            at = at * self.block_rows + (ids[mask] % self.block_rows)
        return mask, self.values[at].astype(np.float32, copy=False)


class TierReader:
    """The client's view of the tier folder: per table the current snapshot, re-checked at most
    every ``check_s`` seconds; None where there is none or it does not fit the table."""

    def __init__(self, folder: str | Path, check_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.folder = Path(folder)
        self.check_s = check_s
        self.clock = clock
        self._held: dict[str, tuple[Snapshot | None, int, float]] = {}

    def get(self, meta: TableMeta) -> Snapshot | None:
        snap, ident, next_check = self._held.get(meta.name, (None, -1, -1.0))
        now = self.clock()
        if now < next_check:
            return snap
        path = path_of(self.folder, meta.name)
        try:
            current = path.stat().st_ino
        except OSError:
            current, snap = -1, None
        if current != ident and current != -1:
            try:
                snap = Snapshot(path)
                if not snap.fits(meta):
                    log.warning("tier snapshot %s does not match table %s; ignored", path,
                                meta.name)
                    snap = None
            except (OSError, ValueError) as exc:
                log.warning("cannot map tier snapshot %s: %s", path, exc)
                snap = None
        self._held[meta.name] = (snap, current, now + self.check_s)
        return snap


def _block_of(key: bytes) -> int:
    return int(key[key.rfind(b":") + 1:])


class TierBuilder:
    """The agent's side: choose the hottest blocks by the node Redis' LFU counters and write
    them as snapshots. ``refresh()`` is one bounded step (call it every few seconds): it scans
    at most ``scan_keys`` new keys and asks ``OBJECT FREQ`` of those and of as many held ones
    (in turn), so a large cache or tier is covered over several refreshes, never in one; rows
    kept from the last snapshot are copied from it, only newcomers are read (``MGET``; Redis
    counts that as one access, a little hysteresis that keeps the tier from flapping)."""

    def __init__(self, cache: Any, meta_of: Callable[[str], TableMeta], folder: str | Path,
                 budget_bytes: int, scan_keys: int = 200_000, batch: int = 2000) -> None:
        self.cache = cache
        self.meta_of = meta_of
        self.folder = Path(folder)
        self.budget_bytes = budget_bytes
        self.scan_keys = scan_keys
        self.batch = batch
        self._cursor = 0
        self._known: dict[bytes, tuple[int, str]] = {}  # key -> (LFU counter, table)
        self._turn = 0  # where the next re-read of held keys' counters starts
        self._metas: dict[str, TableMeta | None] = {}
        self.held: dict[str, int] = {}  # table -> blocks in its snapshot
        for stale in self.folder.glob(f".*{SUFFIX}.*.tmp"):  # a write cut short by a crash
            with contextlib.suppress(OSError):
                stale.unlink()

    def _meta(self, table: str) -> TableMeta | None:
        if table not in self._metas:
            try:
                self._metas[table] = self.meta_of(table)
            except (KeyError, ValueError):
                self._metas[table] = None
        return self._metas[table]

    def _freqs(self, keys: list[bytes]) -> list[int]:
        out: list[int] = []
        for i in range(0, len(keys), self.batch):
            pipe = self.cache.pipeline(transaction=False)
            for k in keys[i:i + self.batch]:
                pipe.object("freq", k)
            out.extend(f if isinstance(f, int) else -1
                       for f in pipe.execute(raise_on_error=False))
        return out

    def _scan(self) -> list[bytes]:
        fresh: list[bytes] = []
        seen = 0
        while seen < self.scan_keys:
            self._cursor, keys = self.cache.scan(self._cursor, match=f"{layout.PREFIX}{{*",
                                                 count=self.batch)
            fresh.extend(k for k in keys if k not in self._known and not k.endswith(b":meta"))
            seen += max(len(keys), 1)
            if self._cursor == 0:
                break
        return fresh

    def _probe(self) -> None:
        """Update the LFU counters of newly scanned keys and of a turn of known ones."""
        fresh = self._scan()
        known = list(self._known)
        if known:
            self._turn %= len(known)
            turn = known[self._turn:self._turn + self.scan_keys]
            self._turn += len(turn)
        else:
            turn = []
        probe = fresh + turn
        for key, freq in zip(probe, self._freqs(probe), strict=True):
            if freq >= 0:
                table = self._known[key][1] if key in self._known else layout.table_of_key(key)
                if table is not None and self._meta(table) is not None:
                    self._known[key] = (freq, table)
            elif key in self._known:  # evicted from Redis: its counter is not known any more
                self._known[key] = (0, self._known[key][1])

    def _read(self, meta: TableMeta, keys: list[bytes]) -> tuple[np.ndarray, list[bytes]]:
        """Blocks and raw values: from the current snapshot where it holds them, else MGET."""
        blocks = np.array([_block_of(k) for k in keys], dtype=np.int64)
        values: list[bytes | None] = [None] * len(keys)
        old = None
        with contextlib.suppress(OSError, ValueError):
            old = Snapshot(path_of(self.folder, meta.name))
        if old is not None and old.fits(meta) and len(old):
            pos = np.minimum(np.searchsorted(old.blocks, blocks), len(old) - 1)
            have = old.blocks[pos] == blocks
            rows = old.values.reshape(len(old), -1)
            for i in np.flatnonzero(have).tolist():
                values[i] = rows[pos[i]].tobytes()
        need = [i for i, v in enumerate(values) if v is None]
        for lo in range(0, len(need), 8 * self.batch):
            part = need[lo:lo + 8 * self.batch]
            for i, v in zip(part, self.cache.mget([keys[i] for i in part]), strict=True):
                values[i] = v
        got = [i for i, v in enumerate(values) if v is not None]
        return blocks[got], [values[i] for i in got]

    def refresh(self) -> dict[str, int]:
        """Scan on, rank by LFU counter, write what fits the budget; blocks per table."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self._probe()
        keys = list(self._known)
        freq = np.fromiter((v[0] for v in self._known.values()), dtype=np.int64,
                           count=len(keys))
        size = np.fromiter((self._meta(v[1]).block_rows * self._meta(v[1]).row_bytes
                            for v in self._known.values()), dtype=np.int64, count=len(keys))
        order = np.argsort(-freq, kind="stable")
        fits = np.cumsum(size[order]) <= self.budget_bytes
        chosen_idx = order[fits]
        chosen: dict[str, list[bytes]] = {}
        for i in chosen_idx.tolist():
            chosen.setdefault(self._known[keys[i]][1], []).append(keys[i])
        # Forget what did not make it (it re-earns a place when the scan meets it again).
        self._known = {k: self._known[k] for ks in chosen.values() for k in ks}
        held = {}
        for table, tkeys in chosen.items():
            meta = self._meta(table)
            blocks, values = self._read(meta, tkeys)
            write_snapshot(self.folder, meta, blocks, values)
            held[table] = len(blocks)
        for table in set(self.held) - set(held):
            with contextlib.suppress(OSError):
                path_of(self.folder, table).unlink()
        self.held = held
        return held
