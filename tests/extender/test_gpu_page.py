"""The /metrics page writes the per-GPU families in bulk: the same series and values as the
registry's own rendering, every other family still from the registry."""

from __future__ import annotations

from builders import gpu_node, inventory
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from extender.interference import default_matrix
from extender.inventory import Gpu
from extender.ledger.memory import MemoryLedger
from extender.ledger.rules import Allocation, Reservation
from extender.metrics import Metrics
from extender.placement import make_policy
from extender.service import Scheduler


def _samples(text: bytes) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text.decode()):
        for s in family.samples:
            if s.name.startswith(("process_", "python_gc_")):  # move between two scrapes
                continue
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in out, f"series twice: {key}"
            out[key] = s.value
    return out


async def test_bulk_page_equals_the_registry_rendering() -> None:
    odd = gpu_node('we"ird\\node', gpus=[Gpu('GPU-"q"\\x', 0, "A100-80GB", 81920)])
    s = Scheduler(inventory=inventory(gpu_node("gpu-a", 2, "V100M16", 16384),
                                      gpu_node("gpu-b", 3), odd),
                  ledger=MemoryLedger(), matrix=default_matrix(), policy=make_policy("sparse"))
    for uid, gpu, mem, milli in (("p1", "GPU-gpu-a-0", 4000, 300), ("p2", "GPU-gpu-a-0", 2000, 150),
                                 ("p3", "GPU-gpu-b-2", 32768, 1000), ("p4", 'GPU-"q"\\x', 100, 7)):
        node = s.state.node_names[s.state.gpu_node[s.state.gpu_index[gpu]]]
        await s.ledger.reserve(Reservation(uid, "ml", uid, node, (
            Allocation(gpu, "main", mem, milli),), job_class="cnn"), s.state.capacities([gpu]))
    await s.view()
    metrics = Metrics(lambda: s.state)
    metrics.requests.labels("filter", "200").inc()
    page = metrics.render()
    assert _samples(page) == _samples(generate_latest(metrics.registry))
    got = _samples(page)
    key = ("sparse_gpu_compute_reserved_ratio",
           (("gpu", "GPU-gpu-a-0"), ("model", "V100M16"), ("node", "gpu-a")))
    assert got[key] == 0.45
    assert got[("sparse_gpu_pods", (("gpu", 'GPU-"q"\\x'), ("model", "A100-80GB"),
                                    ("node", 'we"ird\\node')))] == 1.0
    assert sum(1 for k in got if k[0] == "sparse_gpu_memory_capacity_bytes") == 6
    # an inventory change is seen by the next scrape
    s.update_nodes([], base=inventory(gpu_node("gpu-c", 1)))
    assert {k[1][0][1] for k in _samples(metrics.render()) if k[0] == "sparse_gpu_pods"} == {
        "GPU-gpu-c-0"}
