"""bind: re-plan on the current ledger, book every GPU or none, then create the Binding.

A conflict (another replica booked first) re-plans on fresh state a few times; any failure
answers ``Error`` so the scheduler retries, and the booking is rolled back.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from extender import stages
from extender.binder import BindError, LedgerOnlyBinder
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
    except Exception as exc:  # the store failed (unreachable, timed out); reserve rolled back
        return _store_failure(s, args, ref, "booking", exc)
    try:
        with stages.stage("kube"):
            await s.binder.bind(args, reservation)
    except BindError as exc:
        await _roll_back(s, args, reservation)
        log.warning("bind %s to %s failed, reservation rolled back: %s", key, args.node, exc)
        s.notify(Outcome("bind", *ref, False, f"binding failed: {exc}"))
        return BindingResult(Error=f"binding {key} to {args.node} failed: {exc}")
    except Exception as exc:
        # The Binding may or may not exist (the call's answer was lost): the booking stays
        # unconfirmed, so it expires after --reservation-ttl unless the watch sees the pod
        # bound and confirms it.
        log.warning("bind %s to %s: outcome of the Binding unknown: %s", key, args.node, exc)
        s.notify(Outcome("bind", *ref, False, f"binding outcome unknown: {exc}"))
        return BindingResult(Error=f"binding {key} to {args.node}: outcome unknown ({exc});"
                                   " the booking expires unless the pod is bound")
    try:
        with stages.stage("ledger"):
            confirmed = await s.confirm(args.pod_uid)
    except Exception as exc:
        if isinstance(s.binder, LedgerOnlyBinder):  # no cluster: the booking is the binding
            await _roll_back(s, args, reservation)
            return _store_failure(s, args, ref, "confirming", exc)
        # The pod is bound on the API server: its booking must stay (dropping it would let
        # another pod onto these GPUs); the watch confirms it from the pod's annotations.
        log.warning("bind %s: bound, but confirming the booking failed: %s", key, exc)
        confirmed = None
    s.forget_pending(args.pod_uid)
    s.notify(Outcome("bind", *ref, True, reservation=confirmed or reservation,
                     interference=loss))
    return BindingResult()


async def _roll_back(s: Scheduler, args: BindingArgs, booked: Reservation | None) -> None:
    """Give back what this bind booked (never a booking already bound: a repeated bind of a
    bound pod must not free its GPUs); when the store cannot be reached the booking, never
    confirmed, expires after --reservation-ttl."""
    if booked is not None and booked.state == STATE_BOUND:
        return
    if gang.is_gang_worker(s, args.pod_uid):  # a worker keeps its slot's GPUs for the retry
        return
    try:
        await s.release(args.pod_uid, keep_pending=True)
    except Exception as exc:
        log.warning("bind %s/%s: rolling back failed (%s); the booking expires unconfirmed",
                    args.pod_namespace, args.pod_name, exc)


def _store_failure(s: Scheduler, args: BindingArgs, ref: tuple[str, str, str], step: str,
                   exc: Exception) -> BindingResult:
    log.warning("bind %s/%s: %s failed on the store: %r", args.pod_namespace, args.pod_name,
                step, exc)
    why = f"GPU ledger unavailable while {step} ({type(exc).__name__}: {str(exc)[:200]}); retry"
    s.notify(Outcome("bind", *ref, False, why))
    return BindingResult(Error=why)


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
    with stages.stage("ledger"):
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
        with stages.stage("ledger"):
            state = await s.view()
        choice = assign(state, demand, args.node, s.policy)
        if choice is None:
            why = fit(state, demand, [args.node])
            reason = summarize(why.failed, why.unresolvable) or "does not fit"
            raise ReservationConflict(f"node {args.node} no longer fits the pod: {reason}")
        reservation = reservation_for(demand, choice, state, s.clock(), s.reservation_ttl_s)
        capacities = state.capacities(reservation.gpus)
        try:
            with stages.stage("ledger"):
                version = await s.ledger.reserve(reservation, capacities)
        except ReservationConflict as exc:
            last = str(exc)
            continue  # the next view() replays what the other replica booked
        except Exception:  # the write may have landed although its answer was lost
            await _roll_back(s, args, None)
            raise
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
