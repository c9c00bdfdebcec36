"""Is the ledger's store reachable? Drives ``/readyz``: 503 while it is not, 200 again once a
periodic ping succeeds (no restart needed). Verbs report failures at once; the ping heals."""

from __future__ import annotations

import asyncio
import logging
import time

from extender.errors import LedgerBusy, LedgerUnavailable

log = logging.getLogger("sparse.ledger.health")

PING_INTERVAL_S = 1.0


class LedgerHealth:
    def __init__(self) -> None:
        self.ok = True
        self.problem = ""
        self.down_since: float | None = None
        self.outages = 0

    def failed(self, exc: BaseException) -> None:
        if isinstance(exc, LedgerBusy):
            return  # loaded, not broken: the store answers
        if self.ok:
            log.warning("GPU ledger unreachable: %s", exc)
            self.outages += 1
            self.down_since = time.monotonic()
        self.ok = False
        self.problem = str(exc)

    def healed(self) -> None:
        if not self.ok:
            down = time.monotonic() - (self.down_since or time.monotonic())
            log.warning("GPU ledger reachable again after %.1f s", down)
        self.ok = True
        self.problem = ""
        self.down_since = None

    async def check(self, ledger: object) -> bool:
        ping = getattr(ledger, "ping", None)
        if ping is None:
            return True  # an in-process store is always there
        try:
            await ping()
        except LedgerUnavailable as exc:
            self.failed(exc)
            return False
        self.healed()
        return True

    async def run(self, ledger: object, interval_s: float = PING_INTERVAL_S) -> None:
        while True:
            await self.check(ledger)
            raise_if_cancelling()
            await asyncio.sleep(interval_s)


def raise_if_cancelling() -> None:
    """The Redis client can swallow a cancellation that lands while it times out a call; a
    loop that then sleeps again would hold up shutdown for good. Honour it here."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
