"""New policy inputs taken into use between requests, with the caches already priced for them.

sparse re-reads its learned pod mix every few hundred pods and a worker solves the new mix's
share price table (``extender.pricesolver``). Either changes a cost term on every GPU, so the
first pod of each shape after it would price the whole inventory again inside its request:
at 5,000 nodes a few such requests of 10-30 ms each, and one 2-3 ms verdict refill per shape
the cluster runs. The policy runs with ``renew="prepared"`` here: new inputs wait
(``Sparse.pending``) while this adapter builds successor caches (a ``CostCache`` and its
``NodeVerdicts``) priced with them, a slice of nodes at a time, for the shapes asked last;
then the policy adopts the inputs and the successors replace the caches in one step, between
two requests. A node booked while its slice waited is stale in the successor by its stamp and
priced when a request next asks for it, as after any booking.

Slices run on the event loop while the extender is idle: once no verb started for
``IDLE_S``, one slice, sized to take about half a millisecond (``SLICE_S``) but never fewer
than ``MIN_NODES`` nodes, then the next after a pause (``PAUSE_S``) in which a request that
came is served first; what is priced does not depend on the slices, only when it is. A
scheduler leaves such gaps between its cycles (its own filtering and scoring of each pod).
Where it leaves none, the renewal waits, and the policy adopts the waiting inputs at its next
re-read at the latest (``Sparse.note``), the caches then pricing them on demand as an inline
policy's do; ``finish`` completes a renewal at once. Entries whose inputs did not change
(the interference term) are shared with the caches in use, not priced again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Hashable
from typing import Protocol

import numpy as np

from extender.demand import PodDemand
from extender.placement import ClusterState, Policy
from extender.verbs.costcache import CostCache
from extender.verbs.nodecache import NodeVerdicts

log = logging.getLogger("sparse.renewal")

NODES_PER_SLICE = 512  # the first slice; then sized to take about SLICE_S
SLICE_S = 0.0005  # a request that arrives while a slice runs waits at most about this
# Below a few hundred nodes a slice is mostly its fixed part (each term's per-call work over
# a new model, about 0.5-1 ms of CPU here): at 5,000 nodes a renewal of one shape in 64-node
# slices took 78 slices and 86 ms of CPU, in 256-node ones about 20 and 30 ms.
MIN_NODES, MAX_NODES = 256, 2048
IDLE_S = 0.001  # no verb for this long: the extender is idle and a slice may run
PAUSE_S = 0.001  # between two slices: a request that came meanwhile is served first
SHAPES = 64  # the shapes asked last that are priced ahead (others price when next asked)


class Caches(Protocol):
    """What this adapter renews: the scheduler's policy, caches and last view."""

    policy: Policy
    cost_cache: CostCache
    node_verdicts: NodeVerdicts

    @property
    def state(self) -> ClusterState: ...


class _Successor:
    """The caches being priced for one set of inputs, and how far they got."""

    def __init__(self, inputs: object, owner: Caches, state: ClusterState) -> None:
        self.inputs = inputs
        self.inventory = state.gpu_uuid
        self.cost_cache = CostCache(owner.cost_cache.shapes, owner.cost_cache.budget_bytes)
        self.cost_cache.whole_refills = False
        self.cost_cache.prepare_for(state)
        self.node_verdicts = NodeVerdicts(self.cost_cache, owner.node_verdicts.shapes)
        self.shapes: list[tuple[Hashable, PodDemand]] = owner.node_verdicts.recent_shapes(SHAPES)
        self.shape = 0
        self.offset = 0
        self.told: tuple | None = None
        self.warmed = False

    @property
    def done(self) -> bool:
        return self.shape >= len(self.shapes)

    def advance(self, owner: Caches, state: ClusterState, nodes: int) -> None:
        """Price the next slice of nodes of the current shape (first: what the inputs
        compute once for every node, e.g. a new model's per-node aggregates)."""
        if not self.warmed:
            self.warmed = True
            warm = getattr(self.inputs, "warm", None)
            if warm is not None:
                warm(state)
                return
        key, demand = self.shapes[self.shape]
        policy = owner.policy
        if self.offset == 0:
            terms = policy.cost_terms(state, demand, self.inputs)  # type: ignore[attr-defined]
            self.told = NodeVerdicts.terms_told(terms)
            if self.told is None:  # reads more than the nodes' own state: priced when asked
                self.shape += 1
                return
            self.cost_cache.share_from(owner.cost_cache, policy, self.told[2])
        total = len(state.node_names)
        stop = min(self.offset + nodes, total)
        self.node_verdicts.prefill(policy, state, key, demand, self.told,  # type: ignore[arg-type]
                                   np.arange(self.offset, stop), seed=owner.node_verdicts)
        self.offset = stop
        if stop >= total:
            self.shape, self.offset, self.told = self.shape + 1, 0, None


class CacheRenewal:
    """The scheduler's renewal of its caches for the policy's waiting inputs: told of each
    verb's start and end (``begin``, ``end``), it runs slices on the event loop while no verb
    is served and swaps the caches in once a successor is complete."""

    def __init__(self, owner: Caches, nodes_per_slice: int = NODES_PER_SLICE) -> None:
        self.owner = owner
        self.nodes_per_slice = nodes_per_slice
        self.in_flight = 0  # verbs being served (slices wait until none is)
        self.verbs = 0  # verbs started
        self.renewed = 0  # inputs adopted with their caches
        self.failed = 0
        self.steps = 0  # slices priced (and swaps made)
        self.step_seconds = 0.0  # the CPU they took on the serving thread
        self._successor: _Successor | None = None
        self._armed: int | None = None  # the verb count when the timer was set
        self.in_idle_time = True  # False: slices run only when ``step`` or ``finish`` asks

    @property
    def active(self) -> bool:
        return getattr(self.owner.policy, "pending", None) is not None

    def begin(self) -> None:
        """A verb starts."""
        self.in_flight += 1
        self.verbs += 1

    def end(self) -> None:
        """A verb ended: a slice may run once no verb came for ``IDLE_S``."""
        self.in_flight -= 1
        self._arm(IDLE_S)

    def _arm(self, delay: float) -> None:
        if (self._armed is not None or not self.in_idle_time or not self.active
                or self.owner.policy.pending() is None):  # type: ignore[attr-defined]
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop: the policy adopts at its next re-read
            return
        self._armed = self.verbs
        loop.call_later(delay, self._tick)

    def _tick(self) -> None:
        armed, self._armed = self._armed, None
        if self.in_flight:
            return  # the verb's end sets the timer again
        if armed != self.verbs:  # a verb came and went: not idle yet
            self._arm(IDLE_S)
            return
        if self.step():
            self._arm(PAUSE_S)

    def step(self) -> bool:
        """Price one slice, or adopt the inputs and swap the caches once all are priced.
        True while work is left. Never raises: on a failure the inputs are adopted as an
        inline policy would (the caches price them on demand)."""
        started, renewed = time.thread_time(), self.renewed
        try:
            more = self._step()
            if more or self.renewed != renewed:  # a slice priced, or the swap made
                self.steps += 1
            return more
        except Exception:
            self.failed += 1
            log.exception("cache renewal failed; the new inputs are priced on demand")
            pending = self.owner.policy.pending()  # type: ignore[attr-defined]
            if pending is not None:
                self.owner.policy.adopt(pending)  # type: ignore[attr-defined]
            self._successor = None
            return False
        finally:
            self.step_seconds += time.thread_time() - started

    def finish(self) -> None:
        """Run every step now (tests; callers without an event loop)."""
        while self.step():
            pass

    def _step(self) -> bool:
        policy = self.owner.policy
        pending = policy.pending() if self.active else None  # type: ignore[attr-defined]
        if pending is None:
            self._successor = None
            return False
        state = self.owner.state
        successor = self._successor
        if (successor is None or successor.inputs is not pending
                or successor.inventory is not state.gpu_uuid):
            successor = self._successor = _Successor(pending, self.owner, state)
        if not successor.done:
            started = time.perf_counter()
            successor.advance(self.owner, state, self.nodes_per_slice)
            # The next slice sized to take about SLICE_S (the work per node varies: the
            # first shape of a fragmentation key prices every typical task).
            took = time.perf_counter() - started
            scale = min(max(SLICE_S / max(took, 1e-6), 0.5), 2.0)
            self.nodes_per_slice = int(min(max(self.nodes_per_slice * scale, MIN_NODES),
                                           MAX_NODES))
            return True
        self._successor = None
        if policy.adopt(pending):  # type: ignore[attr-defined]
            successor.cost_cache.take_over(self.owner.cost_cache)
            successor.node_verdicts.take_over(self.owner.node_verdicts)
            self.owner.cost_cache = successor.cost_cache
            self.owner.node_verdicts = successor.node_verdicts
            self.renewed += 1
        return False
