"""Where a request's time goes: seconds per stage (decode, ledger, kube, encode...), summed
in the request's own context so the HTTP layer can report them per verb.

Each request handler runs in its own asyncio task, so a ContextVar keeps concurrent requests
apart; outside a request (watches, expiry) nothing is recorded.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_current: ContextVar[dict[str, float] | None] = ContextVar("sparse_stages", default=None)


@contextmanager
def recording() -> Iterator[dict[str, float]]:
    """Collect the stages timed inside; yields the dict they are summed into."""
    times: dict[str, float] = {}
    token = _current.set(times)
    try:
        yield times
    finally:
        _current.reset(token)


class stage:  # noqa: N801 - used as a function: ``with stage("decode"):``
    """Time the block into the current request's stages (a class: a generator-based context
    manager costs about twice as much, and a request times a dozen blocks)."""

    __slots__ = ("name", "times", "started")

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> None:
        self.times = _current.get()
        self.started = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        times = self.times
        if times is not None:
            times[self.name] = times.get(self.name, 0.0) + time.perf_counter() - self.started
