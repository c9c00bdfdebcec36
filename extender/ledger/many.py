"""Several reservations booked as one: the gang (all-or-nothing) rule both backends share. Pure.

``reserve_many`` drops the ``release`` bookings and books every reservation, or changes
nothing. Reservations of one call may share a GPU: their amounts add up against its capacity.
A bind that consumes a gang slot is one such call (release the slot, book the pod).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from extender.errors import ReservationConflict
from extender.ledger import rules
from extender.ledger.rules import GpuCapacity, Reservation, Usage


def validate_many(reservations: Sequence[Reservation], release: Iterable[str],
                  capacities: Mapping[str, GpuCapacity]) -> None:
    if not reservations:
        raise ReservationConflict("reserve_many needs at least one reservation")
    uids = [r.pod_uid for r in reservations]
    if len(set(uids)) != len(uids):
        raise ReservationConflict("reserve_many: the same UID is booked twice")
    if set(uids) & set(release):
        raise ReservationConflict("reserve_many: a UID is both released and booked")
    for r in reservations:
        rules.validate(r, capacities)


def check_fits_many(usage: Usage, reservations: Sequence[Reservation],
                    capacities: Mapping[str, GpuCapacity]) -> None:
    """Raise ReservationConflict unless all fit together on top of ``usage`` (not mutated)."""
    pending = Usage(dict(usage.mem_mib), dict(usage.milli))
    for r in reservations:
        rules.check_fits(pending, r, capacities)
        pending.add(r)


def already_booked(existing: Mapping[str, Reservation | None],
                   reservations: Sequence[Reservation]) -> bool:
    """True when every reservation is already held as the same booking (a retried call);
    raise when any UID holds something else."""
    held = 0
    for r in reservations:
        current = existing.get(r.pod_uid)
        if current is None:
            continue
        if not current.same_booking(r):
            raise ReservationConflict(f"{r.pod_uid} already holds GPUs on {current.node}")
        held += 1
    if held and held != len(reservations):
        raise ReservationConflict("some of these reservations are already held, others not")
    return held == len(reservations)
