"""The contract every ledger backend implements.

Checked for both backends by tests/extender/ledger/test_contract.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple, Protocol

from extender.ledger.rules import GpuCapacity, Reservation

# One change: the pod UID and its reservation afterwards (None: dropped).
Change = tuple[str, Reservation | None]


class Applied(NamedTuple):
    """What one call did, read atomically with the change itself.

    ``version`` is the number of the change this call made, or 0 when it changed nothing (a
    retried booking, a confirm of a bound pod, a release of nothing). A reader that cached
    version ``v`` may apply the change itself only when ``version == v + 1``; any other
    number means other changes came first, and those are read from the change log."""

    version: int
    reservation: Reservation | None  # afterwards (reserve, confirm) or dropped (release)


class LedgerStore(Protocol):
    async def reserve(
        self, reservation: Reservation, capacities: Mapping[str, GpuCapacity]
    ) -> int:
        """Book every allocation or none. Raises ReservationConflict when a GPU would exceed
        its capacity or the pod already holds a different reservation; booking the same thing
        twice is a no-op (a retried bind). Returns the ledger version after the change."""

    async def reserve_many(
        self, reservations: Sequence[Reservation], capacities: Mapping[str, GpuCapacity],
        release: Iterable[str] = (),
    ) -> int:
        """Drop the ``release`` bookings and book every reservation, or change nothing (a
        gang; a bind consuming a gang slot). Amounts of one call add up per GPU; booking the
        same set twice is a no-op. Returns the ledger version after the change."""

    async def confirm(self, pod_uid: str) -> Reservation | None:
        """Mark the pod's reservation bound (no expiry). None if there is none."""

    async def release(self, pod_uid: str) -> Reservation | None:
        """Drop the pod's reservation; returns what was dropped (None if nothing)."""

    async def reserve_change(
        self, reservation: Reservation, capacities: Mapping[str, GpuCapacity]
    ) -> Applied:
        """``reserve`` that also says whether it changed anything (version 0: it did not)."""

    async def confirm_change(self, pod_uid: str, booked: Reservation | None = None) -> Applied:
        """``confirm`` with the version of the change it made (0: none). ``booked``: the
        booking the caller made, when it knows it (a networked store may then skip a read;
        the confirm is the same whatever the store holds)."""

    async def release_change(self, pod_uid: str, only_if: Reservation | None = None) -> Applied:
        """``release`` with the version of the change it made (0: none). With ``only_if`` the
        reservation is dropped only while it is exactly that one (a failed bind cleaning up
        after itself never drops a later booking of the same pod)."""

    async def get(self, pod_uid: str) -> Reservation | None: ...

    async def snapshot(self) -> tuple[int, dict[str, Reservation]]:
        """(version, every reservation by pod UID), consistent with each other."""

    async def version(self) -> int:
        """Bumped by every change; cheap, so readers can keep a cached snapshot fresh."""

    async def changes(self, since: int) -> tuple[int, list[Change]] | None:
        """The changes after version ``since``, oldest first, one per version, and the version
        they lead to; None when they are no longer all kept (read ``snapshot`` instead). Lets
        a replica follow the others' bookings without reloading every reservation."""

    async def expire(self, now: float) -> list[Reservation]:
        """Release reserved-but-never-bound reservations whose deadline has passed."""

    async def close(self) -> None: ...
