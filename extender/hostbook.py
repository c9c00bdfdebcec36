"""CPU and memory per node as kube-scheduler accounts them: each Node's allocatable minus the
requests of the pods bound to it. Pure bookkeeping; the adapters feed it (the node and pod
watches, full Node objects in filter requests, the extender's own binds) and ``attach`` hands
the placement core a host view (``HostView``) of it, so the core's CPU and memory terms (fit,
fragmentation, sparse's fill measure) act in the extender as they do in the simulator.

Nodes whose allocatable was never seen count as unlimited (the core then tests nothing there),
and with no allocatable known at all no view is attached. Pods the pod watch does not see
(``--pod-selector``) are not subtracted: the view may then overstate what is left, never
understate it through them. Every change renews the node's stamp in the state, so cost caches
keyed by stamps (``verbs.costcache``) recompute exactly the nodes whose CPU or memory moved.
"""

from __future__ import annotations

import numpy as np

from extender.errors import InvalidDemand
from extender.placement import ClusterState
from extender.placement.policies.common import HostView
from extender.quantity import parse_scaled_quantity

UNLIMITED = 2**40  # what a node whose allocatable is unknown offers: never binding


def allocatable_of(allocatable: dict | None) -> tuple[int, int] | None:
    """(milli-CPU, MiB) of a Node's ``status.allocatable``; None when either is missing or
    unreadable (the node then stays unlimited)."""
    if not allocatable or "cpu" not in allocatable or "memory" not in allocatable:
        return None
    try:
        return (parse_scaled_quantity(allocatable["cpu"], "allocatable cpu", 1000),
                parse_scaled_quantity(allocatable["memory"], "allocatable memory", 1 / 2**20))
    except InvalidDemand:
        return None


class HostBook:
    def __init__(self) -> None:
        self._alloc: dict[str, tuple[int, int]] = {}
        self._raw: dict[str, tuple[object, object]] = {}  # as last given: skip re-parsing
        self._watched: set[str] = set()  # nodes the API server's watch described
        self._pods: dict[str, tuple[str, int, int]] = {}  # uid -> node, cpu, mem
        self._used: dict[str, list[int]] = {}  # node -> [cpu, mem, pods]
        self._dirty: set[str] = set()
        self._view: HostView | None = None  # the one last attached
        self._names: list[str] | None = None  # the node list it was built for

    def __len__(self) -> int:
        return len(self._alloc)

    def set_node(self, name: str, allocatable: dict | None, watched: bool = True) -> None:
        """A Node seen (watch or relist; ``watched=False``: a filter request's Nodes, which
        never override what the watch said): its allocatable."""
        if watched:
            self._watched.add(name)
        elif name in self._watched:
            return
        raw = (allocatable.get("cpu"), allocatable.get("memory")) if allocatable else None
        if raw is not None and self._raw.get(name) == raw:
            return  # every full-Node request repeats it: no parsing on the hot path
        value = allocatable_of(allocatable)
        if value is None:
            self._raw.pop(name, None)
            if self._alloc.pop(name, None) is not None:
                self._dirty.add(name)
            return
        self._raw[name] = raw
        if self._alloc.get(name) != value:
            self._alloc[name] = value
            self._dirty.add(name)

    def request_nodes(self, nodes: list[tuple[str, object, object]]) -> None:
        """The Nodes of a filter request, (name, allocatable cpu, memory) each: one tuple
        comparison per node with what was last given; only nodes that differ are parsed (and
        never override the watch). Every full-Node request repeats them all."""
        raw = self._raw
        for name, cpu, mem in [n for n in nodes if raw.get(n[0]) != n[1:]]:
            given = {k: v for k, v in (("cpu", cpu), ("memory", mem)) if v is not None}
            self.set_node(name, given, watched=False)

    def forget_node(self, name: str) -> None:
        self._raw.pop(name, None)
        self._watched.discard(name)
        if self._alloc.pop(name, None) is not None:
            self._dirty.add(name)

    def bind(self, uid: str, node: str, cpu: int, mem: int) -> None:
        """The pod runs (or was just bound) on ``node`` asking ``cpu`` milli and ``mem`` MiB."""
        if self._pods.get(uid) == (node, cpu, mem):
            return
        self.release(uid)
        self._pods[uid] = (node, cpu, mem)
        used = self._used.setdefault(node, [0, 0, 0])
        used[0] += cpu
        used[1] += mem
        used[2] += 1
        self._dirty.add(node)

    def release(self, uid: str) -> None:
        """The pod is gone or finished."""
        held = self._pods.pop(uid, None)
        if held is None:
            return
        node, cpu, mem = held
        used = self._used[node]
        used[0] -= cpu
        used[1] -= mem
        used[2] -= 1
        if not used[2]:
            del self._used[node]
        self._dirty.add(node)

    def retain_pods(self, uids: set[str]) -> None:
        """After a relist: forget the pods that are no longer there."""
        for uid in [u for u in self._pods if u not in uids]:
            self.release(uid)

    def retain_nodes(self, names: set[str]) -> None:
        for name in [n for n in self._alloc if n not in names]:
            self.forget_node(name)

    def left(self, name: str) -> tuple[int, int] | None:
        """(CPU, memory) left on the node, None when its allocatable is unknown."""
        alloc = self._alloc.get(name)
        if alloc is None:
            return None
        used = self._used.get(name, (0, 0, 0))
        return alloc[0] - used[0], alloc[1] - used[1]

    def attach(self, state: ClusterState) -> None:
        """Give the state the host view: built afresh for a state that does not carry the
        last one (a new inventory or a rebuilt state), otherwise only the nodes changed since
        are updated and their stamps renewed."""
        if not self._alloc and self._view is None:
            return  # nothing known: the core tests no CPU or memory
        view = getattr(state, "host", None)
        if view is None or view is not self._view or self._names is not state.node_names:
            self._view = self._build(state)
            self._names = state.node_names
            self._dirty.clear()
            state.host = self._view
            state.touch(np.arange(len(state.node_names)))
            return
        if not self._dirty:
            return
        index = state.node_index
        rows = []
        for name in self._dirty:
            i = index.get(name)
            if i is not None:
                self._fill(view, i, name)
                rows.append(i)
        self._dirty.clear()
        state.touch(np.array(rows, dtype=np.int64))

    def _build(self, state: ClusterState) -> HostView:
        n = len(state.node_names)
        view = HostView(np.full(n, UNLIMITED, np.int64), np.full(n, UNLIMITED, np.int64),
                        np.full(n, UNLIMITED, np.int64), np.full(n, UNLIMITED, np.int64),
                        np.zeros(n, np.int64), stamped=True)
        index = state.node_index
        for name in {*self._alloc, *self._used}:
            i = index.get(name)
            if i is not None:
                self._fill(view, i, name)
        return view

    def _fill(self, view: HostView, i: int, name: str) -> None:
        cpu, mem = self._alloc.get(name, (UNLIMITED, UNLIMITED))
        used = self._used.get(name, (0, 0, 0))
        view.cpu_cap[i], view.mem_cap[i] = cpu, mem
        view.cpu_left[i], view.mem_left[i] = cpu - used[0], mem - used[1]
        view.pods[i] = used[2]
