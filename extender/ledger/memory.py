"""In-process ledger (``--store memory``; tests). Atomic because no call awaits while it
mutates; ``SqliteLedger`` adds durability through the ``_persist`` hook."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from itertools import islice

from extender.errors import ReservationConflict
from extender.ledger import many, rules
from extender.ledger.rules import STATE_RESERVED, GpuCapacity, Reservation, Usage
from extender.ledger.store import Applied, Change

CHANGE_LOG = 10_000  # changes kept for readers that follow the ledger


class MemoryLedger:
    def __init__(self) -> None:
        self._reservations: dict[str, Reservation] = {}
        self._usage = Usage()
        self._version = 0
        self._log: deque[tuple[int, str, Reservation | None]] = deque(maxlen=CHANGE_LOG)

    def _load(self, version: int, reservations: Mapping[str, Reservation]) -> None:
        self._reservations = dict(reservations)
        self._usage = Usage.of(self._reservations.values())
        self._version = version
        self._log.clear()

    def _changed(self, pod_uid: str, reservation: Reservation | None) -> int:
        self._version += 1
        self._log.append((self._version, pod_uid, reservation))
        return self._version

    async def _persist(self, changes: list[Change]) -> None:
        """Called after every mutation, before its caller hears of it (durable stores)."""
        return None

    # --- the changes (synchronous: nothing else runs in between) ---------------------------

    def _reserve_now(self, reservation: Reservation,
                     capacities: Mapping[str, GpuCapacity]) -> Applied:
        existing = self._reservations.get(reservation.pod_uid)
        if existing is not None:
            if existing.same_booking(reservation):
                return Applied(0, existing)
            raise ReservationConflict(
                f"pod {reservation.pod_uid} already holds GPUs on {existing.node}"
            )
        rules.check_fits(self._usage, reservation, capacities)
        self._reservations[reservation.pod_uid] = reservation
        self._usage.add(reservation)
        return Applied(self._changed(reservation.pod_uid, reservation), reservation)

    def _confirm_now(self, pod_uid: str) -> Applied:
        existing = self._reservations.get(pod_uid)
        if existing is None or existing.state == rules.STATE_BOUND:
            return Applied(0, existing)
        bound = existing.bound()
        self._reservations[pod_uid] = bound
        return Applied(self._changed(pod_uid, bound), bound)

    def _release_now(self, pod_uid: str, only_if: Reservation | None = None) -> Applied:
        existing = self._reservations.get(pod_uid)
        if existing is None or (only_if is not None and existing != only_if):
            return Applied(0, None)
        del self._reservations[pod_uid]
        self._usage.add(existing, -1)
        return Applied(self._changed(pod_uid, None), existing)

    # --- the contract ----------------------------------------------------------------------

    async def reserve_change(
        self, reservation: Reservation, capacities: Mapping[str, GpuCapacity]
    ) -> Applied:
        applied = self._reserve_now(reservation, capacities)
        if applied.version:
            await self._persist([(reservation.pod_uid, reservation)])
        return applied

    async def reserve(
        self, reservation: Reservation, capacities: Mapping[str, GpuCapacity]
    ) -> int:
        return (await self.reserve_change(reservation, capacities)).version or self._version

    async def confirm_change(self, pod_uid: str, booked: Reservation | None = None) -> Applied:
        applied = self._confirm_now(pod_uid)
        if applied.version:
            await self._persist([(pod_uid, applied.reservation)])
        return applied

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
        changes: list[Change] = []
        for uid in release:  # no await until every change is made: atomic
            if self._release_now(uid).version:
                changes.append((uid, None))
        for r in reservations:
            self._reservations[r.pod_uid] = r
            self._usage.add(r)
            self._changed(r.pod_uid, r)
            changes.append((r.pod_uid, r))
        await self._persist(changes)
        return self._version

    async def confirm(self, pod_uid: str) -> Reservation | None:
        return (await self.confirm_change(pod_uid)).reservation

    async def release_change(self, pod_uid: str, only_if: Reservation | None = None) -> Applied:
        applied = self._release_now(pod_uid, only_if)
        if applied.version:
            await self._persist([(pod_uid, None)])
        return applied

    async def release(self, pod_uid: str) -> Reservation | None:
        return (await self.release_change(pod_uid)).reservation

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
            self._release_now(r.pod_uid)
        if stale:
            await self._persist([(r.pod_uid, None) for r in stale])
        return stale

    async def close(self) -> None:
        return None
