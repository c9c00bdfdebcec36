"""A model of PyTorch's CUDA caching allocator (pure: no torch, no CUDA), to turn a traced
step's ordered allocations and frees into what ``torch.cuda.max_memory_reserved()`` reports.

The rules are those of ``c10/cuda/CUDACachingAllocator.cpp`` with the default settings (no
``PYTORCH_CUDA_ALLOC_CONF``: no ``max_split_size_mb``, no power-of-two rounding, no
expandable segments, no garbage-collection threshold), one stream:

* a request is rounded up to a multiple of 512 B (at least 512 B); zero bytes allocate nothing;
* requests <= 1 MiB go to the *small* pool, larger ones to the *large* pool;
* a request is served from the smallest cached free block of its pool that fits (ties: lowest
  address); only when none fits is a new segment ``cudaMalloc``-ed: 2 MiB for a small
  request, 20 MiB for one under 10 MiB, else the request rounded up to 2 MiB;
* the block found (or the new segment) is split when what remains is >= 512 B (small pool)
  or > 1 MiB (large pool); the remainder stays in the pool, otherwise the whole block is
  handed out;
* a freed block is merged with free neighbours of its segment and cached; segments are never
  returned to the driver (no ``empty_cache``), so the reserved bytes only grow.

``reserved`` is the sum of segment sizes; :func:`replay` gives its peak for an event list.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

MIN_BLOCK = 512  # kMinBlockSize: every request is rounded up to a multiple of this
SMALL_SIZE = 1 << 20  # kSmallSize: requests up to this size use the small pool
SMALL_BUFFER = 2 << 20  # kSmallBuffer: segment size of the small pool
LARGE_BUFFER = 20 << 20  # kLargeBuffer: segment for large requests under MIN_LARGE_ALLOC
MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc
ROUND_LARGE = 2 << 20  # kRoundLarge: larger requests get a segment rounded up to this


def round_size(nbytes: int) -> int:
    """The block size a request of ``nbytes`` occupies."""
    if nbytes < MIN_BLOCK:
        return MIN_BLOCK
    return MIN_BLOCK * ((nbytes + MIN_BLOCK - 1) // MIN_BLOCK)


def segment_size(size: int) -> int:
    """The ``cudaMalloc`` size of a new segment for a rounded request of ``size``."""
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * ((size + ROUND_LARGE - 1) // ROUND_LARGE)


@dataclass(eq=False)
class _Block:
    addr: int
    size: int
    small: bool
    free: bool = True
    prev: _Block | None = None
    next: _Block | None = None


@dataclass
class CachingAllocator:
    """Blocks, segments and byte counters of one device's caching allocator."""

    allocated: int = 0  # bytes of blocks handed out (rounded sizes)
    reserved: int = 0  # bytes of all segments
    peak_allocated: int = 0
    peak_reserved: int = 0
    segments: int = 0
    _pools: dict[bool, list[tuple[int, int, _Block]]] = field(
        default_factory=lambda: {True: [], False: []})
    _live: dict[int, _Block] = field(default_factory=dict)
    _next_addr: int = 0

    def malloc(self, key: int, nbytes: int) -> None:
        """Allocate ``nbytes`` for ``key`` (an id the matching :meth:`free` uses)."""
        if nbytes <= 0:
            return
        if key in self._live:
            raise ValueError(f"allocation {key} is already live")
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        pool = self._pools[small]
        i = bisect.bisect_left(pool, (size, -1))
        if i < len(pool):
            block = pool.pop(i)[2]
        else:
            seg = segment_size(size)
            block = _Block(self._next_addr, seg, small)
            self._next_addr += seg
            self.reserved += seg
            self.segments += 1
            self.peak_reserved = max(self.peak_reserved, self.reserved)
        remaining = block.size - size
        if remaining >= MIN_BLOCK if small else remaining > SMALL_SIZE:
            rest = _Block(block.addr + size, remaining, small, prev=block, next=block.next)
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            self._cache(rest)
        block.free = False
        self._live[key] = block
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)

    def free(self, key: int) -> None:
        """Return ``key``'s block to its pool, merged with free neighbours (unknown keys —
        zero-byte allocations — are ignored)."""
        block = self._live.pop(key, None)
        if block is None:
            return
        self.allocated -= block.size
        block.free = True
        for nb in (block.prev, block.next):
            if nb is not None and nb.free:
                self._uncache(nb)
                if nb is block.prev:
                    nb.size += block.size
                    nb.next = block.next
                    if block.next is not None:
                        block.next.prev = nb
                    block = nb
                else:
                    block.size += nb.size
                    block.next = nb.next
                    if nb.next is not None:
                        nb.next.prev = block
        self._cache(block)

    def _cache(self, block: _Block) -> None:
        bisect.insort(self._pools[block.small], (block.size, block.addr, block))

    def _uncache(self, block: _Block) -> None:
        pool = self._pools[block.small]
        i = bisect.bisect_left(pool, (block.size, block.addr))
        if i >= len(pool) or pool[i][2] is not block:
            raise AssertionError("free block missing from its pool")
        pool.pop(i)


# An event: (key, nbytes) allocates, (key, -1) frees. Keys are unique per allocation.
Event = tuple[int, int]
FREE = -1


@dataclass(frozen=True)
class Replay:
    peak_reserved: int  # what ``torch.cuda.max_memory_reserved()`` would report
    peak_allocated: int  # ``max_memory_allocated()``: live blocks, 512-byte rounded
    segments: int
    steps: int  # steady-state steps replayed after the traced ones


def replay(events: Iterable[Event], steady: Sequence[Event] = (),
           max_repeats: int = 4) -> Replay:
    """Run ``events`` (everything up to and including the steady-state step) through a fresh
    allocator, then repeat the steady-state step's ``steady`` events (a suffix of ``events``)
    until the reserved bytes stop growing (at most ``max_repeats`` times): a GPU runs many
    steps and the cache keeps what the first ones left.

    In a repeat, a key allocated inside ``steady`` gets a fresh key; a free of a key from
    before ``steady`` (something the previous step left, such as last step's loss) frees
    the same-sized allocation the previous repeat left live, in order."""
    events = list(events)
    all_sizes = {k: nb for k, nb in events if nb != FREE}
    alloc = CachingAllocator()
    for key, nb in events:
        if nb == FREE:
            alloc.free(key)
        else:
            alloc.malloc(key, nb)
    steady = list(steady)
    inside = {k for k, nb in steady if nb != FREE}
    sizes = {k: nb for k, nb in steady if nb != FREE}
    # what the steady step leaves live for the next one, by size, in allocation order
    freed_inside = {k for k, nb in steady if nb == FREE and k in inside}
    leftover = [k for k, nb in steady if nb != FREE and k not in freed_inside]
    fresh = -1
    repeats = 0
    prev_map: dict[int, int] = {k: k for k in leftover}
    while steady and repeats < max_repeats:
        before = alloc.reserved
        mapping: dict[int, int] = {}
        carried: dict[int, list[int]] = {}
        for k in leftover:
            carried.setdefault(sizes[k], []).append(prev_map[k])
        for key, nb in steady:
            if nb != FREE:
                mapping[key] = fresh
                alloc.malloc(fresh, nb)
                fresh -= 1
            elif key in inside and key in mapping:
                alloc.free(mapping[key])
            else:  # left by the previous step: the same size the previous repeat left
                same = carried.get(all_sizes.get(key, 0), [])
                if same:
                    alloc.free(same.pop(0))
        prev_map = {k: mapping[k] for k in leftover}
        repeats += 1
        if alloc.reserved == before:
            break
    return Replay(alloc.peak_reserved, alloc.peak_allocated, alloc.segments, repeats)
