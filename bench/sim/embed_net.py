"""Shared links of the locality replay (``bench/sim/locality.py``): the store's shards, each
rack's uplink and each zone's interconnect carry the embedding misses of every running job, so a
job's miss time grows when the links it crosses are loaded (fluid model, as in flow-level
network simulators).

The store is sharded: one shard per shard node, each serving at most ``links.shard_gbps``
(capped by its node's NIC), so the store's egress grows with its shards. A table's blocks are
spread over all shards (hash partitions), so every job's misses split evenly over the shards:
the share from a shard in the job's rack crosses the job node's NIC and the shard's link; from a
shard in another rack of its zone also both racks' uplinks; from another zone also both zones'
interconnects (hits never leave the node; its NIC carries the misses of all jobs on it).
Older files give ``links.store_gbps`` (the whole store) instead: it is split over the shards.

Each job sends ``miss_bytes`` per step, its step lasting ``free_s + miss_s * f`` where ``f`` is
the largest stretch ``kappa`` of the links on its path. A link's stretch is found by fixed-point
iteration so that, where the offered rate exceeds the capacity, the rate it carries at the
stretched step times equals its capacity (``kappa = max(1, kappa * load / capacity)``); an
unloaded link stretches nothing, so without contention the times are the per-tier figures.
"""

from __future__ import annotations

import numpy as np

GBPS = 1.25e8  # bytes per second in one Gb/s


class StoreNetwork:
    def __init__(self, raw: dict, zone: dict[str, str], rack: dict[str, str],
                 shards: list[str]) -> None:
        cfg = raw.get("links") or {}
        self.zone, self.rack = zone, rack
        self.shards = list(shards)
        nic = float(cfg.get("node_nic_gbps", 0))
        per_shard = (float(cfg["shard_gbps"]) if "shard_gbps" in cfg
                     else float(cfg.get("store_gbps", 0)) / max(len(self.shards), 1))
        if nic and per_shard:
            per_shard = min(per_shard, nic)
        names = [f"shard:{s}" for s in self.shards]
        caps = [per_shard * GBPS] * len(self.shards)
        self.uplink: dict[tuple[str, str], int] = {}
        for key in sorted(set(zip(zone.values(), rack.values(), strict=True))):
            self.uplink[key] = len(names)
            names.append(f"uplink:{key[0]}/{key[1]}")
            caps.append(float(cfg.get("rack_uplink_gbps", 0)) * GBPS)
        self.nic: dict[str, int] = {}
        for node in sorted(zone):
            self.nic[node] = len(names)
            names.append(f"nic:{node}")
            caps.append(nic * GBPS)
        self.zone_link: dict[str, int] = {}
        for z in sorted(set(zone.values())):
            self.zone_link[z] = len(names)
            names.append(f"zone:{z}")
            caps.append(float(cfg.get("zone_link_gbps", 0)) * GBPS)
        self.names = names
        self.capacity = np.array(caps)  # 0 = not limited
        self.kappa = np.ones(len(names))

    def path(self, node: str) -> dict[int, float]:
        """Link -> share of the node's miss bytes that crosses it."""
        z, r = self.zone[node], self.rack[node]
        share = 1.0 / max(len(self.shards), 1)
        out: dict[int, float] = {self.nic[node]: 1.0}
        for i, s in enumerate(self.shards):
            links = [i]
            sz, sr = self.zone[s], self.rack[s]
            if (sz, sr) != (z, r):
                links += [self.uplink[(sz, sr)], self.uplink[(z, r)]]
                if sz != z:
                    links += [self.zone_link[sz], self.zone_link[z]]
            for k in links:
                out[k] = out.get(k, 0.0) + share
        return {k: min(v, 1.0) for k, v in out.items() if self.capacity[k] > 0}

    def stretch(self, paths: list[dict[int, float]], miss_bytes: np.ndarray, free_s: np.ndarray,
                miss_s: np.ndarray, iters: int = 60) -> np.ndarray:
        """Per job: the factor its miss time is stretched by (>= 1); sets ``kappa`` (and starts
        from the last one: between two events few jobs change)."""
        n, m = len(paths), len(self.names)
        if not n:
            self.kappa = np.ones(m)
            return np.ones(0)
        part = np.zeros((n, m))  # share of each job's misses on each link
        for j, p in enumerate(paths):
            part[j, list(p)] = list(p.values())
        on = part > 0
        limited = self.capacity > 0
        cap = np.where(limited, self.capacity, 1.0)
        kappa = self.kappa.copy()
        for _ in range(iters):
            f = np.where(on, kappa, 1.0).max(axis=1)
            rate = miss_bytes / (free_s + miss_s * f)
            load = part.T @ rate
            new = np.where(limited, np.maximum(1.0, kappa * load / cap), 1.0)
            if np.allclose(new, kappa, rtol=1e-3):
                break
            kappa = np.sqrt(kappa * new)  # damped: geometric mean of old and new
        self.kappa = kappa
        return np.where(on, kappa, 1.0).max(axis=1)

    def saturated_by_kind(self, share: np.ndarray, shards: list[str]) -> dict[str, float]:
        """Per kind of link (a store shard, the uplink of a rack with shards, another rack's
        uplink, a node NIC, a zone link): the largest share of the run one such link spent at
        capacity (``share`` per link)."""
        store_racks = {(self.zone[s], self.rack[s]) for s in shards}
        out: dict[str, float] = {}
        for name, x in zip(self.names, share.tolist(), strict=True):
            kind, _, rest = name.partition(":")
            if kind == "uplink":
                kind = "uplink_store" if tuple(rest.split("/")) in store_racks else "uplink_other"
            out[kind] = max(out.get(kind, 0.0), float(x))
        return out
