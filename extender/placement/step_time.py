"""A recommendation job's step time on each candidate node, and the share of it a node saves.
Pure, no I/O; used by the locality term (``extender.placement.locality``) and, through it, by
the locality replay (``bench/sim/locality.py``), which prices its fetches with the same
``NetworkModel`` figures (its topology file's ``network``).

One step = compute + per table: a request to the node cache (``local`` latency), the rows it
holds at local speed, and the rest from the store: a table's blocks are spread over all the
store's shards, so each shard sends its share of the misses over the path from the node to it
(same rack, same zone, or across zones) and the step waits for the farthest shard's latency:

    fetch(n) = L_local + h B / bw_local + [h < 1] L_far(n)
             + (1 - h) B (r / bw_rack + (z - r) / bw_zone + (1 - z) / bw_cross)

with ``h`` the share of the step's fetched rows the node's cache serves (over the job's steps,
as it fills: ``cache_room``), ``B`` the bytes the step fetches (distinct rows x bytes a row),
``r`` and ``z`` the share of the store's shards in the node's rack and zone. A node *saves*

    saved(n) = (T_ref - T(n)) / T_ref,   T(n) = compute + sum over tables fetch(n)

of the job's step time, against ``T_ref``: every row from across zones (a cold cache far from
the store). So a job whose steps are fetch-bound weighs a warm node near the store heavily
(close to 1), a compute-bound job barely (its fetch is a small part of ``T_ref``): the term is
in run time saved, the unit the policy's interference loss uses (throughput lost, per GPU).
The shared links' contention (the store's egress, uplinks) is not predicted here: it stretches
every miss, so it moves all nodes' misses alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

GBPS = 1.25e8  # bytes per second in one Gb/s


@dataclass(frozen=True)
class Tier:
    gbps: float
    latency_ms: float

    @property
    def seconds_per_byte(self) -> float:
        return 1.0 / (self.gbps * GBPS)


@dataclass(frozen=True)
class NetworkModel:
    """Per path, one job's bandwidth and latency to its rows on an idle network. Defaults: the
    locality replay's topology (``bench/data/locality/topology.yaml``, its sources there):
    host memory, a 10 Gb/s rack, 5 Gb/s within a zone, 2.5 Gb/s across zones."""

    local: Tier = Tier(80.0, 0.05)
    rack: Tier = Tier(10.0, 0.2)
    zone: Tier = Tier(5.0, 0.5)
    cross_zone: Tier = Tier(2.5, 1.0)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Mapping[str, float]]) -> NetworkModel:
        """From ``{tier: {gbps, latency_ms}}`` (a topology file's ``network``); tiers left
        out keep their defaults."""
        base = cls()
        tiers = {}
        for name in ("local", "rack", "zone", "cross_zone"):
            d = raw.get(name)
            if d is None:
                tiers[name] = getattr(base, name)
                continue
            gbps, lat = float(d["gbps"]), float(d["latency_ms"])
            if not gbps > 0 or lat < 0:
                raise ValueError(f"network tier {name!r}: gbps must be > 0, latency_ms >= 0")
            tiers[name] = Tier(gbps, lat)
        return cls(**tiers)


def miss_path(net: NetworkModel, rack_share: np.ndarray, zone_share: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """Per node: (seconds a missed byte takes, averaged over the shards' paths; latency of the
    farthest shard) from the share of the store's shards in its rack and zone."""
    r = np.clip(rack_share, 0.0, 1.0)
    z = np.clip(np.maximum(zone_share, r), 0.0, 1.0)
    per_byte = (r * net.rack.seconds_per_byte + (z - r) * net.zone.seconds_per_byte
                + (1.0 - z) * net.cross_zone.seconds_per_byte)
    far = np.where(z < 1.0, net.cross_zone.latency_ms,
                   np.where(r < 1.0, net.zone.latency_ms, net.rack.latency_ms)) / 1e3
    return per_byte, far


def step_seconds(net: NetworkModel, compute_s: float, hits: np.ndarray, step_bytes: np.ndarray,
                 per_byte: np.ndarray, far: np.ndarray) -> np.ndarray:
    """Per node: the step time. ``hits``: (tables, nodes) share of each table's fetched rows
    the cache serves; ``step_bytes``: per table, bytes a step fetches; ``per_byte``, ``far``:
    per node (``miss_path``)."""
    h = np.clip(hits, 0.0, 1.0)
    b = np.asarray(step_bytes, dtype=np.float64)[:, None]
    fetch = (net.local.latency_ms / 1e3 + h * b * net.local.seconds_per_byte
             + np.where(h < 1.0, far[None, :], 0.0) + (1.0 - h) * b * per_byte[None, :])
    return compute_s + fetch.sum(axis=0)


def reference_seconds(net: NetworkModel, compute_s: float, step_bytes: np.ndarray) -> float:
    """The step with nothing cached and every shard across zones."""
    b = np.asarray(step_bytes, dtype=np.float64)
    per_table = (net.local.latency_ms + net.cross_zone.latency_ms) / 1e3 + (
        b * net.cross_zone.seconds_per_byte)
    return float(compute_s + per_table.sum())


def saved_share(net: NetworkModel, compute_s: float, hits: np.ndarray, step_bytes: np.ndarray,
                rack_share: np.ndarray, zone_share: np.ndarray) -> np.ndarray:
    """Per node, 0..1: share of the job's reference step time the node saves."""
    per_byte, far = miss_path(net, rack_share, zone_share)
    ref = reference_seconds(net, compute_s, step_bytes)
    t = step_seconds(net, compute_s, hits, step_bytes, per_byte, far)
    return np.clip((ref - t) / ref, 0.0, 1.0) if ref > 0 else np.zeros(len(per_byte))


def squeeze_share(net: NetworkModel, compute_s: float, lost: np.ndarray,
                  step_bytes: np.ndarray, rack_share: np.ndarray, zone_share: np.ndarray
                  ) -> np.ndarray:
    """Per node: the step time the readers already there lose to the job's arrival, in
    shares of the job's reference step. ``lost``: per node, the share of one table's fetched
    rows they no longer find, summed over readers and the job's tables (``cache_room``
    ``squeeze`` x tables); each such row now crosses the node's path to the store instead of
    host memory."""
    per_byte, _ = miss_path(net, rack_share, zone_share)
    b = float(np.mean(step_bytes)) if len(step_bytes) else 0.0
    ref = reference_seconds(net, compute_s, step_bytes)
    extra = lost * b * np.maximum(per_byte - net.local.seconds_per_byte, 0.0)
    return extra / ref if ref > 0 else np.zeros(len(per_byte))
