"""What each node's cache holds and would hold for a job, for all candidate nodes at once. Pure,
no I/O; the locality index (``extender.placement.locality``) owns the arrays, this module reads
them; the model itself (Zipf shares, the LFU room split) is ``cache_model``.

Layout: per node slot, the tables its cache published as *entries* (a few per node: the
tables in use there and leftovers), padded to the widest node: column id (-1 = empty), rows
held, readers, their ids per step summed. The term works on ``nodes x (entries + the job's
tables)``: a node's cache splits its room over its own tables only, so nothing scales with the
number of tables in the cluster.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from extender.placement.cache_model import (
    distinct_curve,
    lfu_weights,
    served_share,
    served_shares,
    water_fill,
    zipf_norm,
)
from extender.placement.cache_warmup import warm_curve


class _Weights(Protocol):
    @property
    def cache(self) -> float: ...
    @property
    def id_skew(self) -> float: ...


class TableDemand(Protocol):
    """The tables a job reads (``locality.EmbeddingSpec``)."""

    @property
    def tables(self) -> tuple[str, ...]: ...
    @property
    def hot_rows(self) -> Mapping[str, int] | None: ...
    @property
    def ids_per_step(self) -> Mapping[str, int] | None: ...
    @property
    def steps(self) -> int | None: ...


class CacheIndex(Protocol):
    """The arrays ``CacheRoomModel`` reads (``locality.LocalityIndex`` has them); a protocol,
    so this module need not import the index, which imports it."""

    weights: _Weights
    slot: Mapping[str, int]
    col: Mapping[str, int]  # table -> column id
    cap_bytes: np.ndarray  # the cache's maxmemory per node (0 = not published)
    row_bytes: np.ndarray  # bytes per cached row per node (0 = unknown)
    ent_col: np.ndarray  # per node and entry: the table's column (-1 = none)
    ent_held: np.ndarray  # rows cached
    ent_readers: np.ndarray  # running pods reading the table there
    ent_ids: np.ndarray  # their ids per step, summed (0 = not published)
    total: np.ndarray  # per column: the table's size in rows (0 = unknown)


def gather(arr: np.ndarray, slots: np.ndarray, default: float = 0) -> np.ndarray:
    """``arr`` per slot (rows of a matrix), ``default`` for slot -1 (a node never seen) or
    before any node."""
    if not len(arr):  # no node seen yet
        return np.full((len(slots), *arr.shape[1:]), default, dtype=arr.dtype)
    out = arr[np.maximum(slots, 0)]
    missing = slots < 0
    if missing.any():
        out[missing] = default
    return out


@dataclass
class _Work:
    """One job on a set of nodes: per node, its cache's entries then one column per table of
    the job that the node does not hold (``names`` of the job's tables; ``job_at[j]``: the
    column of job table ``j`` on each node)."""

    col: np.ndarray  # column id per node and column (-1 = empty)
    held: np.ndarray
    readers: np.ndarray
    ids: np.ndarray
    job_at: np.ndarray  # (job tables, nodes): the work column of each job table
    size: np.ndarray  # per column id (+1 for -1): table size in rows
    per_reader: np.ndarray  # per column id: ids per step of one reader (NaN: unknown)
    own: np.ndarray  # per job table: the job's ids per step (NaN: unknown)


def warming(hot: float, alpha: float, draws: float, held: np.ndarray, room: np.ndarray,
            rate: np.ndarray, steps: int, now: np.ndarray) -> np.ndarray:
    """Per node: the mean share of a job's fetched rows its node's cache serves over its
    ``steps`` steps (``cache_warmup.WarmCurve.mean_hit``), from the ``held`` rows published
    now to its ``room``, filled at ``rate`` ids a step; ``now`` where the room is unknown.
    """
    out = np.array(now, dtype=np.float64)
    finite = np.isfinite(room)
    if not finite.any():
        return out
    curve = warm_curve(hot, alpha, draws)
    r = np.minimum(room[finite], hot)
    # The published rows are the table's hottest (LFU keeps the most read); the rest of its
    # room fills from the ids read from now on.
    out[finite] = curve.mean_hit(np.minimum(held[finite], r), 0.0, r, rate[finite],
                                 float(steps))
    return out


class CacheRoomModel:
    """The cache's size in rows per node, the LFU room each table in use gets there once the
    job reads its tables too (``cache_model.lfu_room``: the same split the replay's caches
    make), the share of a job's traffic it serves, and what the job's arrival costs the
    readers already there."""

    def __init__(self, index: CacheIndex) -> None:
        self.index = index

    def capacity_rows(self, slots: np.ndarray) -> np.ndarray:
        """Per node: the cache's size in rows (its bytes over its bytes per row, or the
        cluster's median row size for an empty cache); inf where unknown."""
        known = self.index.row_bytes[:len(self.index.slot)]
        known = known[known > 0]
        fallback = float(np.median(known)) if len(known) else 0.0
        row_bytes = gather(self.index.row_bytes, slots)
        row_bytes = np.where(row_bytes > 0, row_bytes, fallback)
        cap = gather(self.index.cap_bytes, slots)
        with np.errstate(divide="ignore", invalid="ignore"):
            rows = cap / row_bytes
        return np.where((cap > 0) & (row_bytes > 0), rows, np.inf)

    def _hot_rows(self, spec: TableDemand) -> list[float]:
        """Per table of the job: its hot set in rows (declared, else the table's published size;
        NaN when neither is known)."""
        ix, hot = self.index, []
        for t in spec.tables:
            c = ix.col.get(t)
            h = (spec.hot_rows or {}).get(t) or (ix.total[c] if c is not None else 0)
            hot.append(float(h) if h else math.nan)
        return hot

    def _sizes(self, spec: TableDemand) -> np.ndarray:
        """Per column id (the job's unpublished tables after the index's, and a last one for
        the empty entry): a table's rows, published, else the job's declared hot rows, else
        the most any node holds; at least 1."""
        ix = self.index
        n_cols = len(ix.col)
        size = np.ones(n_cols + len(spec.tables) + 1)
        size[:n_cols] = np.maximum(ix.total[:n_cols], 1.0)
        hot = spec.hot_rows or {}
        for j, t in enumerate(spec.tables):
            c = ix.col.get(t, n_cols + j)
            if size[c] <= 1 and hot.get(t):
                size[c] = float(hot[t])
        missing = np.flatnonzero(size[:n_cols] <= 1)
        if len(missing) and len(ix.slot):  # rare: no cache published the table's size
            cols, held = ix.ent_col[:len(ix.slot)], ix.ent_held[:len(ix.slot)]
            for c in missing.tolist():
                at = cols == c
                if at.any():
                    size[c] = max(float(held[at].max()), 1.0)
        return size

    def rates(self, spec: TableDemand, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(per column id, one reader's ids per step; per job table, the job's), over the
        caches of ``slots`` (``_work``'s, for all candidates: a subset of them is then scored
        as in the whole)."""
        ix = self.index
        size = self._sizes(spec)
        own_cols = np.array([ix.col.get(t, len(ix.col) + j) for j, t in enumerate(spec.tables)])
        col = gather(ix.ent_col, slots, -1)
        readers, ids = gather(ix.ent_readers, slots), gather(ix.ent_ids, slots)
        return self._rates(spec, col, readers, ids, size, own_cols)

    @staticmethod
    def _rates(spec: TableDemand, col: np.ndarray, readers: np.ndarray, ids: np.ndarray,
               size: np.ndarray, own_cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # Ids per step of one reader per column: published (sum over readers), else the
        # job's declaration for the table, else the mean of its declarations (NaN: none, the
        # shares then count lookups and each reader weighs one id). Empty entries (column
        # -1, no readers) add nothing.
        tables = spec.tables
        declared = spec.ids_per_step or {}
        stand_in = float(np.mean(list(declared.values()))) if declared else math.nan
        flat = np.maximum(col, 0).ravel()
        n_ids = len(size)
        tot_r = np.bincount(flat, readers.ravel(), minlength=n_ids)
        tot_i = np.bincount(flat, ids.ravel(), minlength=n_ids)
        with np.errstate(divide="ignore", invalid="ignore"):
            per_reader = np.where((tot_r > 0) & (tot_i > 0), tot_i / tot_r, math.nan)
        unknown = np.isnan(per_reader)
        per_reader[unknown] = stand_in
        own = np.full(len(tables), stand_in)
        for j, t in enumerate(tables):
            c = int(own_cols[j])
            if t in declared:
                own[j] = declared[t]
                if unknown[c]:
                    per_reader[c] = declared[t]
            else:
                own[j] = per_reader[c]
        per_reader[-1] = math.nan  # the empty entry
        return per_reader, own

    def sizes(self, spec: TableDemand) -> np.ndarray:
        """Per column id: a table's size in rows as the term uses it (``_sizes``)."""
        return self._sizes(spec)

    def _work(self, spec: TableDemand, slots: np.ndarray,
              rates: tuple[np.ndarray, np.ndarray] | None = None) -> _Work:
        ix = self.index
        n, n_cols, tables = len(slots), len(ix.col), spec.tables
        col = gather(ix.ent_col, slots, -1)
        held, readers, ids = (gather(m, slots) for m in (ix.ent_held, ix.ent_readers,
                                                          ix.ent_ids))
        # One column per job table, used on the nodes whose cache has no entry for it.
        own_cols = np.array([ix.col.get(t, n_cols + j) for j, t in enumerate(tables)])
        width = col.shape[1]
        job_at = np.empty((len(tables), n), dtype=np.int64)
        for j, c in enumerate(own_cols.tolist()):
            match = col == c
            has = match.any(axis=1)
            job_at[j] = np.where(has, match.argmax(axis=1) if width else 0, width + j)
        pad = np.zeros((n, len(tables)))
        col = np.concatenate([col, np.broadcast_to(own_cols, (n, len(tables)))], axis=1)
        held, readers, ids = (np.concatenate([m, pad], axis=1) for m in (held, readers, ids))
        # The extra columns are the job's only where the node holds no entry for the table.
        for j in range(len(tables)):
            extra = job_at[j] < width
            col[extra, width + j] = -1
        size = self._sizes(spec)
        per_reader, own = rates if rates is not None else self._rates(spec, col, readers, ids,
                                                                        size, own_cols)
        return _Work(col, held, readers, ids, job_at, size, per_reader, own)

    def _room(self, spec: TableDemand, slots: np.ndarray, job: bool = True,
              rates: tuple[np.ndarray, np.ndarray] | None = None
              ) -> tuple[_Work, np.ndarray, np.ndarray]:
        """The work arrays, the LFU room of each column per node (with the job reading its
        tables when ``job``) and the nodes' capacity in rows."""
        w = self._work(spec, slots, rates)
        cap = self.capacity_rows(slots)
        alpha = self.index.weights.id_skew
        cid = np.where(w.col >= 0, w.col, len(w.size) - 1)
        fill = w.per_reader[cid]
        reads = np.where(w.ids > 0, w.ids, w.readers * np.where(np.isnan(fill), 1.0, fill))
        if job:
            rows_ = np.arange(len(slots))
            own = np.where(np.isnan(w.own), 1.0, w.own)
            for j in range(len(spec.tables)):
                reads[rows_, w.job_at[j]] += own[j]
        size = w.size[cid]
        norm = zipf_norm(w.size, alpha)[cid] if alpha > 0 else None
        return w, water_fill(cap, lfu_weights(reads, size, alpha, norm), size), cap

    def room(self, spec: TableDemand, slots: np.ndarray, job: bool = True
             ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """``({table: rows per node}, capacity rows per node)``: the rows an LFU cache gives
        each table there, running pods' tables and the job's (``job``: with the job reading
        its tables too); 0 where a table is not read, inf where the cache's size is
        unknown."""
        w, rooms, cap = self._room(spec, slots, job)
        names = {c: t for t, c in self.index.col.items()}
        out: dict[str, np.ndarray] = {}
        for c in np.unique(w.col[w.col >= 0]).tolist():
            out[names.get(c, "")] = np.where(w.col == c, rooms, 0.0).sum(axis=1)
        rows_ = np.arange(len(slots))
        for j, t in enumerate(spec.tables):
            out[t] = rooms[rows_, w.job_at[j]]
        out.pop("", None)
        return {t: np.where(np.isfinite(cap), r, np.inf) for t, r in out.items()}, cap

    def cached_share(self, spec: TableDemand, slots: np.ndarray) -> np.ndarray:
        """Per node, -1..1: share of the job's hot-set traffic the node's cache is expected to
        serve, less what its arrival costs the jobs already reading there (``expected``)."""
        served, squeezed = self.expected(spec, slots)
        return np.maximum(served - squeezed, -1.0)

    def expected(self, spec: TableDemand, slots: np.ndarray,
                 rates: tuple[np.ndarray, np.ndarray] | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
        """Per node: the tables' shares (``expected_tables``) weighted by their hot rows."""
        per_table, weights, squeezed = self.expected_tables(spec, slots, rates)
        # Summed table by table (not a matrix product): each node's figure then does not
        # depend on which other nodes are scored with it.
        return (weights[:, None] * per_table).sum(axis=0) / weights.sum(), squeezed

    def expected_tables(self, spec: TableDemand, slots: np.ndarray,
                        rates: tuple[np.ndarray, np.ndarray] | None = None
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per table of the job and node (rows: tables), the share of its traffic the node's
        cache is expected to serve; each table's weight (its hot rows, ones when a table's is
        unknown); and per node the share of one table's traffic the tables in use there lose
        to it (``squeeze``).

        With the cache's size known, a table's rows are capped by the LFU ``room`` it gets
        there once the job reads it too. When the job declares its ``steps`` and ids per step,
        the share is the mean over its steps of what the cache serves as it fills
        (``cache_warmup``: the rows the node publishes for the table say how warm it is, and
        the job and the table's readers there fill the rest of its room at their ids per
        step), so a warm node scores the warm-up it saves over the job's run; without them,
        the midpoint of what it holds now and what it will hold warm. Each table in use on the
        node loses, per reader, the share its fewer rows no longer serve (``squeeze``); a
        reader's read of one table weighs like one of the job's tables. Shares count fetched
        rows when the job declares ``idsPerStep`` (what relieves the store), else lookups."""
        alpha = self.index.weights.id_skew
        hot = self._hot_rows(spec)
        known = not any(math.isnan(h) for h in hot)
        weights = np.array(hot) if known else np.ones(len(hot))
        draws = spec.ids_per_step or {}
        if self.index.weights.cache:
            w, rooms, _ = self._room(spec, slots, rates=rates)
        else:
            w, rooms = self._work(spec, slots, rates), None
        rows_ = np.arange(len(slots))
        shares = np.zeros((len(spec.tables), len(slots)))
        for j, (t, h) in enumerate(zip(spec.tables, hot, strict=True)):
            share = shares[j]
            rows = w.held[rows_, w.job_at[j]]
            if math.isnan(h):
                share += rows > 0
                continue
            d = draws.get(t)
            if rooms is None:
                share += served_share(rows, h, alpha, d)
                continue
            room = rooms[rows_, w.job_at[j]]
            now = served_share(np.minimum(rows, room), h, alpha, d)
            if d and spec.steps:
                col = w.job_at[j]
                fill = w.per_reader[np.where(w.col[rows_, col] >= 0, w.col[rows_, col], -1)]
                others = np.where(w.ids[rows_, col] > 0, w.ids[rows_, col],
                                  w.readers[rows_, col] * np.nan_to_num(fill))
                share += warming(h, alpha, float(d), rows, room, d + others, spec.steps, now)
                continue
            warm = served_share(np.minimum(h, room), h, alpha, d)
            share += np.where(np.isfinite(room), (now + warm) / 2, now)
        squeezed = (self._squeeze(spec, w, rooms) if rooms is not None
                    else np.zeros(len(slots)))
        return shares, weights.astype(np.float64), squeezed

    def fetched_rows(self, spec: TableDemand) -> np.ndarray | None:
        """Per table of the job: the distinct rows one of its steps fetches (its declared ids
        per step deduplicated over the table's size, published, else its hot rows:
        ``cache_model.distinct_curve``); None unless every table declares its ids."""
        draws = spec.ids_per_step or {}
        if not all(draws.get(t) for t in spec.tables):
            return None
        ix, size = self.index, self._sizes(spec)
        alpha = ix.weights.id_skew
        out = []
        for j, t in enumerate(spec.tables):
            n = float(size[ix.col.get(t, len(ix.col) + j)])
            if alpha == 0 or n <= 1:  # uniform ids (or no size): at most the table's rows
                out.append(min(float(draws[t]), n) if n > 1 else float(draws[t]))
                continue
            out.append(float(distinct_curve(n, float(alpha), float(draws[t]))[1][-1]))
        return np.array(out)

    def squeeze(self, spec: TableDemand, slots: np.ndarray) -> np.ndarray:
        """Per node: share of one table's traffic that the tables already read there lose to
        the job's arrival (summed over their readers, per table of the job)."""
        w, rooms, _ = self._room(spec, slots)
        return self._squeeze(spec, w, rooms)

    def _squeeze(self, spec: TableDemand, w: _Work, rooms: np.ndarray) -> np.ndarray:
        """Where a table read there must shrink (rows held above its room), its readers lose
        the share of their traffic the dropped rows served (fetched rows at the readers' ids
        per step, lookups when unknown), all tables in one pass (``served_shares``)."""
        at, k = np.nonzero((w.readers > 0) & (w.held > rooms))
        if not len(at):
            return np.zeros(rooms.shape[0])
        alpha = self.index.weights.id_skew
        group = w.col[at, k]
        lost = (served_shares(w.held[at, k], group, w.size, alpha, w.per_reader)
                - served_shares(rooms[at, k], group, w.size, alpha, w.per_reader))
        loss = np.bincount(at, w.readers[at, k] * lost, minlength=rooms.shape[0])
        return loss / len(spec.tables)
