"""The extender's view of the pair estimates the pair worker keeps in Redis.

``refresh()`` costs one GET of the estimates' version; only when the version moved does it read
the estimates (one HGETALL) and rebuild the matrix from the measured prior (``observed.blend``).

The pair worker writes every 30 s or so, so the extender need not ask on every request: the
application runs ``poll()`` in the background (every ``POLL_INTERVAL_S``) and the scheduler
then only ``take()``s the newest matrix, with no Redis round trip on the scheduling path.
Without a poller (tests, tools), the scheduler calls ``refresh()`` itself, once per view.
"""

from __future__ import annotations

import asyncio
import logging
import time

from extender.interference import InterferenceMatrix
from extender.interference.observed import PAIRS_KEY, VERSION_KEY, blend, parse_pairs

log = logging.getLogger("sparse.livepairs")

POLL_INTERVAL_S = 2.0  # the pair worker's own pace is tens of seconds
WARN_EVERY_S = 60.0  # while Redis stays unreachable, one warning this often


class LivePairs:
    def __init__(self, client, prior: InterferenceMatrix) -> None:  # noqa: ANN001 - redis
        self._r = client
        self.prior = prior
        self.version: bytes | None = None
        self.matrix = prior
        self.pairs = 0
        self.polling = False  # a background poll() keeps the matrix fresh
        self.failures = 0  # refreshes that could not reach Redis
        self._fresh: InterferenceMatrix | None = None  # polled, not yet taken
        self._warned_at: float | None = None

    async def refresh(self) -> InterferenceMatrix | None:
        """The new matrix when the estimates changed since the last call, else None. A Redis
        failure keeps the last matrix (placement must not fail because estimates are late)."""
        try:
            version = await self._r.get(VERSION_KEY)
            if version is None or version == self.version:
                self._recovered()
                return None
            fields = await self._r.hgetall(PAIRS_KEY)
        except Exception as exc:  # noqa: BLE001 - any transport error: keep placing
            self._unavailable(exc)
            return None
        self._recovered()
        estimates = parse_pairs(fields)
        self.version = version
        self.matrix = blend(self.prior, estimates)
        self.pairs = len(estimates)
        return self.matrix

    def take(self) -> InterferenceMatrix | None:
        """The matrix the poller read since the last call, if any (no I/O)."""
        fresh, self._fresh = self._fresh, None
        return fresh

    async def poll(self, interval_s: float = POLL_INTERVAL_S) -> None:
        """Forever: refresh every ``interval_s``; the scheduler ``take()``s what changed."""
        self.polling = True
        try:
            while True:
                matrix = await self.refresh()
                if matrix is not None:
                    self._fresh = matrix
                await asyncio.sleep(interval_s)
        finally:
            self.polling = False

    def _unavailable(self, exc: BaseException) -> None:
        self.failures += 1
        now = time.monotonic()
        if self._warned_at is None or now - self._warned_at >= WARN_EVERY_S:
            log.warning("pair estimates unavailable (%d failed reads so far), placing with the"
                        " last ones: %s", self.failures, exc)
            self._warned_at = now

    def _recovered(self) -> None:
        if self._warned_at is not None:
            log.warning("pair estimates readable again")
            self._warned_at = None
