"""Deadlines for many requests with one timer.

``asyncio.timeout(s)`` makes a ``Timeout`` and arms a loop timer when a request starts, and
cancels it when the request ends: two per scheduling cycle, for deadlines that almost never
fire, and both cost more than the deadline's purpose warrants on the request path. Here a
request notes its task and deadline; while any request is open, one tick every ``tick_s``
cancels the tasks past their deadline, and the block's exit turns that cancellation into
``TimeoutError`` as ``asyncio.timeout`` does (the task's cancel count taken back, a cancel from
elsewhere left a cancel). A request is cut at most ``tick_s`` after its deadline.
"""

from __future__ import annotations

import asyncio
from types import TracebackType

DEFAULT_TICK_S = 0.1


class Deadlines:
    def __init__(self, tick_s: float = DEFAULT_TICK_S) -> None:
        self.tick_s = tick_s
        self._open: dict[_Within, float] = {}  # blocks entered -> their loop deadline
        self._tick: asyncio.TimerHandle | None = None

    def within(self, seconds: float | None) -> _Within:
        """``async with deadlines.within(s)``: ``TimeoutError`` once the block has run ``s``
        seconds (up to ``tick_s`` more); None: no deadline."""
        return _Within(self, seconds)

    @property
    def open(self) -> int:
        """Requests with a deadline now."""
        return len(self._open)

    def _note(self, within: _Within, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        self._open[within] = loop.time() + seconds
        if self._tick is None:
            self._tick = loop.call_later(self.tick_s, self._check, loop)

    def _check(self, loop: asyncio.AbstractEventLoop) -> None:
        self._tick = None
        now = loop.time()
        for within, when in list(self._open.items()):
            if when <= now:
                del self._open[within]
                within.expire()
        if self._open:
            self._tick = loop.call_later(self.tick_s, self._check, loop)


class _Within:
    """``asyncio.Timeout``'s bookkeeping (3.11), with the deadline kept by ``Deadlines``."""

    __slots__ = ("cancelling", "deadlines", "expired", "seconds", "task")

    def __init__(self, deadlines: Deadlines, seconds: float | None) -> None:
        self.deadlines = deadlines
        self.seconds = seconds
        self.task: asyncio.Task | None = None
        self.expired = False
        self.cancelling = 0

    async def __aenter__(self) -> None:
        if self.seconds is None:
            return
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a deadline needs a task")
        self.task = task
        self.cancelling = task.cancelling()  # cancels asked before: not ours to take back
        self.deadlines._note(self, self.seconds)

    def expire(self) -> None:
        """Past the deadline: the block's task is cancelled (its exit says TimeoutError)."""
        assert self.task is not None
        self.expired = True
        self.task.cancel()

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> bool | None:
        task = self.task
        if task is None:
            return None
        self.deadlines._open.pop(self, None)
        # Ours was the only cancel since the block began: it is the deadline, not a cancel
        # from elsewhere (as asyncio.Timeout.__aexit__ decides).
        if (self.expired and task.uncancel() <= self.cancelling
                and exc_type is asyncio.CancelledError):
            raise TimeoutError from exc
        return None
