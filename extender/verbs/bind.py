"""bind: re-plan on the current ledger, book every GPU or none, then create the Binding.

A conflict (another replica booked first) re-plans on fresh state a few times; any failure
answers ``Error`` so the scheduler retries, and the booking is rolled back.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from extender.binder import BindError
from extender.demand import PodDemand
from extender.errors import InvalidDemand, ReservationConflict
from extender.ledger.rules import STATE_BOUND, Reservation
from extender.outcome import Outcome
from extender.placement import Assignment, ClusterState, assign, fit, reservation_for
from extender.placement.state import gpu_fraction
from extender.protocol import BindingArgs, BindingResult
from extender.verbs import gang
from extender.verbs.reasons import summarize

if TYPE_CHECKING:
    from extender.service import Scheduler

log = logging.getLogger("sparse.bind")

BIND_ATTEMPTS = 3  # a conflict means another replica booked first: re-plan on fresh state


async def run(s: Scheduler, args: BindingArgs) -> BindingResult:
    key = f"{args.pod_namespace}/{args.pod_name}"
    ref = (args.pod_namespace, args.pod_name, args.pod_uid)
    try:
        reservation, loss = await reserve(s, args)
    except (InvalidDemand, ReservationConflict, LookupError) as exc:
        s.notify(Outcome("bind", *ref, False, str(exc)))
        return BindingResult(Error=str(exc))
    try:
        await s.binder.bind(args, reservation)
    except BindError as exc:
        if not gang.is_gang_worker(s, args.pod_uid):  # a worker keeps its slot's GPUs
            await s.release(args.pod_uid, keep_pending=True)
        log.warning("bind %s to %s failed, reservation rolled back: %s", key, args.node, exc)
        s.notify(Outcome("bind", *ref, False, f"binding failed: {exc}"))
        return BindingResult(Error=f"binding {key} to {args.node} failed: {exc}")
    confirmed = await s.confirm(args.pod_uid)
    s.forget_pending(args.pod_uid)
    s.notify(Outcome("bind", *ref, True, reservation=confirmed or reservation,
                     interference=loss))
    return BindingResult()


async def demand_for_bind(s: Scheduler, args: BindingArgs) -> PodDemand | None:
    """The demand filter saw; else the pod is read back from the API server."""
    cached = s.pending_demand(args.pod_uid)
    if cached is not None:
        return cached
    pod = await s.binder.fetch_pod(args.pod_namespace, args.pod_name)
    if pod is None or pod.metadata.uid != args.pod_uid:
        return None
    return await s.demand_of(pod)


async def reserve(s: Scheduler, args: BindingArgs) -> tuple[Reservation, float | None]:
    """Book the pod's GPUs on ``args.node``; returns the booking and its interference loss."""
    existing = await s.ledger.get(args.pod_uid)
    if existing is not None:
        if existing.node == args.node:
            return existing, None  # a retried bind: book nothing twice
        if existing.state == STATE_BOUND:
            raise ReservationConflict(
                f"pod {args.pod_namespace}/{args.pod_name} is already bound to {existing.node}"
            )
        await s.release(args.pod_uid, keep_pending=True)
    consumed = await gang.consume_slot(s, args)
    if consumed is not None:
        return consumed, None
    demand = await demand_for_bind(s, args)
    if demand is None:
        raise LookupError(
            f"no GPU demand known for pod {args.pod_namespace}/{args.pod_name}"
            f" ({args.pod_uid}); it was not filtered by this extender"
        )
    last = ""
    for _ in range(BIND_ATTEMPTS):
        state = await s.view()
        choice = assign(state, demand, args.node, s.policy)
        if choice is None:
            why = fit(state, demand, [args.node])
            reason = summarize(why.failed, why.unresolvable) or "does not fit"
            raise ReservationConflict(f"node {args.node} no longer fits the pod: {reason}")
        reservation = reservation_for(demand, choice, state, s.clock(), s.reservation_ttl_s)
        capacities = state.capacities(reservation.gpus)
        try:
            version = await s.ledger.reserve(reservation, capacities)
        except ReservationConflict as exc:
            last = str(exc)
            continue  # the next view() replays what the other replica booked
        s.after_change(version, add=reservation)
        return reservation, placement_loss(state, demand, choice)
    raise ReservationConflict(f"node {args.node}: GPUs taken concurrently ({last})")


def placement_loss(state: ClusterState, demand: PodDemand, choice: Assignment) -> float | None:
    """Pairwise throughput lost by a share with the jobs already on its GPU (before booking)."""
    if choice.share is None:
        return None
    i = state.gpu_index[choice.share]
    loss = state.matrix.placement_loss(demand.job_class, gpu_fraction(demand.share_milli),
                                       state.class_frac[i:i + 1])
    return float(loss[0])
