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


@contextmanager
def stage(name: str) -> Iterator[None]:
    times = _current.get()
    if times is None:
        yield
        return
    started = time.perf_counter()
    try:
        yield
    finally:
        times[name] = times.get(name, 0.0) + time.perf_counter() - started
