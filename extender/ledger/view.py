"""The extender's view of the ledger: a ClusterState kept in step with the ledger's version.

Changes since the cached version are replayed from the store's change log (or from what a
background follower read); a full snapshot is read only when they are no longer all kept, at
start, or after the store was disrupted (restart, failover), when the resync hooks repair it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from extender.errors import LedgerUnavailable
from extender.ledger.rules import Reservation
from extender.placement import ClusterState

if TYPE_CHECKING:
    from extender.service import Scheduler

log = logging.getLogger("sparse.service")


class LedgerView:
    def __init__(self, s: Scheduler, state: ClusterState) -> None:
        self._s = s  # its ledger, matrix, live pairs, profiles and host book
        self.state = state
        self._disruptions = 0  # the store's count when the view was last rebuilt
        self._rebuilding = asyncio.Lock()
        # Called after the view was rebuilt because the store was disrupted (restart,
        # failover): e.g. re-adopt bound pods from the API server, the source of truth.
        self.resync_hooks: list[Callable[[], Awaitable[None]]] = []

    async def current(self, fresh: bool = False) -> ClusterState:
        """The state matching the ledger's current version: when it moved, the changes since
        the cached version are applied (the ledger's change log); a full snapshot is read only
        when they are no longer all kept (or at start). Where a background task follows the
        log (``ledger.follower``), what it has read is applied without a round trip, unless
        ``fresh`` (a bind re-planning after a conflict)."""
        s = self._s
        live = s.live_pairs
        if live is not None:  # polled in the background when the app runs: no round trip
            matrix = live.take() if live.polling else await live.refresh()
            if matrix is not None:
                s.matrix = self.state.matrix = matrix
        disruptions = getattr(s.ledger, "disruptions", 0)
        if disruptions != self._disruptions:
            return await self._rebuild(disruptions)
        state = self.state
        # One read: the version and whatever changed since ours (nothing when it stands).
        follower = None if fresh else getattr(s.ledger, "follower", None)
        delta = (follower.changes(state.version) if follower is not None else None)
        if delta is None and state.version >= 0:
            delta = await s.ledger.changes(state.version)
        if delta is None:
            version, reservations = await s.ledger.snapshot()
            self.state = ClusterState.build(
                state.inventory, s.matrix, reservations.values(), version
            )
        elif delta[0] != state.version:
            version, changes = delta
            for uid, reservation in changes:
                if reservation is None:
                    state.unapply(uid)
                else:
                    state.apply(reservation)  # replaces an earlier booking of the pod
            state.version = version
        self.state.profiles = s.profiles
        s.hosts.attach(self.state)
        return self.state

    async def _rebuild(self, disruptions: int) -> ClusterState:
        """The store was restarted, failed over or unreachable: what this replica cached may
        not be what it holds now. Read everything, then let the hooks repair the store."""
        s = self._s
        async with self._rebuilding:
            if self._disruptions == disruptions:
                return self.state  # a concurrent caller rebuilt it meanwhile
            version, reservations = await s.ledger.snapshot()
            self.state = ClusterState.build(self.state.inventory, s.matrix,
                                            reservations.values(), version)
            log.warning("ledger view rebuilt after a store disruption: %d reservations",
                        len(reservations))
            for hook in self.resync_hooks:
                try:
                    await hook()
                except LedgerUnavailable:
                    raise
                except Exception:  # must never break scheduling; the next disruption retries
                    log.exception("resync after a store disruption failed")
            self._disruptions = disruptions
        return await self.current()

    def after_change(self, version: int, add: Reservation | None = None,
                     drop: str | None = None) -> None:
        """Apply our own change at once when it is exactly the next one (``version`` is the
        number the store gave that very change, 0 when it changed nothing); otherwise the
        next ``current()`` replays every change since the cached version, ours included."""
        state = self.state
        if version > 0 and state.version >= 0 and version == state.version + 1:
            if drop is not None:
                state.unapply(drop)
            if add is not None:
                state.apply(add)
            state.version = version
