"""Node caches of the locality replay (``bench/sim/locality.py``): per node and table the rows
held over time (``NodeCaches``, on ``extender.placement.cache_warmup``, the model the scheduler
applies too), the room split among the tables in use (``cache_model.lfu_room``), and the share of
a step's fetched rows a cache of a table's hottest rows serves (``fetched_hit``). A table's rows
are held once per node however many readers there share them; its readers' ids together fill
it."""

from __future__ import annotations

from collections import OrderedDict
from functools import lru_cache

import numpy as np

from bench.sim.locality_topology import Topology
from embed.publisher import Snapshot
from extender.annotations import ANN_EMBEDDING_CACHE
from extender.placement.cache_model import (
    distinct_curve,
    draws_for_distinct,
    lfu_room,
    zipf_norm,
)
from extender.placement.cache_warmup import WarmCurve, warm_curve
from extender.placement.locality import encode_cache

KEY_OVERHEAD_BYTES = 64  # Redis per-key overhead in the cache


def zipf_mass(c: float, n: float, alpha: float) -> float:
    """Share of Zipf(alpha) draws over n items that fall on the top c (Euler-Maclaurin)."""
    if c < 1:
        return 0.0
    return min(1.0, zipf_norm(min(c, n), alpha) / zipf_norm(n, alpha))


@lru_cache(maxsize=512)
def step_rows(n: float, alpha: float, unique: float) -> tuple[float, np.ndarray, np.ndarray]:
    """One step of a table: ``(draws, log rank grid, distinct rows by rank)``. A step draws
    ``draws`` Zipf(alpha) ids over ``n`` rows, ``unique`` of them distinct (what it fetches: a
    batch's ids are deduplicated); row k is among them with probability
    ``1 - exp(-draws p_k)``, so the cumulative curve gives how many of the step's distinct rows
    are among the top ``c`` ranks. Hot rows are drawn many times but fetched once, so a cache
    of the top ``c`` rows serves far less of the fetched rows than of the draws."""
    draws = draws_for_distinct(n, alpha, unique)
    log_rank, cum = distinct_curve(float(n), float(alpha), draws, 2048)
    return draws, log_rank, cum


def fetched_hit(cached: np.ndarray | float, n: float, alpha: float, unique: float
                ) -> np.ndarray:
    """Share of one step's fetched (distinct) rows that a cache holding the table's ``cached``
    hottest rows serves."""
    _, log_rank, cum = step_rows(float(n), float(alpha), float(unique))
    c = np.minimum(np.asarray(cached, dtype=np.float64), n)
    return np.where(c >= 1, np.interp(np.log(np.maximum(c, 1.0)), log_rank, cum) / cum[-1], 0.0)


class NodeCaches:
    """Per node and table: the hottest rows held warm (*base*), the ids the cache has seen of
    the table since (*exposure*) and the rank cap LFU allows it (*cap*); the rows it holds
    follow from the three (``cache_warmup.WarmCurve``: filled on miss, hottest rows kept). A
    table nobody on the node read starts empty and fills as its readers step (``read``); the
    tables running jobs read split the room as an LFU cache splits it
    (``cache_model.lfu_room``: by how often their rows are read); a table whose readers left
    keeps its rows until the tables in use need the room (its LFU counters decay while the
    others' grow), the longest idle first."""

    def __init__(self, topo: Topology, rows: dict[str, int], row_bytes: int,
                 alpha: float = 1.05, draws: dict[str, float] | None = None) -> None:
        self.topo = topo
        self.rows = rows
        self.row_bytes = row_bytes
        self.alpha = alpha
        self.draws = draws or {}
        gib = topo.raw["cache"]["gib_per_node"]
        self.capacity = int(gib * 2**30 // (row_bytes + KEY_OVERHEAD_BYTES))
        self.base: dict[str, dict[str, float]] = {n: {} for n in topo.names}
        self.exposure: dict[str, dict[str, float]] = {n: {} for n in topo.names}
        self.cap: dict[str, OrderedDict[str, float]] = {n: OrderedDict() for n in topo.names}
        self.active: dict[str, dict[str, int]] = {n: {} for n in topo.names}
        self.pods: dict[str, int] = dict.fromkeys(topo.names, 0)  # jobs reading there

    def curve(self, table: str) -> WarmCurve:
        return warm_curve(self.rows[table], self.alpha, self.draws.get(table, 1.0))

    def _state(self, node: str, table: str) -> tuple[float, float, float]:
        return (self.base[node].get(table, 0.0), self.exposure[node].get(table, 0.0),
                self.cap[node].get(table, 0.0))

    def rows_of(self, node: str, table: str) -> float:
        """Rows of ``table`` the node's cache holds now."""
        base, exposure, cap = self._state(node, table)
        return self.curve(table).held_at(base, exposure, cap) if cap >= 1 else 0.0

    def held_on(self, node: str) -> dict[str, int]:
        """Rows held per table on ``node`` (what its cache publishes)."""
        return {t: int(self.rows_of(node, t) + 1e-6) for t in self.cap[node]}

    def read(self, node: str, ids: dict[str, float]) -> None:
        """Readers on ``node`` looked up ``ids[table]`` more ids of each table: misses fill
        the cache (and evict idle tables' rows)."""
        grew = False
        for table, n in ids.items():
            if n > 0 and table in self.active[node]:
                self.exposure[node][table] = self.exposure[node].get(table, 0.0) + n
                grew = True
        if grew:
            self._evict_idle(node)

    def _settle(self, node: str, table: str, rows: float) -> None:
        """The table now holds its ``rows`` hottest rows, warm (LFU kept the most read)."""
        self.base[node][table] = self.cap[node][table] = rows
        self.exposure[node][table] = 0.0

    def warm(self, node: str, tables: tuple[str, ...]) -> None:
        """Leftovers of earlier jobs: ``tables`` as warm as their room on ``node`` lets them."""
        self.start(node, tables)
        for t in tables:
            self._settle(node, t, self.cap[node][t])
        self.stop(node, tables)

    def start(self, node: str, tables: tuple[str, ...]) -> None:
        """A job reading ``tables`` starts on ``node``: they get their room (the tables in use
        there give up theirs)."""
        self.pods[node] += 1
        for t in tables:
            self.active[node][t] = self.active[node].get(t, 0) + 1
            self.cap[node].setdefault(t, 0.0)
            self.cap[node].move_to_end(t)
        self._rebalance(node)

    def stop(self, node: str, tables: tuple[str, ...]) -> None:
        """A job ended: its tables lose a reader (a table nobody reads keeps its rows as a
        leftover), the others in use grow into the room."""
        self.pods[node] -= 1
        for t in tables:
            self.active[node][t] -= 1
            if not self.active[node][t]:
                del self.active[node][t]
            self.cap[node].move_to_end(t)
        self._rebalance(node)

    def _rebalance(self, node: str) -> None:
        """Every table in use takes its LFU room: a shrunk one loses its least-read rows at
        once; a grown one keeps the rows it holds (the hottest) and fills the ranks above as
        it is read."""
        active, caps = self.active[node], self.cap[node]
        names = list(active)
        if names:
            room = lfu_room(self.capacity, np.array([active[t] for t in names]),
                            np.array([self.rows[t] for t in names]), self.alpha,
                            np.array([self.draws.get(t, 1.0) for t in names]))
            for t, r in zip(names, room.tolist(), strict=True):
                if r > caps[t]:
                    self._settle(node, t, self.rows_of(node, t))
                else:
                    self.base[node][t] = min(self.base[node].get(t, 0.0), r)
                caps[t] = r
        self._evict_idle(node)

    def _evict_idle(self, node: str) -> None:
        """Idle tables give up the rows the tables in use fill, the longest idle first."""
        caps, active = self.cap[node], self.active[node]
        idle = [t for t in caps if t not in active]
        if not idle:
            return
        free = self.capacity - sum(self.rows_of(node, t) for t in active)
        for t in reversed(idle):  # the most recently used keeps its rows longest
            have = self.rows_of(node, t)
            keep = min(have, max(free, 0.0))
            if keep < 1:
                for state in (caps, self.base[node], self.exposure[node]):
                    state.pop(t, None)
            elif keep < have:
                self._settle(node, t, keep)
            free -= keep

    def alone_hit(self, tables: tuple[str, ...]) -> dict[str, float]:
        """Per table: the share of a step's fetched rows a warm cache serves when ``tables``
        are all it holds (one job's tables alone on a node, every reader of them there): the
        most any placement can give a reader of them. More readers of the same tables do not
        change their LFU split; any other table takes room."""
        room = lfu_room(self.capacity, np.ones(len(tables)),
                        np.array([self.rows[t] for t in tables]), self.alpha,
                        np.array([self.draws.get(t, 1.0) for t in tables]))
        return {t: float(self.curve(t).hit(r, 0.0, r)) for t, r in zip(tables, room.tolist(),
                                                                        strict=True)}

    def snapshot(self, node: str) -> tuple:
        """The node's cache state, for ``restore`` (a what-if: a job tried on the node)."""
        return (dict(self.base[node]), dict(self.exposure[node]), OrderedDict(self.cap[node]),
                dict(self.active[node]), self.pods[node])

    def restore(self, node: str, snap: tuple) -> None:
        self.base[node], self.exposure[node], self.cap[node], self.active[node] = (
            dict(snap[0]), dict(snap[1]), OrderedDict(snap[2]), dict(snap[3]))
        self.pods[node] = snap[4]

    def mean_hit(self, node: str, table: str, steps: float) -> float:
        """Share of a reader's fetched rows of ``table`` the cache serves over its next
        ``steps`` steps, the table filling as all its readers on the node read it."""
        base, exposure, cap = self._state(node, table)
        if cap < 1:
            return 0.0
        rate = self.active[node].get(table, 0) * self.draws.get(table, 1.0)
        return self.curve(table).mean_hit_at(base, exposure, cap, rate, float(steps))

    def warm_hit(self, node: str, table: str) -> float:
        """Share of a step's fetched rows of ``table`` the cache would serve warm (its room
        full of the table's hottest rows)."""
        cap = self.cap[node].get(table, 0.0)
        return float(self.curve(table).hit(cap, 0.0, cap)) if cap >= 1 else 0.0

    def content(self, node: str) -> Snapshot:
        """What the node's cache publisher counts (``embed.publisher.Snapshot``)."""
        held = {t: r for t, r in self.held_on(node).items() if r > 0}
        readers = dict(self.active[node])
        return Snapshot(rows=held, totals={t: self.rows[t] for t in {*held, *readers}},
                        used_bytes=int(sum(held.values()) * (self.row_bytes
                                                             + KEY_OVERHEAD_BYTES)),
                        capacity_bytes=int(self.capacity * (self.row_bytes
                                                            + KEY_OVERHEAD_BYTES)),
                        readers=readers,
                        ids={t: int(n * self.draws.get(t, 0)) for t, n in readers.items()},
                        row_bytes=self.row_bytes + KEY_OVERHEAD_BYTES, pods=self.pods[node])

    def annotation(self, node: str, now: float, content: Snapshot | None = None
                   ) -> dict[str, str]:
        """The node's publication (of ``content``, else of what it holds now)."""
        c = self.content(node) if content is None else content
        return {ANN_EMBEDDING_CACHE: encode_cache(c.rows, c.totals, c.used_bytes,
                                                  c.capacity_bytes, now, c.readers, c.ids,
                                                  c.row_bytes, c.pods)}
