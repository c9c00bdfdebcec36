"""Belady's MIN (IBM Syst. J. 5(2), 1966): on a miss, evict the entry whose next use is farthest
in the future; with bypass (an entry used later than everything cached is not admitted) it is the
offline optimum for equal-size entries. The next-use positions are computed vectorised (one
stable sort); the replay is one pass with a lazy max-heap."""

from __future__ import annotations

import heapq

import numpy as np


def next_use(trace: np.ndarray) -> np.ndarray:
    """For each position, the position of the next access of the same key (len(trace) = never)."""
    t = len(trace)
    order = np.lexsort((np.arange(t), trace))
    out = np.full(t, t, dtype=np.int64)
    same = trace[order[1:]] == trace[order[:-1]]
    out[order[:-1][same]] = order[1:][same]
    return out


def belady_hits(trace: np.ndarray, capacity: int, nxt: np.ndarray | None = None) -> np.ndarray:
    """Boolean per access: a hit under MIN with ``capacity`` entries."""
    t = len(trace)
    nxt = next_use(trace) if nxt is None else nxt
    hits = np.zeros(t, dtype=bool)
    cache: dict[int, int] = {}
    heap: list[tuple[int, int]] = []
    push, pop = heapq.heappush, heapq.heappop
    for i, (key, nu) in enumerate(zip(trace.tolist(), nxt.tolist(), strict=True)):
        if key in cache:
            hits[i] = True
            cache[key] = nu
            push(heap, (-nu, key))
            continue
        if nu >= t or capacity <= 0:
            continue  # never used again: not admitted
        if len(cache) < capacity:
            cache[key] = nu
            push(heap, (-nu, key))
            continue
        while cache.get(heap[0][1]) != -heap[0][0]:
            pop(heap)  # stale entry
        far, victim = heap[0]
        if -far > nu:
            pop(heap)
            del cache[victim]
            cache[key] = nu
            push(heap, (-nu, key))
        if len(heap) > 4 * capacity + 1024:  # drop stale entries now and then
            heap = [(-v, k) for k, v in cache.items()]
            heapq.heapify(heap)
    return hits
