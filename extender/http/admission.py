"""Bounded in-flight work per replica: a request waits for a slot, briefly, then is turned away
with the verb's own ``Error`` answer (the scheduler retries) instead of piling up."""

from __future__ import annotations

import asyncio

from extender import stages
from extender.errors import Overloaded

# The scheduler gives a call 5 s (httpTimeout) in all: waiting longer than this for a slot
# would leave too little for the work itself.
DEFAULT_MAX_IN_FLIGHT = 64
DEFAULT_QUEUE_TIMEOUT_S = 2.0


class BodyHold:
    """The body bytes one request holds; ``take`` turns the request away (the verb's Error)
    rather than pass the replica's budget."""

    __slots__ = ("budget", "held")

    def __init__(self, budget: BodyBudget) -> None:
        self.budget = budget
        self.held = 0

    def __enter__(self) -> BodyHold:
        return self

    def __exit__(self, *exc: object) -> None:
        self.budget.used -= self.held

    def take(self, n: int) -> None:
        if self.budget.used + n > self.budget.total:
            raise Overloaded(
                f"extender overloaded: request bodies in memory would pass"
                f" {self.budget.total // (1024 * 1024)} MiB; retry")
        self.budget.used += n
        self.held += n


class BodyBudget:
    """Bytes of request bodies held at once over all requests, so that concurrent big bodies
    or gzip bombs cannot add up past it (each is also bounded by the body limit)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0

    def hold(self) -> BodyHold:
        """``with budget.hold() as hold``: what the request took is given back at the end
        (a class, not a generator: two of these per scheduling cycle)."""
        return BodyHold(self)


class Admission:
    def __init__(self, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                 queue_timeout_s: float = DEFAULT_QUEUE_TIMEOUT_S,
                 body_budget_bytes: int = 256 * 1024 * 1024) -> None:
        self.max_in_flight = max_in_flight
        self.queue_timeout_s = queue_timeout_s
        self.bodies = BodyBudget(body_budget_bytes)
        self._slots = asyncio.Semaphore(max_in_flight)
        self.in_flight = 0
        self.waiting = 0

    def slot(self) -> _Slot:
        """``async with admission.slot()``: a slot for the request's lifetime (a class, not
        a generator: two of these per scheduling cycle)."""
        return _Slot(self)

    async def _acquire(self) -> None:
        self.waiting += 1
        try:
            with stages.stage("admission"):
                if self._slots.locked():  # wait_for costs a task: only when there is a queue
                    await asyncio.wait_for(self._slots.acquire(), self.queue_timeout_s)
                else:
                    await self._slots.acquire()  # a free slot: returns at once
        except TimeoutError as exc:
            raise Overloaded(
                f"extender overloaded: {self.in_flight} requests in flight, none finished"
                f" within {self.queue_timeout_s:g} s; retry") from exc
        finally:
            self.waiting -= 1
        self.in_flight += 1

    def _release(self) -> None:
        self.in_flight -= 1
        self._slots.release()


class _Slot:
    __slots__ = ("admission",)

    def __init__(self, admission: Admission) -> None:
        self.admission = admission

    async def __aenter__(self) -> None:
        await self.admission._acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.admission._release()
