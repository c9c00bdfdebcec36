"""Following the Redis ledger's change log in the background, so a filter never waits on Redis.

One task reads the log stream (``XREAD BLOCK``) and keeps the changes it saw in memory; a
replica's view then catches up with what the task has read, without a round trip. Only what
the view reads is followed: every booking still runs as one atomic script on the server, so
a view a moment behind can only make a bind meet a conflict (it then re-plans on a fresh
read), never book a GPU twice.

Each read also fetches the version counter. When the log has a hole (a change whose log
write failed), or the counter went backwards (the store was wiped), the buffer is emptied:
the view then reads the store itself, which sends it to a snapshot when the log cannot
bridge the gap. A connection failure counts a disruption on the ledger (the view is rebuilt
from a snapshot) and the follower is not *live* until a read succeeds again; meanwhile the
view reads the store as before.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from extender.errors import LedgerUnavailable
from extender.ledger import scripts
from extender.ledger.health import raise_if_cancelling
from extender.ledger.store import Change

if TYPE_CHECKING:
    from extender.ledger.redis import RedisLedger

log = logging.getLogger("sparse.ledger.follow")

BLOCK_MS = 200  # each blocking read returns at least this often (below the socket timeout)
KEEP = 2_000  # changes kept; a view further behind reads the store
READ_COUNT = 1_000  # entries per read
RETRY_S = (0.05, 1.0)  # first and largest wait after a failed read
# After a read that brought changes, the next starts this much later: in a burst (two changes
# per pod: booked, then confirmed bound) one read then carries several changes instead of
# one each, and every read costs both processes CPU. A view this much further behind another
# replica's changes can only meet a conflict at bind, never book a GPU twice (see above);
# a replica's own changes are in its view at once.
COALESCE_S = 0.005


class ChangeFollower:
    """The Redis ledger's change log, read by one background task (:meth:`run`)."""

    def __init__(self, ledger: RedisLedger, keep: int = KEEP, block_ms: int = BLOCK_MS,
                 coalesce_s: float = COALESCE_S) -> None:
        self.ledger = ledger
        self.keep = keep
        self.block_ms = block_ms
        self.coalesce_s = coalesce_s
        self.head = -1  # version of the last change read (-1: nothing read yet)
        self._log: deque[tuple[int, Change]] = deque()  # contiguous versions up to head
        self.live = False  # the last read succeeded: views may rely on what was read
        self.reads = 0
        self.resets = 0  # holes, wipes and failures that emptied the buffer

    # --- the view's side: no I/O -------------------------------------------------------------

    def changes(self, since: int) -> tuple[int, list[Change]] | None:
        """The changes after ``since`` that were read, and the version they lead to; None when
        the follower cannot say (not live, or ``since`` is older than what it keeps). A view
        ahead of the follower (its own change applied at once) has nothing to catch up."""
        if not self.live or since < 0:
            return None
        if since >= self.head:
            return since, []
        if not self._log or self._log[0][0] > since + 1:
            return None
        first = self._log[0][0]
        return self.head, [change for _, change in
                           itertools.islice(self._log, since + 1 - first, None)]

    # --- the reading task --------------------------------------------------------------------

    def _reset(self, head: int) -> None:
        self._log.clear()
        self.head = head
        self.resets += 1

    def take(self, entries: list[tuple[bytes, dict[bytes, bytes]]], version: int) -> None:
        """Add what one read returned: stream entries after ``head`` and the version counter
        read after them."""
        for entry_id, fields in entries:
            v = int(entry_id.split(b"-", 1)[0])
            if v <= self.head:
                continue  # the stream was recreated with lower IDs: the counter check below
            if v != self.head + 1:
                self._reset(v - 1)  # a hole: nothing before it can be bridged from here
            self._log.append((v, scripts.log_change(fields)))
            self.head = v
        while len(self._log) > self.keep:
            self._log.popleft()
        if version < self.head:  # wiped (or reset to a new epoch below ours): start again
            self.ledger.disrupted()
            self._reset(version)

    async def read_once(self, block: bool = True) -> int:
        """One read of the log after ``head`` (waiting up to ``block_ms`` for news); the
        number of entries it brought."""
        if self.head < 0:
            self._reset(await self.ledger.version())
        entries, version = await self.ledger.read_log(self.head, self.block_ms if block else None,
                                                      READ_COUNT)
        self.take(entries, version)
        self.live = True
        self.reads += 1
        return len(entries)

    async def run(self) -> None:
        delay = RETRY_S[0]
        while True:
            try:
                brought = await self.read_once()
                delay = RETRY_S[0]
                if brought and self.coalesce_s:  # more are likely coming: batch them
                    await asyncio.sleep(self.coalesce_s)
            except LedgerUnavailable as exc:  # counted as a disruption by the ledger
                if self.live:
                    log.warning("following the ledger's change log: %s", exc)
                self.live = False
                self.head = -1
                self._log.clear()
                raise_if_cancelling()
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_S[1])
            raise_if_cancelling()

    def stats(self) -> dict[str, Any]:
        return {"live": self.live, "head": self.head, "kept": len(self._log),
                "reads": self.reads, "resets": self.resets}
