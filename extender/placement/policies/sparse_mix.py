"""The pod mix sparse measures fragmentation against: a decayed histogram of the pod shapes the
placement core was recently asked to place. Pure.

FGD (Weng et al., ATC '23) measures a node's fragmentation against a fixed set of typical
tasks that someone must supply (the trace simulator derives them from the whole pod list; a
real cluster has no such list, and the extender used a generic guess). sparse keeps its own:
every pod the core scores (``Sparse.costs``, the same call in the extender and the trace
simulator) is counted once by shape (CPU, per-GPU milli, GPU count, allowed models, host
memory); older pods fade with a half-life counted in pods. A pod that waits and is tried
again counts again, so the pods that fail to find room weigh more. A prior mix (``seed``: the
generic default, or the cluster's own typical tasks where the caller knows them) starts the
histogram with the mass of one half-life, so it fades as real pods arrive.

Shapes weigh by pod count (``weigh="pods"``, FGD's popularity). Two alternatives are kept for
experiments and lost on the trace: ``"gpus"`` (a k-GPU pod as k pods, to keep whole nodes for
multi-GPU pods in proportion to their GPU demand) and ``"demand"`` (the GPU request, shares by
their fraction): both leave more GPUs unallocated (default trace seed 42: 281 and 285 vs 272;
multigpu50: 190 and 193 vs 176), because the small shares that fill the slivers beside large
ones lose weight, and so does the sliver they could fill. Pods without GPUs carry no GPU shape
and drop out; their CPU still counts through the shapes that have GPUs (FGD's per-task CPU
test).

Host memory is part of the shape because it strands GPUs as surely as CPU does: in the trace
the GPUs left idle beside the slivers sit mostly on nodes whose host memory is gone (a typical
one-GPU pod asks 48 GiB), which FGD's measure does not see. A node that can no longer give a
shape its memory counts all its free GPU capacity as fragmented for that shape, like FGD's CPU
test. Without that, multi-GPU-heavy mixes lost to FGD (multigpu50, 10 seeds: 0.985x FGD, 2
seeds worse; with it 0.936x, none worse). Pods that request no host memory leave it out
of the test (the extender's demands carry the pod's memory request).
"""

from __future__ import annotations

import math

from extender.demand import MILLI_PER_GPU, PodDemand
from extender.placement.policies.fgd import TypicalTasks

MILLI_STEP = 10
MEM_STEP = 4096  # host memory rounded up to 4 GiB steps (fewer shapes)
# cpu milli, per-GPU milli, GPUs, models, host memory MiB
Shape = tuple[int, int, int, frozenset[str] | None, int]
WEIGHTS = {
    "pods": lambda k: 1.0,  # FGD's popularity
    "gpus": lambda k: float(max(k[2], 1)),  # a pod of k GPUs as k pods; a share as one pod
    "demand": lambda k: k[1] * k[2] / MILLI_PER_GPU,  # GPU request (shares by their fraction)
}


def shape_of(demand: PodDemand, mem_step: int = MEM_STEP) -> Shape:
    """A pod's shape; share sizes rounded up to ``MILLI_STEP`` and host memory up to
    ``mem_step`` (0: memory left out) so demands of every size do not each make a shape of
    their own (more shapes, slower fragmentation terms)."""
    cpu = int(getattr(demand, "cpu_milli", 0))
    mem = int(getattr(demand, "host_mem_mib", 0))
    mem = -(-mem // mem_step) * mem_step if mem_step else 0
    if demand.whole_gpus:
        return cpu, MILLI_PER_GPU, demand.whole_gpus + (1 if demand.has_share else 0), \
            demand.allowed_models, mem
    if demand.has_share:
        milli = -(-int(demand.share_milli) // MILLI_STEP) * MILLI_STEP
        return cpu, min(milli, MILLI_PER_GPU), 1, demand.allowed_models, mem
    return cpu, 0, 0, demand.allowed_models, mem


class DemandMix:
    def __init__(self, half_life: float = 2000.0, refresh: int = 256, coverage: float = 0.95,
                 max_shapes: int = 256, weigh: str = "pods", mem_step: int = MEM_STEP) -> None:
        if weigh not in WEIGHTS:
            raise ValueError(f"weigh must be one of {', '.join(WEIGHTS)}, got {weigh!r}")
        self.weigh = weigh
        self.mem_step = mem_step
        self.decay = 2.0 ** (-1.0 / half_life)
        self.half_life = half_life
        self.refresh = refresh
        self.coverage = coverage
        self.max_shapes = max_shapes
        self._weight: dict[Shape, float] = {}
        self._scale = 1.0  # stored weights are true weights / scale (lazy decay)
        self._last_uid: str | None = None
        self._since = 0
        self._tasks: TypicalTasks | None = None

    def seed(self, tasks: TypicalTasks) -> None:
        """Start afresh from a prior mix (popularity by pod count) worth one half-life."""
        self._weight, self._scale, self._since, self._last_uid = {}, 1.0, 0, None
        for j in range(len(tasks.p)):
            mem = 0 if tasks.mem is None or not self.mem_step else int(tasks.mem[j])
            key = (int(tasks.cpu[j]), int(tasks.milli[j]), int(tasks.num[j]), tasks.models[j],
                   mem)
            self._weight[key] = self._weight.get(key, 0.0) + float(tasks.p[j]) * self.half_life
        self._tasks = None

    def observe(self, demand: PodDemand) -> bool:
        """Count a pod once per scoring round (the core may ask twice in a row for the same
        pod: node costs, then the assignment). True when the mix should be re-read."""
        if demand.uid == self._last_uid:
            return False
        self._last_uid = demand.uid
        self._scale /= self.decay
        if self._scale > 1e200:  # fold the lazy decay back in before it overflows
            self._weight = {k: v / self._scale for k, v in self._weight.items()}
            self._scale = 1.0
        key = shape_of(demand, self.mem_step)
        self._weight[key] = self._weight.get(key, 0.0) + self._scale
        self._since += 1
        if self._since >= self.refresh:
            self._since = 0
            self._tasks = None
            return True
        return False

    def tasks(self) -> TypicalTasks:
        """The current mix as FGD typical tasks: shapes by weight, largest first, until they
        cover ``coverage`` of the weight (at most ``max_shapes``)."""
        if self._tasks is None:
            self._tasks = self._build()
        return self._tasks

    def _build(self) -> TypicalTasks:
        demand = {k: w * WEIGHTS[self.weigh](k) for k, w in self._weight.items()
                  if k[1] > 0 and k[2] > 0}
        total = sum(demand.values())
        if total <= 0 or not math.isfinite(total):
            return TypicalTasks.of([(0, MILLI_PER_GPU, 1, None, 1.0)])
        ranked = sorted(demand.items(), key=lambda kv: (kv[1], kv[0][:3]), reverse=True)
        rows, mems, covered = [], [], 0.0
        for (cpu, milli, num, models, mem), w in ranked[: self.max_shapes]:
            rows.append((cpu, milli, num, models, w / total))
            mems.append(mem)
            covered += w
            if covered >= self.coverage * total:
                break
        # No pod said how much host memory it needs: no test.
        return TypicalTasks.of(rows, mems if any(mems) else None)

    def popularity(self) -> dict[Shape, float]:
        """Pod-count share of each shape (for reports and tests)."""
        total = sum(self._weight.values())
        return {k: v / total for k, v in self._weight.items()} if total else {}
