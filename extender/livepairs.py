"""The extender's view of the pair estimates the pair worker keeps in Redis.

``refresh()`` costs one GET of the estimates' version per request batch (the scheduler calls
it once per verb, never per node); only when the version moved does it read the estimates
(one HGETALL) and rebuild the matrix from the measured prior (``observed.blend``).
"""

from __future__ import annotations

import logging

from extender.interference import InterferenceMatrix
from extender.interference.observed import PAIRS_KEY, VERSION_KEY, blend, parse_pairs

log = logging.getLogger("sparse.livepairs")


class LivePairs:
    def __init__(self, client, prior: InterferenceMatrix) -> None:  # noqa: ANN001 - redis
        self._r = client
        self.prior = prior
        self.version: bytes | None = None
        self.matrix = prior
        self.pairs = 0

    async def refresh(self) -> InterferenceMatrix | None:
        """The new matrix when the estimates changed since the last call, else None. A Redis
        failure keeps the last matrix (placement must not fail because estimates are late)."""
        try:
            version = await self._r.get(VERSION_KEY)
            if version is None or version == self.version:
                return None
            fields = await self._r.hgetall(PAIRS_KEY)
        except Exception as exc:  # noqa: BLE001 - any transport error: keep placing
            log.warning("pair estimates unavailable: %s", exc)
            return None
        estimates = parse_pairs(fields)
        self.version = version
        self.matrix = blend(self.prior, estimates)
        self.pairs = len(estimates)
        return self.matrix
