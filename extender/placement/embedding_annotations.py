"""The two annotations of data locality, read and written without scoring anything. Pure.

The pod's declaration (``sparse.io/embedding``, :func:`parse_embedding` -> :class:`EmbeddingSpec`,
bad input -> :class:`InvalidEmbedding`) and what a node's embedding cache publishes
(``sparse.io/embedding-cache``, written by ``embed.publisher`` with :func:`encode_cache`, read by
the scheduler with :func:`decode_cache` -> :class:`CacheContent`). ``locality.py`` scores them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass

from extender.annotations import ANN_EMBEDDING
from extender.errors import InvalidDemand

CACHE_FORMAT = 1
MAX_TABLES = 256


class InvalidEmbedding(InvalidDemand):
    """A ``sparse.io/embedding`` annotation that cannot be understood."""


@dataclass(frozen=True)
class EmbeddingSpec:
    store: str
    tables: tuple[str, ...]
    hot_rows: Mapping[str, int] | None = None  # per table; None = table size stands in
    required: bool = False
    ids_per_step: Mapping[str, int] | None = None  # per table: ids one step looks up
    steps: int | None = None  # steps the job will run (its cache's warm-up is spread over them)
    step_compute_ms: float | None = None  # a step's compute alone (no fetch): prices the saving
    # The longest this pod may wait for a warm node (below the extender's --locality-max-wait)
    max_wait_s: float | None = None


def parse_embedding(annotations: Mapping[str, str] | None) -> EmbeddingSpec | None:
    """The pod's embedding declaration; None when it has none; InvalidEmbedding when bad."""
    raw = (annotations or {}).get(ANN_EMBEDDING)
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise InvalidEmbedding(f"{ANN_EMBEDDING} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidEmbedding(f"{ANN_EMBEDDING} must be a JSON object")
    store, tables = doc.get("store"), doc.get("tables")
    if not isinstance(store, str) or not store:
        raise InvalidEmbedding(f"{ANN_EMBEDDING}: 'store' must be a non-empty string")
    if (not isinstance(tables, list) or not tables or len(tables) > MAX_TABLES
            or not all(isinstance(t, str) and t for t in tables)):
        raise InvalidEmbedding(
            f"{ANN_EMBEDDING}: 'tables' must be a list of 1..{MAX_TABLES} table names")
    hot_rows = _per_table(doc, "hotRows", tables)
    ids_per_step = _per_table(doc, "idsPerStep", tables)
    required = doc.get("required", False)
    if not isinstance(required, bool):
        raise InvalidEmbedding(f"{ANN_EMBEDDING}: 'required' must be true or false")
    steps = doc.get("steps")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int)
                              or steps < 1):
        raise InvalidEmbedding(f"{ANN_EMBEDDING}: 'steps' must be a positive integer")
    return EmbeddingSpec(store, tuple(dict.fromkeys(tables)), hot_rows or None, required,
                         ids_per_step or None, steps, _non_negative(doc, "stepComputeMs"),
                         _non_negative(doc, "maxWaitSeconds"))


def _non_negative(doc: dict, key: str) -> float | None:
    """An optional finite number >= 0 (``stepComputeMs``, ``maxWaitSeconds``)."""
    value = doc.get(key)
    if value is None:
        return None
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or value < 0):
        raise InvalidEmbedding(f"{ANN_EMBEDDING}: '{key}' must be a number >= 0")
    return float(value)


def _per_table(doc: dict, key: str, tables: list[str]) -> dict[str, int] | None:
    """A positive count for every table, or a map table -> count (``hotRows``,
    ``idsPerStep``)."""
    value = doc.get(key)
    out: dict[str, int] | None = None
    if isinstance(value, bool):
        raise InvalidEmbedding(f"{ANN_EMBEDDING}: '{key}' must be a count or a map")
    if isinstance(value, int):
        out = dict.fromkeys(tables, value)
    elif isinstance(value, dict):
        out = {t: value.get(t) for t in tables if t in value}
    elif value is not None:
        raise InvalidEmbedding(f"{ANN_EMBEDDING}: '{key}' must be a count or a map")
    if out is not None and not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in out.values()):
        raise InvalidEmbedding(f"{ANN_EMBEDDING}: '{key}' values must be positive integers")
    return out


@dataclass(frozen=True)
class CacheContent:
    """What one node's cache holds: rows (and table size, when known) per table, and, when the
    publisher knows them, how many running pods on the node read each table."""

    rows: Mapping[str, int]
    totals: Mapping[str, int]
    used_bytes: int = 0
    capacity_bytes: int = 0
    readers: Mapping[str, int] | None = None  # None = not published
    ids: Mapping[str, int] | None = None  # per table: its readers' ids per step, summed
    stated_row_bytes: float = 0.0  # bytes one cached row takes, as the publisher states it
    pods: int | None = None  # running pods on the node that read embeddings (None = not published)

    @property
    def fill(self) -> float:
        """0..1: how much of the cache is in use (1 when it holds rows but states no size)."""
        if self.capacity_bytes > 0:
            return min(1.0, self.used_bytes / self.capacity_bytes)
        return 1.0 if any(self.rows.values()) else 0.0

    @property
    def row_bytes(self) -> float:
        """Bytes per cached row: as the publisher states it (known before any row is held),
        else the bytes used over the rows held (0 = unknown)."""
        if self.stated_row_bytes > 0:
            return self.stated_row_bytes
        held = sum(self.rows.values())
        return self.used_bytes / held if held and self.used_bytes else 0.0

    @property
    def tables_in_use(self) -> int:
        """Tables that running pods on the node read (0 when readers are not published)."""
        return sum(1 for n in (self.readers or {}).values() if n > 0)

    def entries(self) -> list[tuple[str, int, int, int]]:
        """(table, rows held, readers, their ids per step summed) for every table the cache
        published: held, read, or both."""
        readers, ids = self.readers or {}, self.ids or {}
        tables = dict.fromkeys([*self.rows, *readers, *ids])
        return [(t, self.rows.get(t, 0), readers.get(t, 0), ids.get(t, 0)) for t in tables]


def encode_cache(rows: Mapping[str, int], totals: Mapping[str, int], used_bytes: int,
                 capacity_bytes: int, at: float, readers: Mapping[str, int] | None = None,
                 ids: Mapping[str, int] | None = None, row_bytes: float = 0.0,
                 pods: int | None = None) -> str:
    """The node annotation's value (the cache's publisher writes it, the scheduler reads it).
    ``readers``: running pods on the node per table they declare (tables read but not yet
    cached are listed with 0 rows); with it the scheduler tells tables in use from leftovers.
    ``ids``: per table, the ``idsPerStep`` those readers declare, summed (how often the
    table's rows are read, which sets its LFU room). ``row_bytes``: the bytes one cached row
    takes (value and key overhead, from the store's layout), so a cache that holds nothing yet
    still tells its size in rows; omitted when 0 (readers then divide used bytes by rows).
    ``pods``: the running pods on the node that read embeddings (a pod reading several tables
    counts once), so the scheduler knows how many share the store's egress."""
    rows = dict(rows)
    if readers is not None:
        for t in readers:
            rows.setdefault(t, 0)
    tables = {t: {"rows": int(n), **({"total": int(totals[t])} if t in totals else {}),
                  **({"readers": int(readers.get(t, 0))} if readers is not None else {}),
                  **({"ids": int(ids[t])} if ids and ids.get(t) else {})}
              for t, n in sorted(rows.items())}
    extra: dict[str, float | int] = {"rowBytes": round(float(row_bytes), 1)} \
        if row_bytes > 0 else {}
    if pods is not None:
        extra["pods"] = int(pods)
    return json.dumps({"v": CACHE_FORMAT, "tables": tables, "bytes": int(used_bytes),
                       "capacityBytes": int(capacity_bytes), "at": round(at, 3), **extra},
                      separators=(",", ":"), sort_keys=True)


def decode_cache(raw: str | None) -> CacheContent | None:
    """None for a missing or unusable annotation (the node then scores as holding nothing)."""
    if not raw:
        return None
    try:
        doc = json.loads(raw)
        rows, totals, readers, ids = {}, {}, {}, {}
        for table, entry in dict(doc.get("tables") or {}).items():
            rows[str(table)] = max(0, int(entry.get("rows", 0)))
            if entry.get("total") is not None:
                totals[str(table)] = max(0, int(entry["total"]))
            if entry.get("readers") is not None:
                readers[str(table)] = max(0, int(entry["readers"]))
            if entry.get("ids") is not None:
                ids[str(table)] = max(0, int(entry["ids"]))
        pods = doc.get("pods")
        return CacheContent(rows, totals, max(0, int(doc.get("bytes", 0))),
                            max(0, int(doc.get("capacityBytes", 0))), readers or None,
                            ids or None, max(0.0, float(doc.get("rowBytes", 0.0))),
                            None if pods is None else max(0, int(pods)))
    except (ValueError, TypeError, AttributeError):
        return None
