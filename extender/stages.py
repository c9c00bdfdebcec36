"""Where a request's time goes: seconds per stage (decode, ledger, kube, encode...), summed
in the request's own context so the HTTP layer can report them per verb.

Each request handler runs in its own asyncio task, so a ContextVar keeps concurrent requests
apart; outside a request (watches, expiry) nothing is recorded.
"""

from __future__ import annotations

import time
from contextvars import ContextVar

_current: ContextVar[dict[str, float] | None] = ContextVar("sparse_stages", default=None)


class recording:  # noqa: N801 - used as a function: ``with recording() as times:``
    """Collect the stages timed inside; ``as``: the dict they are summed into (a class: a
    generator-based context manager costs several times more, twice per cycle)."""

    __slots__ = ("times", "token")

    def __enter__(self) -> dict[str, float]:
        self.times: dict[str, float] = {}
        self.token = _current.set(self.times)
        return self.times

    def __exit__(self, *exc: object) -> None:
        _current.reset(self.token)


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
