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
Where the network names the store's egress (``store_gbps``: all its shards together) and the
caches publish how many pods read the store, a miss is priced under that load too. The store's
readers share its egress (processor sharing: each gets ``C / (n + 1)`` with the job); where
that share is below a node's path, the share sets what a missed byte costs, the same from
every such node, and the byte also holds back each of the ``n`` others by ``1 / C`` (it keeps
one more flow on the egress for as long as it takes): ``(n + 1) / C + n / C`` per byte. So with
a saturated store the path no longer matters and every row a node's cache serves weighs about
twice what it costs the job alone. The other shared links (uplinks, zone links, NICs) are not
predicted here.
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
    # The store's egress, all shards together, that its readers' misses share (0: not known,
    # misses priced on an idle network)
    store_gbps: float = 0.0

    @classmethod
    def from_dict(cls, raw: Mapping[str, Mapping[str, float]]) -> NetworkModel:
        """From ``{tier: {gbps, latency_ms}}`` (a topology file's ``network``) and an optional
        ``store: {gbps}``; tiers left out keep their defaults."""
        base = cls()
        tiers: dict[str, object] = {}
        for name in ("local", "rack", "zone", "cross_zone"):
            d = raw.get(name)
            if d is None:
                tiers[name] = getattr(base, name)
                continue
            gbps, lat = float(d["gbps"]), float(d["latency_ms"])
            if not gbps > 0 or lat < 0:
                raise ValueError(f"network tier {name!r}: gbps must be > 0, latency_ms >= 0")
            tiers[name] = Tier(gbps, lat)
        store = raw.get("store")
        if store is not None:
            gbps = float(store["gbps"])
            if not gbps >= 0:
                raise ValueError("network store: gbps must be >= 0 (0: not known)")
            tiers["store_gbps"] = gbps
        return cls(**tiers)  # type: ignore[arg-type]


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


def loaded_per_byte(net: NetworkModel, per_byte: np.ndarray, readers: float,
                    others: bool = True) -> np.ndarray:
    """Per node, seconds a missed byte costs with ``readers`` other pods reading the store:
    its path's (``miss_path``) where the path is slower than the job's share of the store's
    egress, else that share's, plus (``others``) the time the byte holds the others back
    there (module doc)."""
    if net.store_gbps <= 0 or readers <= 0:
        return per_byte
    egress = net.store_gbps * GBPS
    share = (readers + 1.0) / egress
    return np.where(share > per_byte, share + (readers / egress if others else 0.0), per_byte)


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


def reference_seconds(net: NetworkModel, compute_s: float, step_bytes: np.ndarray,
                      readers: float = 0.0, others: bool = False) -> float:
    """The job's step with nothing cached and every shard across zones (``readers``: other
    pods reading the store; ``others``: with the time its misses hold them back,
    ``loaded_per_byte``)."""
    b = np.asarray(step_bytes, dtype=np.float64)
    per_byte = float(loaded_per_byte(net, np.array([net.cross_zone.seconds_per_byte]),
                                     readers, others)[0])
    per_table = (net.local.latency_ms + net.cross_zone.latency_ms) / 1e3 + b * per_byte
    return float(compute_s + per_table.sum())


def saved_share(net: NetworkModel, compute_s: float, hits: np.ndarray, step_bytes: np.ndarray,
                rack_share: np.ndarray, zone_share: np.ndarray, readers: float = 0.0
                ) -> np.ndarray:
    """Per node, >= 0: the time the node saves against the reference (nothing cached, every
    shard across zones), in shares of the job's own reference step. With ``readers`` sharing
    a store whose egress binds, that counts the time its misses would hold them back too
    (``loaded_per_byte``), so it may pass 1; on an idle store it is the job's own, 0..1."""
    per_byte, far = miss_path(net, rack_share, zone_share)
    per_byte = loaded_per_byte(net, per_byte, readers)
    ref = reference_seconds(net, compute_s, step_bytes, readers)
    if ref <= 0:
        return np.zeros(len(per_byte))
    t = step_seconds(net, compute_s, hits, step_bytes, per_byte, far)
    base = reference_seconds(net, compute_s, step_bytes, readers, others=True)
    return np.maximum((base - t) / ref, 0.0)


def squeeze_share(net: NetworkModel, compute_s: float, lost: np.ndarray,
                  step_bytes: np.ndarray, rack_share: np.ndarray, zone_share: np.ndarray,
                  readers: float = 0.0) -> np.ndarray:
    """Per node: the step time the readers already there lose to the job's arrival, in
    shares of the job's reference step. ``lost``: per node, the share of one table's fetched
    rows they no longer find, summed over readers and the job's tables (``cache_room``
    ``squeeze`` x tables); each such row now crosses the node's path to the store instead of
    host memory (under the store's load with ``readers``, as ``saved_share``)."""
    per_byte, _ = miss_path(net, rack_share, zone_share)
    per_byte = loaded_per_byte(net, per_byte, readers)
    b = float(np.mean(step_bytes)) if len(step_bytes) else 0.0
    ref = reference_seconds(net, compute_s, step_bytes, readers)
    extra = lost * b * np.maximum(per_byte - net.local.seconds_per_byte, 0.0)
    return extra / ref if ref > 0 else np.zeros(len(per_byte))
