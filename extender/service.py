"""The scheduler seam: filter, prioritize, bind and preempt over the pure placement core.

Stateful and async (it awaits the ledger, the demand source and the binder); every decision is
made by ``extender.placement`` on a ClusterState kept in step with the ledger's version.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from extender import protocol
from extender.annotations import ANN_GPU_INVENTORY
from extender.binder import Binder, BindError, LedgerOnlyBinder
from extender.demand import PodDemand, pod_demand, wants_gpu
from extender.demandsource import DemandSource, NoPredictions
from extender.errors import InvalidDemand, InvalidInventory, ReservationConflict
from extender.interference import InterferenceMatrix
from extender.inventory import Inventory, NodeGpus, node_from_annotations
from extender.ledger.rules import STATE_BOUND, GpuCapacity, Reservation
from extender.ledger.store import LedgerStore
from extender.placement import (
    Assignment,
    ClusterState,
    Policy,
    assign,
    fit,
    node_costs,
    reservation_for,
    scores_from_costs,
)
from extender.placement.state import gpu_fraction
from extender.protocol import (
    BindingArgs,
    BindingResult,
    ExtenderArgs,
    FilterResult,
    HostPriority,
    MetaPod,
    MetaVictims,
    Pod,
    PreemptionArgs,
    PreemptionResult,
)

log = logging.getLogger("sparse.service")

NodeMeta = tuple[str, dict[str, str] | None, dict[str, str] | None]  # name, annotations, labels

BIND_ATTEMPTS = 3  # a conflict means another replica booked first: re-plan on fresh state
PENDING_PODS = 50_000  # filter-time demands kept for bind
# Prioritize comes right after filter in one scheduling cycle: it reuses the costs filter
# computed if they are this fresh (it only advises; bind re-plans on the current ledger).
CYCLE_COSTS = 4096
CYCLE_COSTS_MAX_AGE_S = 1.0


@dataclass
class Outcome:
    """Observers (metrics, Kubernetes events) hear about decisions through this."""

    verb: str
    namespace: str
    name: str
    uid: str
    ok: bool
    message: str = ""
    reservation: Reservation | None = None
    interference: float | None = None  # throughput lost with the share GPU's residents

    @property
    def pod(self) -> str:
        return f"{self.namespace}/{self.name}"


class Scheduler:
    def __init__(
        self,
        *,
        inventory: Inventory,
        ledger: LedgerStore,
        matrix: InterferenceMatrix,
        policy: Policy,
        demand_source: DemandSource | None = None,
        binder: Binder | None = None,
        clock: Callable[[], float] = time.time,
        reservation_ttl_s: float = 120.0,
        observers: Iterable[Callable[[Outcome], None]] = (),
    ) -> None:
        self.ledger = ledger
        self.matrix = matrix
        self.policy = policy
        self.demand_source = demand_source or NoPredictions()
        self.binder = binder or LedgerOnlyBinder()
        self.clock = clock
        self.reservation_ttl_s = reservation_ttl_s
        self.observers = list(observers)
        self._state = ClusterState.build(inventory, matrix)
        self._pending: OrderedDict[str, tuple[Pod, PodDemand]] = OrderedDict()
        self._seen_annotation: dict[str, str] = {}
        self._last_interference: dict[str, float] = {}
        self._cycle_costs: OrderedDict[str, tuple[float, list[str], np.ndarray]] = OrderedDict()

    # --- state ----------------------------------------------------------------------------

    @property
    def inventory(self) -> Inventory:
        return self._state.inventory

    @property
    def state(self) -> ClusterState:
        """The last view (possibly a little stale; ``view()`` refreshes it)."""
        return self._state

    async def view(self) -> ClusterState:
        """The state matching the ledger's current version: when it moved, the changes since
        the cached version are applied (the ledger's change log); a full snapshot is read only
        when they are no longer all kept (or at start)."""
        version = await self.ledger.version()
        state = self._state
        if version != state.version:
            delta = await self.ledger.changes(state.version) if state.version >= 0 else None
            if delta is None:
                version, reservations = await self.ledger.snapshot()
                self._state = ClusterState.build(
                    state.inventory, self.matrix, reservations.values(), version
                )
            else:
                version, changes = delta
                for uid, reservation in changes:
                    if reservation is None:
                        state.unapply(uid)
                    else:
                        state.apply(reservation)  # replaces an earlier booking of the pod
                state.version = version
        return self._state

    def set_inventory(self, inventory: Inventory) -> None:
        self._state = self._state.with_inventory(inventory)

    def update_node(self, name: str, annotations: dict[str, str] | None,
                    labels: dict[str, str] | None = None) -> bool:
        """Refresh one node from its annotations; True when the inventory changed."""
        return self.update_nodes([(name, annotations, labels)]) > 0

    def update_nodes(self, nodes: Iterable[NodeMeta], base: Inventory | None = None) -> int:
        """Refresh nodes from their inventory annotations, rebuilding the state once.

        With ``base`` the inventory is replaced: ``base`` (e.g. the --nodes file) plus every
        given node that carries the annotation (a re-list). Returns how many nodes changed."""
        current = base if base is not None else self.inventory
        if base is not None:
            self._seen_annotation = {}
        changed: dict[str, NodeGpus] = {}
        for name, node_annotations, labels in nodes:
            raw = (node_annotations or {}).get(ANN_GPU_INVENTORY)
            if raw is None or self._seen_annotation.get(name) == raw:
                continue  # the common case on every full-Node request: nothing changed
            self._seen_annotation[name] = raw
            try:
                node = node_from_annotations(name, node_annotations, labels)
            except InvalidInventory as exc:
                log.warning("ignoring node %s: %s", name, exc)
                continue
            known = current.nodes.get(name)
            if node is not None and (known is None or known.gpus != node.gpus):
                changed[name] = node
        if not changed and base is None:
            return 0
        merged = dict(current.nodes)
        owner = {g.uuid: n.name for n in merged.values() for g in n.gpus}
        for name, node in changed.items():
            clash = [g.uuid for g in node.gpus if owner.get(g.uuid, name) != name]
            if clash:
                log.warning("ignoring node %s: GPU %s already belongs to node %s", name,
                            clash[0], owner[clash[0]])
                self._seen_annotation.pop(name, None)
                continue
            for g in merged.get(name, node).gpus:
                owner.pop(g.uuid, None)
            owner.update({g.uuid: name for g in node.gpus})
            merged[name] = node
        self.set_inventory(Inventory(merged))
        return len(changed)

    def remove_node(self, name: str) -> None:
        self._seen_annotation.pop(name, None)
        if name in self.inventory.nodes:
            self.set_inventory(self.inventory.without_node(name))

    def _after_change(self, version: int, add: Reservation | None = None,
                      drop: str | None = None) -> None:
        """Apply our own change at once when nothing else happened in between; otherwise the
        next ``view()`` replays every change since the cached version, ours included."""
        state = self._state
        if version == state.version + 1:
            if drop is not None:
                state.unapply(drop)
            if add is not None:
                state.apply(add)
            state.version = version

    def _notify(self, outcome: Outcome) -> None:
        for observer in self.observers:
            try:
                observer(outcome)
            except Exception:  # an observer must never break scheduling
                log.exception("observer failed")

    # --- demand ---------------------------------------------------------------------------

    async def demand_of(self, pod: Pod) -> PodDemand:
        prediction = await self.demand_source.get(pod.metadata.uid)
        demand = pod_demand(pod, prediction)
        self._pending[pod.metadata.uid] = (pod, demand)
        self._pending.move_to_end(pod.metadata.uid)
        while len(self._pending) > PENDING_PODS:
            self._pending.popitem(last=False)
        return demand

    def _own_excluded(self, state: ClusterState, uid: str) -> ClusterState:
        """A pod being rescheduled must not compete with its own stale booking."""
        if uid in state.reservations and state.reservations[uid].state != STATE_BOUND:
            state = state.copy()
            state.unapply(uid)
        return state

    # --- verbs ----------------------------------------------------------------------------

    async def filter(self, args: ExtenderArgs) -> FilterResult:
        pod = args.pod
        if args.nodes is not None:
            self.update_nodes((n.metadata.name, n.metadata.annotations, n.metadata.labels)
                              for n in args.nodes)
        if not wants_gpu(pod):
            return protocol.filter_result(list(args.node_names), {}, {}, args)
        try:
            demand = await self.demand_of(pod)
        except InvalidDemand as exc:
            reason = f"invalid GPU request: {exc}"
            self._notify(Outcome("filter", *pod_ref(pod), False, reason))
            return protocol.filter_result([], {}, {n: reason for n in args.node_names}, args)
        state = self._own_excluded(await self.view(), demand.uid)
        result = fit(state, demand, args.node_names)
        fitting = np.flatnonzero(result.fits)
        passed = [result.names[i] for i in fitting]
        if not passed:
            why = summarize(result.failed, result.unresolvable)
            self._notify(Outcome("filter", *pod_ref(pod), False, why))
        elif len(passed) > 1:  # prioritize follows in the same cycle: cost the nodes once
            costs = node_costs(state, demand, result, self.policy)[fitting]
            self._cycle_costs[demand.uid] = (self.clock(), passed, costs)
            self._cycle_costs.move_to_end(demand.uid)
            while len(self._cycle_costs) > CYCLE_COSTS:
                self._cycle_costs.popitem(last=False)
        return protocol.filter_result(passed, result.failed, result.unresolvable, args)

    async def prioritize(self, args: ExtenderArgs) -> list[HostPriority]:
        pod = args.pod
        if not wants_gpu(pod):
            return zero_scores(args.node_names)
        cached = self._cycle_costs.pop(pod.metadata.uid, None)
        if cached is not None and self.clock() - cached[0] <= CYCLE_COSTS_MAX_AGE_S:
            _, passed, costs = cached
            if passed != args.node_names:  # normally the very list filter passed
                by_node = dict(zip(passed, costs.tolist(), strict=True))
                # nodes filter rejected are absent: infeasible, score 0
                costs = np.array([by_node.get(n, np.inf) for n in args.node_names])
            return [HostPriority(Host=n, Score=s) for n, s in
                    zip(args.node_names, scores_from_costs(costs), strict=True)]
        try:
            demand = await self.demand_of(pod)
        except InvalidDemand:
            return zero_scores(args.node_names)
        state = self._own_excluded(await self.view(), demand.uid)
        result = fit(state, demand, args.node_names)
        scores = scores_from_costs(node_costs(state, demand, result, self.policy))
        if len(result.names) == len(args.node_names):  # every candidate known: same order
            return [HostPriority(Host=n, Score=s) for n, s in zip(result.names, scores,
                                                                  strict=True)]
        by_name = dict(zip(result.names, scores, strict=True))
        return [HostPriority(Host=n, Score=by_name.get(n, 0)) for n in args.node_names]

    async def _demand_for_bind(self, args: BindingArgs) -> PodDemand | None:
        cached = self._pending.get(args.pod_uid)
        if cached is not None:
            return cached[1]
        pod = await self.binder.fetch_pod(args.pod_namespace, args.pod_name)
        if pod is None or pod.metadata.uid != args.pod_uid:
            return None
        return await self.demand_of(pod)

    async def bind(self, args: BindingArgs) -> BindingResult:
        key = f"{args.pod_namespace}/{args.pod_name}"
        ref = (args.pod_namespace, args.pod_name, args.pod_uid)
        try:
            reservation = await self._reserve_for_bind(args)
        except (InvalidDemand, ReservationConflict, LookupError) as exc:
            self._notify(Outcome("bind", *ref, False, str(exc)))
            return BindingResult(Error=str(exc))
        try:
            await self.binder.bind(args, reservation)
        except BindError as exc:
            await self.release(args.pod_uid, keep_pending=True)
            log.warning("bind %s to %s failed, reservation rolled back: %s", key, args.node, exc)
            self._notify(Outcome("bind", *ref, False, f"binding failed: {exc}"))
            return BindingResult(Error=f"binding {key} to {args.node} failed: {exc}")
        confirmed = await self.confirm(args.pod_uid)
        self._pending.pop(args.pod_uid, None)
        self._notify(Outcome("bind", *ref, True, reservation=confirmed or reservation,
                             interference=self._last_interference.pop(args.pod_uid, None)))
        return BindingResult()

    async def _reserve_for_bind(self, args: BindingArgs) -> Reservation:
        existing = await self.ledger.get(args.pod_uid)
        if existing is not None:
            if existing.node == args.node:
                return existing  # a retried bind: book nothing twice
            if existing.state == STATE_BOUND:
                raise ReservationConflict(
                    f"pod {args.pod_namespace}/{args.pod_name} is already bound to {existing.node}"
                )
            await self.release(args.pod_uid, keep_pending=True)
        demand = await self._demand_for_bind(args)
        if demand is None:
            raise LookupError(
                f"no GPU demand known for pod {args.pod_namespace}/{args.pod_name}"
                f" ({args.pod_uid}); it was not filtered by this extender"
            )
        last = ""
        for _ in range(BIND_ATTEMPTS):
            state = await self.view()
            choice = assign(state, demand, args.node, self.policy)
            if choice is None:
                why = fit(state, demand, [args.node])
                reason = summarize(why.failed, why.unresolvable) or "does not fit"
                raise ReservationConflict(f"node {args.node} no longer fits the pod: {reason}")
            reservation = reservation_for(
                demand, choice, state, self.clock(), self.reservation_ttl_s
            )
            capacities = state.capacities(reservation.gpus)
            try:
                version = await self.ledger.reserve(reservation, capacities)
            except ReservationConflict as exc:
                last = str(exc)
                continue  # the next view() replays what the other replica booked
            self._after_change(version, add=reservation)
            self._last_interference[demand.uid] = placement_loss(state, demand, choice)
            return reservation
        raise ReservationConflict(f"node {args.node}: GPUs taken concurrently ({last})")

    async def confirm(self, pod_uid: str) -> Reservation | None:
        """The pod is bound: its reservation no longer expires."""
        confirmed = await self.ledger.confirm(pod_uid)
        if confirmed is not None:
            self._after_change(await self.ledger.version(), add=confirmed)
        return confirmed

    async def release(self, pod_uid: str, keep_pending: bool = False) -> Reservation | None:
        """The pod is gone or finished (or its binding failed): give its GPUs back."""
        dropped = await self.ledger.release(pod_uid)
        if dropped is not None:
            self._after_change(await self.ledger.version(), drop=pod_uid)
        if not keep_pending:
            self._pending.pop(pod_uid, None)
        return dropped

    async def adopt(self, reservation: Reservation) -> bool:
        """Record a booking found on an API object (start-up rebuild, or another replica's
        pod seen by the watch). Already present: nothing to do."""
        state = self._state
        # A GPU that left the inventory still holds what the pod holds: record the fact.
        capacities = {g: (state.capacities([g])[g] if g in state.gpu_index
                          else GpuCapacity(mem_mib=2**40, milli=2**40))
                      for g in reservation.gpus}
        try:
            version = await self.ledger.reserve(reservation, capacities)
        except ReservationConflict as exc:
            log.error("cannot adopt reservation of %s/%s: %s", reservation.namespace,
                      reservation.name, exc)
            return False
        self._after_change(version, add=reservation)
        return True

    async def expire(self) -> list[Reservation]:
        dropped = await self.ledger.expire(self.clock())
        if dropped:  # the next view() replays the drops from the ledger's change log
            for r in dropped:
                log.warning("reservation of %s/%s on %s expired unbound", r.namespace, r.name,
                            r.node)
        return dropped

    async def preempt(self, args: PreemptionArgs) -> PreemptionResult:
        """Keep the nodes where evicting the proposed victims frees enough GPU for the pod."""
        if not wants_gpu(args.pod):
            return PreemptionResult(NodeNameToMetaVictims={
                node: MetaVictims(Pods=[MetaPod(UID=u) for u in v.pod_uids],
                                  NumPDBViolations=v.num_pdb_violations)
                for node, v in args.victims.items()
            })
        try:
            demand = await self.demand_of(args.pod)
        except InvalidDemand:
            return PreemptionResult()
        base = self._own_excluded(await self.view(), demand.uid)
        out: dict[str, MetaVictims] = {}
        for node, victims in args.victims.items():
            what_if = base.copy()
            for uid in victims.pod_uids:
                what_if.unapply(uid)
            if assign(what_if, demand, node, self.policy) is not None:
                out[node] = MetaVictims(
                    Pods=[MetaPod(UID=u) for u in victims.pod_uids],
                    NumPDBViolations=victims.num_pdb_violations,
                )
        return PreemptionResult(NodeNameToMetaVictims=out)


def placement_loss(state: ClusterState, demand: PodDemand, choice: Assignment) -> float | None:
    """Pairwise throughput lost by a share with the jobs already on its GPU (before booking)."""
    if choice.share is None:
        return None
    i = state.gpu_index[choice.share]
    loss = state.matrix.placement_loss(demand.job_class, gpu_fraction(demand.share_milli),
                                       state.class_frac[i:i + 1])
    return float(loss[0])


def zero_scores(names: list[str]) -> list[HostPriority]:
    return [HostPriority(Host=n, Score=0) for n in names]


def pod_ref(pod: Pod) -> tuple[str, str, str]:
    return (pod.metadata.namespace or "default", pod.metadata.name, pod.metadata.uid)


def summarize(failed: dict[str, str], unresolvable: dict[str, str], limit: int = 3) -> str:
    """Group node reasons for a one-line event: 'reason (n nodes); ...'."""
    counts: dict[str, int] = {}
    for reason in [*unresolvable.values(), *failed.values()]:
        counts[reason] = counts.get(reason, 0) + 1
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:limit]
    return "; ".join(f"{r} ({n} node{'s' if n > 1 else ''})" for r, n in top)
