"""In-process tier in front of the node cache: the most frequent rows of the recent batches,
pinned in a NumPy array (the hot-embedding idea of FAE, arXiv 2103.00686, and of HugeCTR's
in-process cache above its Redis tier).

It is not a second cache engine: nothing is evicted one row at a time. Every ``refresh_every``
batches the ids of the last ``window`` batches are counted (one ``np.unique``), the
``capacity`` most frequent become the pinned set, and their rows are read through the node cache
in one batch. A lookup is one ``searchsorted`` over the pinned ids, so a hit costs a memory copy.
Pinned rows are at most ``refresh_every`` batches old, which read-only (pretrained or
asynchronously updated) tables tolerate; leave the tier off (``capacity=0``) otherwise.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

import numpy as np


class HotRows:
    def __init__(self, capacity: int, window: int = 32, refresh_every: int = 16) -> None:
        if capacity < 0 or window < 1 or refresh_every < 1:
            raise ValueError("capacity >= 0, window >= 1, refresh_every >= 1")
        self.capacity = capacity
        self.refresh_every = refresh_every
        self._recent: deque[np.ndarray] = deque(maxlen=window)
        self._since = 0
        self._pinned: tuple[np.ndarray, np.ndarray] | None = None  # sorted ids, rows
        self._lock = threading.Lock()
        self.hits = 0
        self.lookups = 0

    @property
    def size(self) -> int:
        return 0 if self._pinned is None else len(self._pinned[0])

    def split(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(mask of ids pinned here, their rows in order) for a 1-D id array."""
        pinned = self._pinned
        self.lookups += len(ids)
        if pinned is None or not len(ids):
            return np.zeros(len(ids), dtype=bool), None
        keys, rows = pinned
        pos = np.minimum(np.searchsorted(keys, ids), len(keys) - 1)
        mask = keys[pos] == ids
        self.hits += int(mask.sum())
        return mask, rows[pos[mask]]

    def observe(self, ids: np.ndarray, fetch: Callable[[np.ndarray], np.ndarray]) -> None:
        """Record a batch; every ``refresh_every`` batches re-pin the most frequent ids."""
        if not self.capacity:
            return
        with self._lock:
            self._recent.append(np.asarray(ids, dtype=np.int64).ravel())
            self._since += 1
            if self._since < self.refresh_every:
                return
            self._since = 0
            window = np.concatenate(list(self._recent))
        uniq, counts = np.unique(window, return_counts=True)
        if len(uniq) > self.capacity:
            top = np.argpartition(counts, len(uniq) - self.capacity)[-self.capacity:]
            uniq = np.sort(uniq[top])
        self._pinned = (uniq, np.ascontiguousarray(fetch(uniq)))
