"""bind: re-plan on the current ledger, book every GPU or none, then create the Binding.

A conflict (another replica booked first) re-plans on fresh state a few times; any failure
answers ``Error`` so the scheduler retries, and the booking is rolled back. On a node unchanged
since filter priced it for the pod's shape, the first attempt takes the GPU filter's pricing
picked there (``NodeVerdicts.choice``), exactly what the re-plan would pick.

The answer is the truth: success only once the booking is confirmed (bound, no expiry). The
Binding call is abandoned after ``bind_timeout_s`` and an unbound booking lives that long past
its TTL, so it cannot expire while its Binding is in flight. A bind that answers an error
leaves no booking: it rolls back what it booked, and when the store cannot be reached for
that, the upkeep drops it later (``BindUpkeep``). Only when the Binding itself was created
(the pod is bound) does the booking stay, confirmed later.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from extender import stages
from extender.binder import BindError
from extender.demand import PodDemand
from extender.errors import InvalidDemand, LedgerUnavailable, ReservationConflict
from extender.ledger.rules import STATE_BOUND, Reservation
from extender.outcome import Outcome
from extender.placement import Assignment, ClusterState, assign, fit, reservation_for
from extender.placement.state import gpu_fraction
from extender.protocol import BindingArgs, BindingResult
from extender.verbs import gang
from extender.verbs.costcache import CachedPolicy
from extender.verbs.reasons import summarize

if TYPE_CHECKING:
    from extender.service import Scheduler

log = logging.getLogger("sparse.bind")

BIND_ATTEMPTS = 3  # a conflict means another replica booked first: re-plan on fresh state


async def run(s: Scheduler, args: BindingArgs) -> BindingResult:
    key = f"{args.pod_namespace}/{args.pod_name}"
    ref = (args.pod_namespace, args.pod_name, args.pod_uid)
    s.upkeep.bind_started(args.pod_uid)
    try:
        reservation, loss = await reserve(s, args)
    except (InvalidDemand, ReservationConflict, LookupError) as exc:
        s.notify(Outcome("bind", *ref, False, str(exc)))
        return BindingResult(Error=str(exc))
    if reservation.state == STATE_BOUND:  # a retried bind of a pod bound already
        s.forget_pending(args.pod_uid)
        s.notify(Outcome("bind", *ref, True, reservation=reservation))
        return BindingResult()
    try:
        # (a timeout scope, not wait_for: no task of its own for the call)
        with stages.stage("kube"):
            async with asyncio.timeout(s.bind_timeout_s):
                await s.binder.bind(args, reservation)
    except (BindError, TimeoutError) as exc:
        why = str(exc) or f"no answer within {s.bind_timeout_s:g} s"
        await roll_back(s, reservation)
        log.warning("bind %s to %s failed, reservation rolled back: %s", key, args.node, why)
        s.notify(Outcome("bind", *ref, False, f"binding failed: {why}"))
        return BindingResult(Error=f"binding {key} to {args.node} failed: {why}")
    except Exception as exc:
        # The Binding may or may not exist (the call's answer was lost): the booking stays
        # unconfirmed, so it expires unless the watch sees the pod bound and confirms it.
        log.warning("bind %s to %s: outcome of the Binding unknown: %s", key, args.node, exc)
        s.notify(Outcome("bind", *ref, False, f"binding outcome unknown: {exc}"))
        return BindingResult(Error=f"binding {key} to {args.node}: outcome unknown ({exc});"
                                   " the booking expires unless the pod is bound")
    try:
        with stages.stage("ledger"):
            confirmed = await confirm(s, reservation)
    except LedgerUnavailable as exc:
        if getattr(s.binder, "binds_pods", True):  # pod bound: booking stays, confirmed later
            s.upkeep.confirm_later(args.pod_uid)
        else:  # the booking was the whole binding: undo it, as booked or as bound (the
            # confirm, or its re-booking, may have landed with its answer lost)
            await roll_back(s, reservation, bound_too=True)
        s.notify(Outcome("bind", *ref, False, f"booking not confirmed: {exc}"))
        return BindingResult(Error=f"bind {key}: booking not confirmed: {exc}")
    except ReservationConflict as exc:
        s.notify(Outcome("bind", *ref, False, str(exc)))
        return BindingResult(Error=f"bind {key}: {exc}")
    demand = s.pending_demand(args.pod_uid)
    if demand is not None:  # its CPU and memory count on the node before the watch says so
        s.hosts.bind(args.pod_uid, args.node, demand.cpu_milli, demand.host_mem_mib)
        s.holds.started(args.pod_uid, s.clock(), demand.predicted_s)  # its predicted end
    s.forget_pending(args.pod_uid)
    s.reader_waits.forget(args.pod_uid)
    s.notify(Outcome("bind", *ref, True, reservation=confirmed, interference=loss))
    return BindingResult()


async def confirm(s: Scheduler, reservation: Reservation) -> Reservation:
    """Mark the booking bound. Should it be gone (a store that lost it), book it again as
    bound: success only with a confirmed booking."""
    confirmed = await s.confirm(reservation.pod_uid, reservation)
    if confirmed is not None:
        return confirmed
    state = await s.view()
    bound = reservation.bound()
    if not all(g in state.gpu_index for g in bound.gpus):
        raise ReservationConflict(
            f"booking of {reservation.namespace}/{reservation.name} was lost and its GPUs are"
            " unknown now")
    version, _ = await s.ledger.reserve_change(bound, state.capacities(bound.gpus))
    s.after_change(version, add=bound)
    log.warning("booking of %s/%s was gone at confirm; booked again", reservation.namespace,
                reservation.name)
    return bound


async def roll_back(s: Scheduler, reservation: Reservation, bound_too: bool = False) -> None:
    """Drop what this bind booked (only that very booking: a later attempt books its own;
    with ``bound_too`` also that booking confirmed); if the store cannot be reached, the
    upkeep drops it later. A gang worker keeps its slot's GPUs for the retry."""
    if gang.is_gang_worker(s, reservation.pod_uid):
        return
    candidates = (reservation, reservation.bound()) if bound_too else (reservation,)
    try:
        for candidate in candidates:
            if await s.release(candidate.pod_uid, keep_pending=True,
                               only_if=candidate) is not None:
                return
    except LedgerUnavailable:
        s.upkeep.drop_later(*candidates)


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
    with stages.stage("ledger"):  # the view, not a read of the pod's own entry: one read
        state = await s.view()  # fewer per bind; a booking it has not seen yet conflicts
    existing = state.reservations.get(args.pod_uid) or state.orphans.get(args.pod_uid)
    if existing is not None:
        if existing.state == STATE_BOUND:
            if existing.node == args.node:
                return existing, None  # an earlier attempt succeeded: nothing to book
            raise ReservationConflict(
                f"pod {args.pod_namespace}/{args.pod_name} is already bound to {existing.node}"
            )
        if gang.is_gang_worker(s, args.pod_uid) and existing.node == args.node:
            return existing, None  # a worker's slot booking, kept for its retry
        # Booked but unbound by an earlier attempt (maybe failed, maybe on another replica
        # that will drop exactly that booking): this attempt books its own.
        await s.release(args.pod_uid, keep_pending=True, only_if=existing)
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
    for attempt in range(BIND_ATTEMPTS):
        if attempt or existing is not None or state is not s.state:
            with stages.stage("ledger"):  # after a conflict: read the store itself
                state = await s.view(fresh=attempt > 0)
        choice = None
        if s.bind_reuse and not attempt and existing is None and state is s.state:
            # filter's pick on a node unchanged since: what assign answers, without the work
            told, choice = s.node_verdicts.choice(s.policy, state, demand, args.node)
            policy = (CachedPolicy(s.policy, s.cost_cache, note=False) if told
                      else s.costing_policy)
        else:
            policy = s.costing_policy
        if choice is None:
            choice = assign(state, demand, args.node, policy)
        else:
            s.node_verdicts.bind_reused += 1
        if choice is None:
            why = fit(state, demand, [args.node])
            reason = summarize(why.failed, why.unresolvable) or "does not fit"
            raise ReservationConflict(f"node {args.node} no longer fits the pod: {reason}")
        reservation = reservation_for(demand, choice, state, s.clock(),
                                      s.reservation_ttl_s + s.bind_timeout_s)
        capacities = state.capacities(reservation.gpus)
        try:
            with stages.stage("ledger"):
                version, _ = await s.ledger.reserve_change(reservation, capacities)
        except ReservationConflict as exc:
            last = str(exc)
            continue  # the next view() replays what the other replica booked
        except LedgerUnavailable:
            s.upkeep.drop_later(reservation)  # the script may have run: its reply was lost
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
