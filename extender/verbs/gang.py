"""gang: book GPUs for every worker of a job at once, or for none (all-or-nothing admission).

kube-scheduler extenders have no Permit stage, so a gang is admitted before its pods exist:
the job controller asks ``reserve`` for N workers; each worker is planned with the placement
core (fit, the policy's node costs, the Hungarian assignment) on a copy of the cluster view
that already holds the workers planned before it, and the N bookings ("slots") go to the ledger
in one atomic ``reserve_many`` with a deadline. The controller then creates the pods with the
annotation ``sparse.io/gang-slot``; filter passes only the slot's node and bind turns the slot
into the pod's booking in one ledger step (release slot + book pod), so nothing is booked twice
and nothing is free in between. Slots never bound expire like any unbound booking.
"""

from __future__ import annotations

import contextlib
import logging
import re
from typing import TYPE_CHECKING, Annotated

import msgspec
import numpy as np

from extender import protocol
from extender.annotations import ANN_GANG_SLOT
from extender.demand import PodDemand, pod_demand
from extender.errors import InvalidDemand, InvalidRequest, ReservationConflict
from extender.ledger.rules import STATE_RESERVED, Reservation
from extender.outcome import Outcome
from extender.placement import ClusterState, assign, fit, node_costs, reservation_for
from extender.protocol import BindingArgs, ExtenderArgs, FilterResult, Pod, PodMeta
from extender.verbs import holdfilter
from extender.verbs.holdfilter import HOLD_TTL_S
from extender.verbs.reasons import pod_ref, summarize

if TYPE_CHECKING:
    from extender.service import Scheduler

log = logging.getLogger("sparse.gang")

SLOT_PREFIX = "gang/"
RESERVE_ATTEMPTS = 3  # a conflict means another replica booked first: re-plan on fresh state
MAX_REPLICAS = 1024
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")

Name = Annotated[str, msgspec.Meta(min_length=1, max_length=253)]


class GangReserve(msgspec.Struct, forbid_unknown_fields=True):
    """POST {prefix}/gangs/reserve: book ``replicas`` workers shaped like ``pod``."""

    job: Name  # the job's UID (slots of all its attempts share it)
    namespace: Name
    name: Name  # worker pods are named ``<name>-<index>``
    replicas: Annotated[int, msgspec.Meta(ge=1, le=MAX_REPLICAS)]
    pod: Pod  # one worker: containers with their GPU resources, annotations
    attempt: Annotated[int, msgspec.Meta(ge=0, le=10**6)] = 0
    ttlSeconds: Annotated[float, msgspec.Meta(gt=0, le=86400)] = 120.0  # noqa: N815


class GangRelease(msgspec.Struct, forbid_unknown_fields=True):
    """POST {prefix}/gangs/release: drop the job's unconsumed slots (one attempt or all)."""

    job: Name
    attempt: int | None = None


class Slot(msgspec.Struct):
    slot: str
    index: int
    node: str
    gpus: list[str]
    memMiB: int  # noqa: N815
    milli: int


class GangAnswer(msgspec.Struct):
    admitted: bool
    reason: str = ""
    slots: list[Slot] = []
    placeable: int = 0  # workers that fit now (all of them when admitted)
    everFits: bool = True  # noqa: N815 - false: not even an empty cluster holds the job
    expiresAt: float | None = None  # noqa: N815


def slot_uid(job: str, attempt: int, index: int) -> str:
    return f"{SLOT_PREFIX}{job}/{attempt}/{index}"


def _check_id(value: str, what: str) -> None:
    if not _ID.match(value):
        raise InvalidRequest(f"{what} {value[:60]!r}: letters, digits, '.', '_' and '-' only")


def decode_reserve(body: bytes) -> GangReserve:
    req = _decode(body, GangReserve)
    _check_id(req.job, "job")
    return req


def decode_release(body: bytes) -> GangRelease:
    req = _decode(body, GangRelease)
    _check_id(req.job, "job")
    return req


def _decode(body: bytes, kind: type) -> object:
    try:
        return msgspec.json.decode(body, type=kind)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(f"{kind.__name__}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise InvalidRequest(f"{kind.__name__}: not JSON ({exc})") from None


def _worker_demand(req: GangReserve, index: int) -> PodDemand:
    meta = req.pod.metadata
    worker = Pod(
        metadata=PodMeta(name=f"{req.name}-{index}", namespace=req.namespace,
                         uid=slot_uid(req.job, req.attempt, index),
                         annotations=meta.annotations, labels=meta.labels,
                         creationTimestamp=meta.creationTimestamp),
        spec=req.pod.spec,
    )
    try:
        demand = pod_demand(worker)
    except InvalidDemand as exc:
        raise InvalidRequest(f"worker pod: {exc}") from None
    if demand.slot_count == 0:
        raise InvalidRequest("worker pod asks for no GPU (nvidia.com/gpu or sparse.io/gpu-*)")
    return demand


def plan(state: ClusterState, s: Scheduler, demands: list[PodDemand], ttl_s: float,
         holds: bool = True) -> tuple[list[Reservation], str]:
    """Place the workers one by one on a working copy; ([], why) when one does not fit.
    ``holds``: a node held for a waiting gang takes a worker only as filter would let it."""
    work = state.copy()
    names = list(work.node_names)
    booked: list[Reservation] = []
    now = s.clock()
    if holds:
        s.holds.lapse(now, HOLD_TTL_S)
    for i, demand in enumerate(demands):
        result = fit(work, demand, names)
        costs = node_costs(work, demand, result, s.policy)
        off = (s.holds.refused(work, demand, result.nodes, now)
               if holds and s.holds.hold is not None else None)
        choice = None
        if result.fits.any() and (off is None or (result.fits & ~off).any()):
            pick = costs if off is None else np.where(off, np.inf, costs)
            choice = assign(work, demand, result.names[int(pick.argmin())], s.policy)
        if choice is None:
            why = summarize(result.failed, result.unresolvable) or "no GPU node is known"
            if off is not None and off.any():
                why += "; a node is held for a waiting gang"
            return booked, (f"{i} of {len(demands)} workers fit; worker {i} needs "
                            f"{demand.describe()}: {why}")
        reservation = reservation_for(demand, choice, work, now, ttl_s)
        work.apply(reservation)
        booked.append(reservation)
    return booked, ""


async def reserve(s: Scheduler, req: GangReserve) -> GangAnswer:
    demands = [_worker_demand(req, i) for i in range(req.replicas)]
    uids = [d.uid for d in demands]
    held = [await s.ledger.get(u) for u in uids]
    if all(r is not None for r in held):  # a retried admission (e.g. a restarted controller)
        return _admitted([r for r in held if r is not None])
    if any(r is not None for r in held):  # leftovers of an interrupted attempt: start over
        await release(s, GangRelease(job=req.job, attempt=req.attempt))
    last = ""
    for _ in range(RESERVE_ATTEMPTS):
        state = await s.view(fresh=True)  # what was booked concurrently, at once
        booked, why = plan(state, s, demands, req.ttlSeconds)
        if why:
            _, never = plan(ClusterState.build(state.inventory, s.matrix), s, demands,
                            req.ttlSeconds, holds=False)
            if req.replicas == 1:  # a one-worker gang: hold the node where it starts soonest
                holdfilter.hold_for(s, state, demands[0], state.node_names)
            return GangAnswer(admitted=False, reason=why, placeable=len(booked),
                              everFits=not never)
        try:
            await s.ledger.reserve_many(booked, state.capacities(
                {g for r in booked for g in r.gpus}))
        except ReservationConflict as exc:
            last = str(exc)
            continue  # the next view() replays what was booked concurrently
        for r, d in zip(booked, demands, strict=True):  # their predicted ends, for holds
            s.holds.started(r.pod_uid, s.clock(), d.predicted_s)
        log.info("gang %s/%s: %d workers reserved on %s", req.namespace, req.name,
                 req.replicas, ",".join(sorted({r.node for r in booked})))
        return _admitted(booked)
    return GangAnswer(admitted=False, reason=f"GPUs taken concurrently ({last})",
                      placeable=0)


def _admitted(booked: list[Reservation]) -> GangAnswer:
    slots = [Slot(slot=r.pod_uid, index=int(r.pod_uid.rsplit("/", 1)[1]), node=r.node,
                  gpus=list(r.gpus), memMiB=sum(a.mem_mib for a in r.allocations),
                  milli=sum(a.milli for a in r.allocations)) for r in booked]
    expiry = [r.expires_at for r in booked if r.expires_at is not None]
    return GangAnswer(admitted=True, slots=slots, placeable=len(slots),
                      expiresAt=min(expiry) if expiry else None)


async def release(s: Scheduler, req: GangRelease) -> list[str]:
    """Drop the job's slots not yet consumed by a bind (bound pods keep theirs)."""
    prefix = f"{SLOT_PREFIX}{req.job}/" + ("" if req.attempt is None else f"{req.attempt}/")
    _, reservations = await s.ledger.snapshot()
    dropped = []
    for uid in [u for u in reservations if u.startswith(prefix)]:
        if await s.release(uid) is not None:
            dropped.append(uid)
    return dropped


# --- the worker pods: filter and bind honour the slot -----------------------------------------


def slot_of(pod: Pod | None) -> str:
    return ((pod.metadata.annotations or {}).get(ANN_GANG_SLOT, "") if pod else "").strip()


async def filter_slot(s: Scheduler, pod: Pod, args: ExtenderArgs) -> FilterResult | None:
    """A gang worker passes only on its slot's node; None for other pods."""
    slot = slot_of(pod)
    if not slot:
        return None
    with contextlib.suppress(InvalidDemand):
        await s.demand_of(pod)  # keeps the pod for bind, which reads its slot annotation
    own = await s.ledger.get(pod.metadata.uid)  # a bind in flight or retried
    booking = own if own is not None else await s.ledger.get(slot)
    namespace = pod.metadata.namespace or "default"
    if booking is None or (booking.namespace, booking.name) != (namespace, pod.metadata.name):
        reason = (f"gang slot {slot} is not reserved for this pod (expired or released);"
                  " the job controller re-admits the job")
        s.notify(Outcome("filter", *pod_ref(pod), False, reason))
        return protocol.filter_result([], {}, {n: reason for n in args.node_names}, args)
    passed = [booking.node] if booking.node in args.node_names else []
    failed = {n: f"gang slot {slot} is on node {booking.node}" for n in args.node_names
              if n != booking.node}
    if not passed:
        s.notify(Outcome("filter", *pod_ref(pod), False,
                         f"gang slot {slot} is on node {booking.node}, not a candidate"))
    return protocol.filter_result(passed, failed, {}, args)


async def _pod_for(s: Scheduler, args: BindingArgs) -> Pod | None:
    pod = s.pending_pod(args.pod_uid)
    if pod is None:
        pod = await s.binder.fetch_pod(args.pod_namespace, args.pod_name)
    return pod if pod is not None and pod.metadata.uid == args.pod_uid else None


async def consume_slot(s: Scheduler, args: BindingArgs) -> Reservation | None:
    """For a gang worker: its slot becomes its booking in one ledger step. None for others."""
    pod = await _pod_for(s, args)
    slot = slot_of(pod)
    if not slot:
        return None
    held = await s.ledger.get(slot)
    if held is None or (held.namespace, held.name) != (args.pod_namespace, args.pod_name):
        # a slot is booked for one pod name: another pod naming it gets nothing
        raise ReservationConflict(f"gang slot {slot} is not reserved for pod "
                                  f"{args.pod_namespace}/{args.pod_name} (expired or released)")
    if held.node != args.node:
        raise ReservationConflict(f"gang slot {slot} is on node {held.node}, not {args.node}")
    now = s.clock()
    reservation = msgspec.structs.replace(
        held, pod_uid=args.pod_uid, name=args.pod_name, state=STATE_RESERVED, created_at=now,
        expires_at=now + s.reservation_ttl_s)
    state = await s.view(fresh=True)
    gone = [g for g in reservation.gpus if g not in state.gpu_index]
    if gone:
        raise ReservationConflict(f"gang slot {slot}: GPU {gone[0]} left the inventory")
    await s.ledger.reserve_many([reservation], state.capacities(reservation.gpus),
                                release=[slot])
    s.holds.moved(slot, args.pod_uid)
    return reservation


def is_gang_worker(s: Scheduler, pod_uid: str) -> bool:
    return bool(slot_of(s.pending_pod(pod_uid)))
