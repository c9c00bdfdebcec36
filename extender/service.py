"""The scheduler seam: the state the four verbs share, and the verbs themselves.

Stateful and async (it awaits the ledger, the demand source and the binder); every decision is
made by ``extender.placement`` on a ClusterState kept in step with the ledger's version
(``extender.ledger.view``). Each verb lives in its own module under ``extender.verbs``; a
booking's life after bind (confirm, release, adopt, expire) in ``extender.ledger.bookings``.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

from extender import stages
from extender.annotations import ANN_SOLO_PROFILE, PREDICTED_ANNOTATIONS
from extender.binder import Binder, LedgerOnlyBinder
from extender.demand import PodDemand, pod_demand
from extender.demandsource import DemandSource, NoPredictions
from extender.errors import LedgerUnavailable
from extender.hostbook import HostBook
from extender.interference import InterferenceMatrix
from extender.interference.pairmodel import default_pair_model
from extender.interference.profiles import ProfileBook, parse_profile
from extender.inventory import Inventory
from extender.ledger import bookings
from extender.ledger.health import LedgerHealth
from extender.ledger.rules import STATE_BOUND, Reservation
from extender.ledger.store import LedgerStore
from extender.ledger.upkeep import BindUpkeep
from extender.ledger.view import LedgerView
from extender.livepairs import LivePairs
from extender.nodeannotations import NodeAnnotations, NodeMeta
from extender.outcome import Outcome
from extender.pending import PendingPods
from extender.placement import ClusterState, Policy
from extender.placement.holds import HoldBook
from extender.placement.locality import LocalityIndex
from extender.pricesolver import PriceSolver
from extender.protocol import (
    BindingArgs,
    BindingResult,
    ExtenderArgs,
    FilterResult,
    HostPriority,
    NodeLite,
    Pod,
    PreemptionArgs,
    PreemptionResult,
)
from extender.verbs import bind as bind_verb
from extender.verbs import filter as filter_verb
from extender.verbs import preempt as preempt_verb
from extender.verbs import prioritize as prioritize_verb
from extender.verbs.costcache import CachedPolicy, CostCache, CycleEntry
from extender.verbs.localitywait import ReaderWaits
from extender.verbs.nodecache import NodeVerdicts
from extender.verbs.renewal import CacheRenewal

__all__ = ["Outcome", "Scheduler"]

log = logging.getLogger("sparse.service")


class CycleCosts:
    """Prioritize comes right after filter in one scheduling cycle: it reuses the costs filter
    computed if they are this fresh; nodes booked since are costed again (verbs.prioritize)."""

    def __init__(self, size: int = 4096, max_age_s: float = 1.0) -> None:
        self.size = size
        self.max_age_s = max_age_s
        self._by_uid: OrderedDict[str, tuple[float, CycleEntry]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def put(self, uid: str, now: float, entry: CycleEntry) -> None:
        self._by_uid[uid] = (now, entry)
        self._by_uid.move_to_end(uid)
        while len(self._by_uid) > self.size:
            self._by_uid.popitem(last=False)

    def take(self, uid: str, now: float) -> CycleEntry | None:
        cached = self._by_uid.pop(uid, None)
        if cached is None or now - cached[0] > self.max_age_s:
            self.misses += 1
            return None
        self.hits += 1
        return cached[1]


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
        bind_timeout_s: float = 3.0,
        trust_request_inventory: bool = False,
        locality: LocalityIndex | None = None,
        live_pairs: LivePairs | None = None,
        filter_best_within: float | None = None,
        filter_best_single: bool = False,
    ) -> None:
        self.ledger = ledger
        self.matrix = matrix
        self.policy = policy
        self.demand_source = demand_source or NoPredictions()
        self.binder = binder or LedgerOnlyBinder()
        self.clock = clock
        self.reservation_ttl_s = reservation_ttl_s
        self.observers = list(observers)
        # A request's Nodes.items may change the inventory only when the operator opts in.
        self.trust_request_inventory = trust_request_inventory
        self.cycle_costs = CycleCosts()
        # Set: filter answers only the nodes within this many score points of the best (the
        # scheduler calls no prioritize; verbs.filter).
        self.filter_best_within = filter_best_within
        self.filter_best_single = filter_best_single  # and only the one best node
        self.locality = locality or LocalityIndex()  # node caches, racks, store shards
        self.cost_cache = CostCache()
        self.node_verdicts = NodeVerdicts(self.cost_cache)  # filter's fit and cost per node
        self.bind_reuse = True  # bind takes filter's pick on a node unchanged since (exact)
        self.views = LedgerView(self, ClusterState.build(inventory, matrix))
        self.pending = PendingPods()  # filter-time pods and demands, for bind
        self.holds = HoldBook()  # a node held for a waiting gang (verbs/holdfilter.py)
        self.reader_waits = ReaderWaits()  # bounds a reader's wait for a warm node
        self.locality_waits = 0  # filters that kept a reader waiting (verbs/localitywait.py)
        self.node_annotations = NodeAnnotations()  # what each node's annotation said
        # The Binding call is abandoned after bind_timeout_s; an unbound booking lives that
        # long past the TTL, so it can never expire while its Binding is in flight.
        self.bind_timeout_s = bind_timeout_s
        self.health = LedgerHealth()  # /readyz: 503 while the ledger's store is unreachable
        self.upkeep = BindUpkeep()  # bookings of failed binds to drop, bound ones to confirm
        # Run after a store disruption rebuilt the view (LedgerView): e.g. re-adopt bound pods.
        self.resync_hooks = self.views.resync_hooks
        # Pair estimates learned from running jobs (Redis, pair worker); by default read
        # from the predictions' Redis when there is one.
        client = getattr(self.demand_source, "client", None)
        self.live_pairs = live_pairs or (LivePairs(client, matrix) if client is not None
                                         else None)
        # Solo profiles of pods that carry one (annotation): the learned pair model scores them.
        pair_model = default_pair_model()
        self.profiles = ProfileBook(pair_model) if pair_model is not None else None
        self.views.state.profiles = self.profiles
        # Each node's CPU and memory left (allocatable minus bound pods' requests), fed by
        # the watches, full Nodes in requests and our own binds; attached to every view.
        self.hosts = HostBook()
        # A deferred policy's share price tables, solved in a worker (extender.pricesolver):
        # polled after each verb that may have re-read its learned mix.
        self.prices = PriceSolver(policy)
        # A prepared policy's new inputs (a re-read mix, an installed table), adopted once the
        # caches are priced for them, a slice at a time between verbs (verbs.renewal).
        self.renewal = CacheRenewal(self)

    # --- verbs (one module each) ----------------------------------------------------------

    # A store that cannot be reached answers the protocol's Error (the scheduler retries),
    # never an HTTP error; /readyz says so until a ping succeeds again.

    async def filter(self, args: ExtenderArgs) -> FilterResult:
        self.renewal.begin()
        try:
            return await filter_verb.run(self, args)
        except LedgerUnavailable as exc:
            self.health.failed(exc)
            return FilterResult(Error=str(exc))
        finally:
            self.prices.poll()
            self.renewal.end()

    async def prioritize(self, args: ExtenderArgs) -> list[HostPriority]:
        self.renewal.begin()
        try:
            return await prioritize_verb.run(self, args)
        except LedgerUnavailable as exc:  # scores only advise: no scores, no contribution
            self.health.failed(exc)
            return []
        finally:
            self.prices.poll()
            self.renewal.end()

    async def bind(self, args: BindingArgs) -> BindingResult:
        self.renewal.begin()
        try:
            return await bind_verb.run(self, args)
        except LedgerUnavailable as exc:
            self.health.failed(exc)
            return BindingResult(Error=str(exc))
        finally:
            self.prices.poll()
            self.renewal.end()

    async def preempt(self, args: PreemptionArgs) -> PreemptionResult:
        try:
            return await preempt_verb.run(self, args)
        except LedgerUnavailable as exc:  # no node: nothing is evicted for nothing
            self.health.failed(exc)
            return PreemptionResult()

    @property
    def costing_policy(self) -> Policy:
        """The policy with its costs cached across pods of one shape (verbs.costcache)."""
        return CachedPolicy(self.policy, self.cost_cache)

    # --- state ----------------------------------------------------------------------------

    @property
    def inventory(self) -> Inventory:
        return self.views.state.inventory

    @property
    def state(self) -> ClusterState:
        """The last view (possibly a little stale; ``view()`` refreshes it)."""
        return self.views.state

    async def view(self, fresh: bool = False) -> ClusterState:
        """The state matching the ledger's current version (``LedgerView.current``)."""
        return await self.views.current(fresh)

    def set_inventory(self, inventory: Inventory) -> None:
        self.views.state = self.views.state.with_inventory(inventory)

    def update_node(self, name: str, annotations: dict[str, str] | None,
                    labels: dict[str, str] | None = None) -> bool:
        """Refresh one node from its annotations; True when the inventory changed."""
        return self.update_nodes([(name, annotations, labels)]) > 0

    def update_nodes(self, nodes: Iterable[NodeMeta], base: Inventory | None = None) -> int:
        """Refresh nodes from their inventory annotations, rebuilding the state once.

        With ``base`` the inventory is replaced: ``base`` (e.g. the --nodes file) plus every
        given node that carries the annotation (a re-list). Returns how many nodes changed."""
        nodes = list(nodes)
        for name, node_annotations, labels in nodes:
            self.locality.observe_node(name, node_annotations, labels)
        inventory, changed = self.node_annotations.merge(self.inventory, nodes, base)
        if inventory is not None:
            self.set_inventory(inventory)
        return changed

    def observe_allocatable(self, nodes: Iterable[NodeLite]) -> None:
        """Full Node objects of a filter request: their allocatable CPU and memory, for nodes
        the API server's watch has not described; the next view carries them."""
        self.hosts.request_nodes([
            (node.metadata.name, alloc.cpu, alloc.memory) for node in nodes
            if node.status is not None and (alloc := node.status.allocatable) is not None])

    def remove_node(self, name: str) -> None:
        self.hosts.forget_node(name)
        self.node_annotations.forget(name)
        self.locality.forget_node(name)
        if name in self.inventory.nodes:
            self.set_inventory(self.inventory.without_node(name))

    def after_change(self, version: int, add: Reservation | None = None,
                     drop: str | None = None) -> None:
        self.views.after_change(version, add, drop)

    def notify(self, outcome: Outcome) -> None:
        for observer in self.observers:
            try:
                observer(outcome)
            except Exception:  # an observer must never break scheduling
                log.exception("observer failed")

    # --- demand ---------------------------------------------------------------------------

    async def demand_of(self, pod: Pod) -> PodDemand:
        if self.reads_prediction(pod):
            with stages.stage("demand"):
                prediction = await self.demand_source.get(pod.metadata.uid)
        else:
            prediction = None
        demand = pod_demand(pod, prediction)
        profile = (pod.metadata.annotations or {}).get(ANN_SOLO_PROFILE)
        if profile and self.profiles is not None:
            self.profiles.add(pod.metadata.uid, parse_profile(profile, ANN_SOLO_PROFILE))
        self.pending.put(pod, demand)
        return demand

    def reads_prediction(self, pod: Pod) -> bool:
        """Whether ``demand_of`` asks the demand source: the predictor writes a demand only for
        pods that describe their model, so other pods need no read."""
        if isinstance(self.demand_source, NoPredictions):
            return False
        annotations = pod.metadata.annotations or {}
        return any(a in annotations for a in PREDICTED_ANNOTATIONS)

    def own_excluded(self, state: ClusterState, uid: str) -> ClusterState:
        """A pod being rescheduled must not compete with its own stale booking."""
        if uid in state.reservations and state.reservations[uid].state != STATE_BOUND:
            state = state.copy()
            state.unapply(uid)
        return state

    def pending_pod(self, uid: str) -> Pod | None:
        return self.pending.pod(uid)

    def pending_demand(self, uid: str) -> PodDemand | None:
        return self.pending.demand(uid)

    def forget_pending(self, uid: str) -> None:
        self.pending.forget(uid)

    # --- lifecycle (extender.ledger.bookings) --------------------------------------------

    async def confirm(self, pod_uid: str, booked: Reservation | None = None
                      ) -> Reservation | None:
        return await bookings.confirm(self, pod_uid, booked)

    async def release(self, pod_uid: str, keep_pending: bool = False,
                      only_if: Reservation | None = None) -> Reservation | None:
        return await bookings.release(self, pod_uid, keep_pending, only_if)

    async def adopt(self, reservation: Reservation) -> bool:
        return await bookings.adopt(self, reservation)

    async def expire(self) -> list[Reservation]:
        return await bookings.expire(self)
