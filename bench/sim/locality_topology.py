"""Cluster, store and network of the locality replay (``bench/sim/locality.py``), read from a
topology file (``bench/data/locality/topology.yaml``): zones x racks x nodes, the nodes that run
the store's shards, and the path from each node to each shard."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from extender.annotations import DEFAULT_RACK_LABEL, LABEL_ZONE

TOPOLOGY = Path(__file__).resolve().parent.parent / "data" / "locality" / "topology.yaml"


@dataclass
class Topology:
    raw: dict
    names: list[str]
    zone: dict[str, str]
    rack: dict[str, str]

    @classmethod
    def load(cls, path: str | Path | None, seed: int, overrides: dict | None = None
             ) -> Topology:
        """``overrides``: dotted keys (``links.shard_gbps``) replacing the file's values."""
        raw = yaml.safe_load(Path(path or TOPOLOGY).read_text())
        for key, value in (overrides or {}).items():
            *parents, leaf = key.split(".")
            node = raw
            for k in parents:
                node = node[k]
            if leaf not in node:
                raise KeyError(f"topology has no {key!r}")
            node[leaf] = value
        places = [(z, f"rack-{r}") for z in raw["zones"] for r in range(raw["racks_per_zone"])]
        slots = [(z, r) for z, r in places for _ in range(raw["nodes_per_rack"])]
        perm = np.random.default_rng(seed).permutation(len(slots))
        names = [f"node-{int(p):03d}" for p in perm]
        return cls(raw, names, {n: s[0] for n, s in zip(names, slots, strict=True)},
                   {n: s[1] for n, s in zip(names, slots, strict=True)})

    def frame(self) -> pd.DataFrame:
        r = self.raw
        return pd.DataFrame({"sn": self.names, "cpu_milli": r["node_cpu_milli"],
                             "memory_mib": r["node_memory_mib"], "gpu": r["gpus_per_node"],
                             "model": r["gpu_model"]})

    def shards(self) -> list[str]:
        """Nodes the store's shards run on: ``store.shards_per_rack`` (default: every node) of
        each rack in ``store.racks``, one shard per node."""
        per_rack = int(self.raw["store"].get("shards_per_rack", self.raw["nodes_per_rack"]))
        out = []
        for spot in self.raw["store"]["racks"]:
            z, r = spot.split("/")
            out += sorted(n for n in self.names if self.zone[n] == z and self.rack[n] == r
                          )[:per_rack]
        return out

    def shard_tiers(self, node: str) -> list[str]:
        """Per shard: the path from ``node`` to it (``rack``, ``zone`` or ``cross_zone``)."""
        return ["rack" if (self.zone[s], self.rack[s]) == (self.zone[node], self.rack[node])
                else "zone" if self.zone[s] == self.zone[node] else "cross_zone"
                for s in self.shards()]

    def tier(self, node: str) -> str:
        """Path from ``node`` to the nearest store shard."""
        tiers = set(self.shard_tiers(node))
        return next(t for t in ("rack", "zone", "cross_zone") if t in tiers)

    def labels(self, node: str) -> dict[str, str]:
        return {LABEL_ZONE: self.zone[node], DEFAULT_RACK_LABEL: self.rack[node]}
