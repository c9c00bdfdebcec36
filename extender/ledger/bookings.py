"""A booking's life after bind: confirmed once bound, released when the pod is gone, adopted
from API objects (start-up rebuild, another replica's pod), expired when never bound.

Each applies its own change to the scheduler's view at once when it is the next one
(``LedgerView.after_change``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from extender.errors import LedgerUnavailable, ReservationConflict
from extender.ledger.health import raise_if_cancelling
from extender.ledger.rules import GpuCapacity, Reservation

if TYPE_CHECKING:
    from extender.service import Scheduler

log = logging.getLogger("sparse.service")


async def confirm(s: Scheduler, pod_uid: str, booked: Reservation | None = None
                  ) -> Reservation | None:
    """The pod is bound: its reservation no longer expires (``booked``: what this replica
    booked for it, if known)."""
    version, confirmed = await (s.ledger.confirm_change(pod_uid) if booked is None
                                else s.ledger.confirm_change(pod_uid, booked))
    if confirmed is not None:
        s.after_change(version, add=confirmed)
    return confirmed


async def release(s: Scheduler, pod_uid: str, keep_pending: bool = False,
                  only_if: Reservation | None = None) -> Reservation | None:
    """The pod is gone or finished (or its binding failed): give its GPUs back. With
    ``only_if``, only while the booking is still exactly that one."""
    version, dropped = await s.ledger.release_change(pod_uid, only_if)
    if dropped is not None:
        s.after_change(version, drop=pod_uid)
    if only_if is None or dropped is not None:
        s.hosts.release(pod_uid)
    if not keep_pending:
        s.holds.finished(pod_uid)
        s.pending.forget(pod_uid)
        if s.profiles is not None:
            s.profiles.remove(pod_uid)
    return dropped


async def adopt(s: Scheduler, reservation: Reservation) -> bool:
    """Record a booking found on an API object (start-up rebuild, or another replica's
    pod seen by the watch). Already present: nothing to do."""
    state = s.state
    # A GPU that left the inventory still holds what the pod holds: record the fact.
    capacities = {g: (state.capacities([g])[g] if g in state.gpu_index
                      else GpuCapacity(mem_mib=2**40, milli=2**40))
                  for g in reservation.gpus}
    try:
        version, _ = await s.ledger.reserve_change(reservation, capacities)
    except ReservationConflict as exc:
        log.error("cannot adopt reservation of %s/%s: %s", reservation.namespace,
                  reservation.name, exc)
        return False
    s.after_change(version, add=reservation)
    return True


async def expire(s: Scheduler) -> list[Reservation]:
    """Periodic upkeep: first finish what failed binds left (confirm bound pods, drop the
    bookings of binds that answered an error), then expire unbound bookings."""
    await s.upkeep.run(s)
    raise_if_cancelling()
    try:
        dropped = await s.ledger.expire(s.clock())
    except LedgerUnavailable as exc:  # the next round tries again; readiness says why
        s.health.failed(exc)
        return []
    raise_if_cancelling()
    if dropped:  # the next view() replays the drops from the ledger's change log
        s.upkeep.expired += len(dropped)
        for r in dropped:
            log.warning("reservation of %s/%s on %s expired unbound", r.namespace, r.name,
                        r.node)
    return dropped
