"""In-process ledger: the embedded default. Atomic because no call awaits while it mutates."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from itertools import islice

from extender.errors import ReservationConflict
from extender.ledger import many, rules
from extender.ledger.rules import STATE_RESERVED, GpuCapacity, Reservation, Usage
from extender.ledger.store import Change

CHANGE_LOG = 10_000  # changes kept for readers that follow the ledger


class MemoryLedger:
    def __init__(self) -> None:
        self._reservations: dict[str, Reservation] = {}
        self._usage = Usage()
        self._version = 0
        self._log: deque[tuple[int, str, Reservation | None]] = deque(maxlen=CHANGE_LOG)

    def _changed(self, pod_uid: str, reservation: Reservation | None) -> int:
        self._version += 1
        self._log.append((self._version, pod_uid, reservation))
        return self._version

    async def reserve(
        self, reservation: Reservation, capacities: Mapping[str, GpuCapacity]
    ) -> int:
        existing = self._reservations.get(reservation.pod_uid)
        if existing is not None:
            if existing.same_booking(reservation):
                return self._version
            raise ReservationConflict(
                f"pod {reservation.pod_uid} already holds GPUs on {existing.node}"
            )
        rules.check_fits(self._usage, reservation, capacities)
        self._reservations[reservation.pod_uid] = reservation
        self._usage.add(reservation)
        return self._changed(reservation.pod_uid, reservation)

    async def reserve_many(
        self, reservations: Sequence[Reservation], capacities: Mapping[str, GpuCapacity],
        release: Iterable[str] = (),
    ) -> int:
        release = list(release)
        many.validate_many(reservations, release, capacities)
        existing = {r.pod_uid: self._reservations.get(r.pod_uid) for r in reservations}
        if many.already_booked(existing, reservations):
            return self._version
        usage = Usage(dict(self._usage.mem_mib), dict(self._usage.milli))
        for uid in release:
            if uid in self._reservations:
                usage.add(self._reservations[uid], -1)
        many.check_fits_many(usage, reservations, capacities)
        for uid in release:
            await self.release(uid)
        for r in reservations:
            self._reservations[r.pod_uid] = r
            self._usage.add(r)
            self._changed(r.pod_uid, r)
        return self._version

    async def confirm(self, pod_uid: str) -> Reservation | None:
        existing = self._reservations.get(pod_uid)
        if existing is None:
            return None
        if existing.state != rules.STATE_BOUND:
            existing = existing.bound()
            self._reservations[pod_uid] = existing
            self._changed(pod_uid, existing)
        return existing

    async def release(self, pod_uid: str) -> Reservation | None:
        existing = self._reservations.pop(pod_uid, None)
        if existing is not None:
            self._usage.add(existing, -1)
            self._changed(pod_uid, None)
        return existing

    async def get(self, pod_uid: str) -> Reservation | None:
        return self._reservations.get(pod_uid)

    async def snapshot(self) -> tuple[int, dict[str, Reservation]]:
        return self._version, dict(self._reservations)

    async def version(self) -> int:
        return self._version

    async def changes(self, since: int) -> tuple[int, list[Change]] | None:
        if since == self._version:
            return self._version, []
        if since > self._version or not self._log or self._log[0][0] > since + 1:
            return None
        start = since + 1 - self._log[0][0]  # versions in the log are consecutive
        return self._version, [(uid, r) for _, uid, r in islice(self._log, start, None)]

    async def expire(self, now: float) -> list[Reservation]:
        stale = [
            r
            for r in self._reservations.values()
            if r.state == STATE_RESERVED and r.expires_at is not None and r.expires_at <= now
        ]
        for r in stale:
            await self.release(r.pod_uid)
        return stale

    async def close(self) -> None:
        return None
