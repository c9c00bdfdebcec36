"""Shared links of the locality replay (``bench/sim/locality.py``): the store's egress, each
rack's uplink and each zone's interconnect carry the embedding misses of every running job, so a
job's miss time grows when the links it crosses are loaded (fluid model, as in flow-level
network simulators).

Paths of a miss from a node to the store (the nearest shard rack: the node's own, else one in
its zone, else any):

* same rack:   the node's NIC, store egress
* same zone:   the above, the store rack's uplink, the node rack's uplink
* cross zone:  the above and both zones' interconnects

(hits never leave the node; its NIC is shared by the misses of all jobs on it).

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
    def __init__(self, raw: dict, zone: dict[str, str], rack: dict[str, str]) -> None:
        cfg = raw.get("links") or {}
        self.zone, self.rack = zone, rack
        self.store_racks = [tuple(s.split("/")) for s in raw["store"]["racks"]]
        names = ["store"]
        caps = [float(cfg.get("store_gbps", 0)) * GBPS]
        self.uplink: dict[tuple[str, str], int] = {}
        for key in sorted(set(zip(zone.values(), rack.values(), strict=True))):
            self.uplink[key] = len(names)
            names.append(f"uplink:{key[0]}/{key[1]}")
            caps.append(float(cfg.get("rack_uplink_gbps", 0)) * GBPS)
        self.nic: dict[str, int] = {}
        for node in sorted(zone):
            self.nic[node] = len(names)
            names.append(f"nic:{node}")
            caps.append(float(cfg.get("node_nic_gbps", 0)) * GBPS)
        self.zone_link: dict[str, int] = {}
        for z in sorted(set(zone.values())):
            self.zone_link[z] = len(names)
            names.append(f"zone:{z}")
            caps.append(float(cfg.get("zone_link_gbps", 0)) * GBPS)
        self.names = names
        self.capacity = np.array(caps)  # 0 = not limited
        self.kappa = np.ones(len(names))

    def path(self, node: str) -> list[int]:
        z, r = self.zone[node], self.rack[node]
        if (z, r) in self.store_racks:
            return [i for i in (self.nic[node], 0) if self.capacity[i] > 0]
        near = next((s for s in self.store_racks if s[0] == z), self.store_racks[0])
        links = [self.nic[node], 0, self.uplink[near], self.uplink[(z, r)]]
        if near[0] != z:
            links += [self.zone_link[near[0]], self.zone_link[z]]
        return [i for i in links if self.capacity[i] > 0]

    def stretch(self, paths: list[list[int]], miss_bytes: np.ndarray, free_s: np.ndarray,
                miss_s: np.ndarray, iters: int = 60) -> np.ndarray:
        """Per job: the factor its miss time is stretched by (>= 1); sets ``kappa`` (and starts
        from the last one: between two events few jobs change)."""
        n, m = len(paths), len(self.names)
        if not n:
            self.kappa = np.ones(m)
            return np.ones(0)
        on = np.zeros((n, m), dtype=bool)
        for j, p in enumerate(paths):
            on[j, p] = True
        limited = self.capacity > 0
        cap = np.where(limited, self.capacity, 1.0)
        kappa = self.kappa.copy()
        for _ in range(iters):
            f = np.where(on, kappa, 1.0).max(axis=1)
            rate = miss_bytes / (free_s + miss_s * f)
            load = on.T.astype(float) @ rate
            new = np.where(limited, np.maximum(1.0, kappa * load / cap), 1.0)
            if np.allclose(new, kappa, rtol=1e-3):
                break
            kappa = np.sqrt(kappa * new)  # damped: geometric mean of old and new
        self.kappa = kappa
        return np.where(on, kappa, 1.0).max(axis=1)
