"""ClusterState: the inventory and the ledger's bookings as NumPy arrays, for vectorised placement.

Pure. GPUs of one node are contiguous (``node_start[n]:node_stop[n]``), nodes sorted by name.
The state is derived: build it from an Inventory, then ``apply`` reservations (or ``unapply``
them); a reservation on a GPU the inventory does not know is kept aside in ``orphans`` so it is
applied again if that GPU comes back.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping

import numpy as np

from extender.demand import MILLI_PER_GPU
from extender.interference import InterferenceMatrix
from extender.inventory import Inventory, NodeGpus
from extender.ledger.rules import GpuCapacity, Reservation

# Stamps for node contents, unique over every state of the process: two states show the same
# stamp for a node only when one was copied from the other and that node did not change since.
_STAMPS = itertools.count(1)


def gpu_fraction(milli: int | float) -> float:
    """The share of a GPU's compute a job uses: its milli / 1000, or all of it when it states
    none (best-effort compute may use the whole GPU)."""
    return milli / MILLI_PER_GPU if milli > 0 else 1.0


def packed_names(names: list[str]) -> list[str]:
    """Copies of ``names`` made one after another, so they lie side by side in memory (the
    originals are scattered over the heap as the inventory was read). Every filter looks up
    its hundreds of candidates by name, each lookup reading the key it matches: at thousands
    of nodes, keys spread over many pages cost a cache and TLB miss apiece."""
    return [name.encode("utf-8", "surrogatepass").decode("utf-8", "surrogatepass")
            for name in names]


class ClusterState:
    def __init__(self, inventory: Inventory, matrix: InterferenceMatrix) -> None:
        self.inventory = inventory
        self.matrix = matrix
        nodes = sorted(inventory.nodes.values(), key=lambda n: n.name)
        self.node_names: list[str] = packed_names([n.name for n in nodes])
        self.node_index: dict[str, int] = {name: i for i, name in enumerate(self.node_names)}
        counts = np.array([len(n.gpus) for n in nodes], dtype=np.int64)
        self.node_stop = np.cumsum(counts)
        self.node_start = self.node_stop - counts
        gpus = [g for n in nodes for g in n.gpus]
        self.gpu_uuid: list[str] = [g.uuid for g in gpus]
        self.gpu_index: dict[str, int] = {u: i for i, u in enumerate(self.gpu_uuid)}
        self.gpu_node = np.repeat(np.arange(len(nodes), dtype=np.int64), counts)
        self.models: list[str] = sorted({g.model for g in gpus})
        model_id = {m: i for i, m in enumerate(self.models)}
        self.gpu_model = np.array([model_id[g.model] for g in gpus], dtype=np.int64)
        self.mem_cap = np.array([g.memory_mib for g in gpus], dtype=np.int64)
        self.milli_cap = np.full(len(gpus), MILLI_PER_GPU, dtype=np.int64)
        self.mem_used = np.zeros(len(gpus), dtype=np.int64)
        self.milli_used = np.zeros(len(gpus), dtype=np.int64)
        # Resident pods per GPU and class, for the interference term.
        self.residents = np.zeros(len(gpus), dtype=np.int64)
        # Sum of the residents' GPU fractions per class (compute share; 1 when unstated).
        self.class_frac = np.zeros((len(gpus), len(matrix.classes)), dtype=np.float64)
        # Per GPU with residents: [(pod uid, GPU fraction, class index)], for pairwise models.
        self.resident_pods: dict[int, list[tuple[str, float, int]]] = {}
        # Solo profiles of pods (extender.interference.profiles.ProfileBook), when an adapter
        # knows them; the sparse policy then scores pairs with the learned model.
        self.profiles = None
        # Changes on a node's GPUs give it a fresh stamp (caches of per-node results key on it).
        self.node_stamp = np.full(len(nodes), next(_STAMPS), dtype=np.int64)
        # The last stamp given here (stamps are unique process-wide): equal to what a cache
        # saw, no node's stamp changed since (a check of one int, not of every node).
        self.last_stamp = int(self.node_stamp[0]) if len(nodes) else 0
        self.reservations: dict[str, Reservation] = {}
        self.orphans: dict[str, Reservation] = {}
        self.version = -1  # ledger version these bookings reflect

    # --- construction ---------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        inventory: Inventory,
        matrix: InterferenceMatrix,
        reservations: Iterable[Reservation] = (),
        version: int = -1,
    ) -> ClusterState:
        state = cls(inventory, matrix)
        for r in reservations:
            state.apply(r)
        state.version = version
        return state

    def with_inventory(self, inventory: Inventory) -> ClusterState:
        """Same bookings over a changed inventory."""
        return ClusterState.build(
            inventory,
            self.matrix,
            [*self.reservations.values(), *self.orphans.values()],
            self.version,
        )

    def copy(self) -> ClusterState:
        other = object.__new__(ClusterState)
        other.__dict__.update(self.__dict__)
        for name in ("mem_used", "milli_used", "class_frac", "residents", "node_stamp"):
            setattr(other, name, getattr(self, name).copy())
        other.resident_pods = {g: list(pods) for g, pods in self.resident_pods.items()}
        other.reservations = dict(self.reservations)
        other.orphans = dict(self.orphans)
        return other

    # --- bookings -------------------------------------------------------------------------

    def _book(self, reservation: Reservation, sign: int) -> None:
        cls_idx = self.matrix.index(reservation.job_class)
        for gpu, (mem, milli) in reservation.per_gpu().items():
            i = self.gpu_index[gpu]
            self.mem_used[i] += sign * mem
            self.milli_used[i] += sign * milli
            self.class_frac[i, cls_idx] += sign * gpu_fraction(milli)
            self.residents[i] += sign
            entry = (reservation.pod_uid, gpu_fraction(milli), cls_idx)
            if sign > 0:
                self.resident_pods.setdefault(i, []).append(entry)
            else:
                pods = self.resident_pods.get(i, [])
                if entry in pods:
                    pods.remove(entry)
                if not pods:
                    self.resident_pods.pop(i, None)
            self.node_stamp[self.gpu_node[i]] = self.last_stamp = next(_STAMPS)

    def touch(self, nodes: np.ndarray) -> None:
        """Renew the nodes' stamps: something a policy reads of them (their CPU or memory
        left) changed without a GPU booking."""
        for i in np.asarray(nodes, dtype=np.int64).tolist():
            self.node_stamp[i] = self.last_stamp = next(_STAMPS)

    def apply(self, reservation: Reservation) -> None:
        if reservation.pod_uid in self.reservations or reservation.pod_uid in self.orphans:
            self.unapply(reservation.pod_uid)
        if all(g in self.gpu_index for g in reservation.gpus):
            self._book(reservation, +1)
            self.reservations[reservation.pod_uid] = reservation
        else:
            self.orphans[reservation.pod_uid] = reservation

    def unapply(self, pod_uid: str) -> Reservation | None:
        if pod_uid in self.orphans:
            return self.orphans.pop(pod_uid)
        reservation = self.reservations.pop(pod_uid, None)
        if reservation is not None:
            self._book(reservation, -1)
        return reservation

    # --- views ----------------------------------------------------------------------------

    @property
    def mem_free(self) -> np.ndarray:
        return self.mem_cap - self.mem_used

    @property
    def milli_free(self) -> np.ndarray:
        return self.milli_cap - self.milli_used

    def node(self, name: str) -> NodeGpus | None:
        return self.inventory.nodes.get(name)

    def gpus_of(self, node: int) -> np.ndarray:
        return np.arange(self.node_start[node], self.node_stop[node])

    def capacities(self, uuids: Iterable[str]) -> Mapping[str, GpuCapacity]:
        out = {}
        for u in uuids:
            i = self.gpu_index[u]
            out[u] = GpuCapacity(int(self.mem_cap[i]), int(self.milli_cap[i]))
        return out

    def resident_count(self) -> np.ndarray:
        return self.residents
