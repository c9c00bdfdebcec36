"""Allocator-level truth on the CPU: every allocation and free the CPU allocator made inside a
block, read from the PyTorch profiler's memory events (``profile_memory=True``).

Used to validate :class:`predictor.generate.measure.StepTracer` (``measure(...,
allocator=True)``, the tests, ``sparse-predictor validate-tracer``): the tracer follows
storages through the op stream, the allocator sees the bytes themselves, so an in-place update,
a view or an op that returns an existing storage cannot be miscounted by it. Allocations made
inside one kernel (workspaces, which the tracer cannot see) are included.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class AllocatorTrace:
    """``with AllocatorTrace() as a: ...``; then ``a.peak`` is the peak of bytes allocated
    inside the block above what was allocated when it started, ``a.events`` the raw
    (time ns, +allocated / -freed bytes) events in time order."""

    def __init__(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        self._prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        self.events: list[tuple[int, int]] = []
        self.peak = 0

    def __enter__(self) -> AllocatorTrace:
        self._prof.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        from torch._C._profiler import _EventType

        self._prof.__exit__(*exc)
        stack = list(self._prof.profiler.kineto_results.experimental_event_tree())
        while stack:
            node = stack.pop()
            if node.tag == _EventType.Allocation and str(node.extra_fields.device) == "cpu":
                self.events.append((node.start_time_ns, int(node.extra_fields.alloc_size)))
            stack.extend(node.children)
        self.events.sort()
        cur = 0
        for _, nbytes in self.events:
            cur += nbytes
            self.peak = max(self.peak, cur)


def allocator_peak(fn: Callable[[], Any]) -> int:
    """Peak of bytes allocated during ``fn()`` above what was allocated when it started."""
    with AllocatorTrace() as trace:
        fn()
    return trace.peak
