"""Admission to the node cache: TinyLFU's doorkeeper (Einziger, Friedman and Manes, "TinyLFU:
A Highly Efficient Cache Admission Policy", ACM ToS 2017), kept by the client.

Without it every miss is written into the node cache, and under Zipf ids most misses are rows
looked up once in a long while: each such fill evicts a row worth keeping (Redis' sampled LFU
gives a new key the starting counter 5, so the newcomers crowd the bottom of the cache until
they are sampled out). The doorkeeper admits a missed block only when it was looked up before
within the last ``window`` lookups, which is what an offline-optimal cache does with rows whose
next use is too far away (it bypasses them).

Two bitmaps (the current and the previous window; a bit per hashed block id) remember the last
one to two windows; when the current window has seen ``window`` lookups it becomes the previous
one and a new one starts empty. All vectorised: a batch is one hash, two gathers and one
scatter. The bitmaps live in the client's process (a 1 % cache of a 10^7-row table: 2 x 0.5
MB), so they cost the node cache no memory; false positives (two ids on one bit) only admit a
little more. While the node cache is not full the client admits everything (``cache.py``).
"""

from __future__ import annotations

import math
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing multiplier


class Doorkeeper:
    """``window``: lookups one bitmap covers; TinyLFU sizes it at ten times the cache's entries
    (``for_capacity``). Each bitmap has the next power of two above four bits per lookup of a
    window, so at most a quarter of its bits is set (false positives below 1 in 4)."""

    def __init__(self, window: int) -> None:
        if window < 1:
            raise ValueError("window must be >= 1")
        self.window = window
        bits = max(1 << 16, 1 << (4 * window - 1).bit_length())
        self.bits = bits
        self.shift = np.uint64(64 - (bits.bit_length() - 1))
        self._cur = np.zeros(bits // 8, dtype=np.uint8)
        self._prev = np.zeros(bits // 8, dtype=np.uint8)
        self._seen = 0
        self._lock = threading.Lock()

    @classmethod
    def for_capacity(cls, entries: int) -> Doorkeeper:
        return cls(10 * max(entries, 1))

    @property
    def nbytes(self) -> int:
        return self._cur.nbytes + self._prev.nbytes

    def _slots(self, table: str, blocks: np.ndarray) -> np.ndarray:
        salt = np.uint64(zlib.crc32(table.encode()))
        with np.errstate(over="ignore"):
            mixed = (blocks.astype(np.uint64) + (salt << np.uint64(32))) * GOLDEN
        return (mixed >> self.shift).astype(np.int64)

    def observe(self, table: str, blocks: np.ndarray) -> np.ndarray:
        """Record a batch's (unique) blocks; per block, whether it was looked up before within
        the window (admit it)."""
        slots = self._slots(table, np.asarray(blocks))
        byte, bit = slots >> 3, (1 << (slots & 7)).astype(np.uint8)
        with self._lock:
            before = ((self._cur[byte] | self._prev[byte]) & bit) != 0
            np.bitwise_or.at(self._cur, byte, bit)
            self._seen += len(slots)
            if self._seen >= self.window:
                self._prev, self._cur = self._cur, self._prev
                self._cur[:] = 0
                self._seen = 0
        return before


class Admission:
    """Which missed blocks a client writes into the node cache: every one while the cache has
    room (``used_memory`` below 95 % of ``maxmemory``, read at most every ``check_s``), then
    those its doorkeeper has seen before. The doorkeeper is sized from the cache's
    ``maxmemory`` over the bytes a block takes there (value plus Redis' per-key overhead)."""

    KEY_OVERHEAD = 80  # bytes Redis spends per key besides the value (dict entry, robj, sds)

    def __init__(self, cache: Any, check_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cache = cache
        self.check_s = check_s
        self.clock = clock
        self.door: Doorkeeper | None = None
        self.full = False
        self._checked = -math.inf
        self.refused = 0

    def _check(self, block_bytes: int) -> None:
        now = self.clock()
        if now < self._checked + self.check_s:
            return
        self._checked = now
        memory = self.cache.info("memory")
        cap, used = int(memory.get("maxmemory", 0)), int(memory.get("used_memory", 0))
        self.full = cap > 0 and used >= 0.95 * cap
        if cap > 0 and self.door is None:
            self.door = Doorkeeper.for_capacity(cap // (block_bytes + self.KEY_OVERHEAD))

    def fill_mask(self, table: str, blocks: np.ndarray, block_bytes: int,
                  missing: np.ndarray) -> np.ndarray:
        """Per block of the batch (all looked up, unique): write it into the cache? Only
        blocks in ``missing`` ever are."""
        self._check(block_bytes)
        if self.door is None:
            return missing
        seen = self.door.observe(table, blocks)
        if not self.full:
            return missing
        admit = missing & seen
        self.refused += int(missing.sum() - admit.sum())
        return admit
