"""What a bind could not finish because the store was unreachable, finished later.

* A bind that answered an error must leave no booking behind. When its own rollback cannot
  reach the store (or the reserve script may have run although its reply was lost), the
  booking it tried is remembered and dropped later, only while it is still exactly that one
  (a retried bind of the same pod keeps what it booked).
* A pod whose Binding was created but whose booking could not be confirmed keeps its booking;
  the confirm is retried (before expiry runs, so the booking cannot expire meanwhile).

Counted (``sparse_ledger_reclaimed_total``, ``sparse_ledger_expired_total``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from extender.errors import LedgerUnavailable
from extender.ledger.rules import Reservation

if TYPE_CHECKING:
    from extender.service import Scheduler

log = logging.getLogger("sparse.ledger.upkeep")

MAX_REMEMBERED = 100_000


class BindUpkeep:
    def __init__(self) -> None:
        self._drop: dict[str, tuple[Reservation, ...]] = {}
        self._confirm: set[str] = set()
        self.reclaimed = 0  # bookings of failed binds dropped here
        self.expired = 0  # unbound bookings dropped at their deadline

    def drop_later(self, *reservation: Reservation) -> None:
        """Drop the pod's booking while it is exactly one of these (as booked; as bound)."""
        if len(self._drop) < MAX_REMEMBERED:  # beyond that, expiry still drops them
            self._drop[reservation[0].pod_uid] = reservation

    def confirm_later(self, pod_uid: str) -> None:
        if len(self._confirm) < MAX_REMEMBERED:
            self._confirm.add(pod_uid)

    def bind_started(self, pod_uid: str) -> None:
        """A new bind of the pod owns its booking from now on."""
        self._drop.pop(pod_uid, None)
        self._confirm.discard(pod_uid)

    @property
    def pending(self) -> int:
        return len(self._drop) + len(self._confirm)

    async def run(self, s: Scheduler) -> None:
        for uid in list(self._confirm):
            try:
                await s.confirm(uid)
            except LedgerUnavailable:
                return
            self._confirm.discard(uid)
        for uid, candidates in list(self._drop.items()):
            dropped = None
            try:
                for candidate in candidates:
                    dropped = await s.release(uid, keep_pending=True, only_if=candidate)
                    if dropped is not None:
                        break
            except LedgerUnavailable:
                return
            if self._drop.get(uid) is candidates:
                del self._drop[uid]
            if dropped is not None:
                self.reclaimed += 1
                log.warning("dropped the booking of %s/%s left by a bind that failed",
                            dropped.namespace, dropped.name)
