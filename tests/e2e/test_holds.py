"""The hold for a waiting gang (EASY backfill) under the real kube-scheduler.

Fake GPU nodes; pods carry the job controller's ``sparse.io/predicted-seconds``, which bind
records as each pod's predicted end. kube-scheduler counts ``nvidia.com/gpu`` itself, so the
gang is refused without filter being asked: the extender's pod watch sets its hold.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import cluster as e2e_cluster
import pytest
from extender_proc import Extender
from test_scheduling import make_nodes, wait_all_bound, wait_nodes

pytestmark = pytest.mark.e2e

PREDICTED = "sparse.io/predicted-seconds"
HOLD_REASON = "held for a waiting gang of 4 GPUs"


async def create(core: Any, name: str, gpus: int, seconds: int, node: str | None = None,
                 **spec: Any) -> str:
    """A pod of ``gpus`` whole GPUs predicted to run ``seconds``; ``node``: pinned there;
    ``spec``: more of its spec (affinity, tolerations)."""
    manifest = e2e_cluster.gpu_pod_manifest(name, gpus=gpus,
                                            annotations={PREDICTED: str(seconds)})
    if node is not None:
        manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    manifest["spec"].update(spec)
    return (await core.create_namespaced_pod("default", manifest)).metadata.uid


async def wait_hold(ext: Extender, match: Callable[[dict | None], bool],
                    timeout: float = 60) -> dict | None:
    """Until the extender's hold (``/inspect``) satisfies ``match``; returns it."""
    deadline = time.monotonic() + timeout
    while True:
        hold = await asyncio.to_thread(lambda: ext.inspect()["hold"])
        if match(hold):
            return hold
        if time.monotonic() > deadline:
            raise TimeoutError(f"the extender's hold is still {hold}")
        await asyncio.sleep(0.25)


async def waiting_gang(cluster: Any, core: Any, ext: Extender, prefix: str
                       ) -> tuple[str, str, dict[str, tuple[str, int]], str, dict]:
    """Two 4-GPU nodes with three GPUs taken on each, on the first for 50 min, on the other
    for 28 h; a pod asking four GPUs on one node is refused and holds the first node.
    Returns the two nodes, the running pods (node, predicted s), the gang's UID, its hold."""
    soon, late = make_nodes(cluster, prefix, 2, gpus=4, memory_mib=32768, model="V100M32")
    await wait_nodes(ext, [soon, late])
    running = {f"{prefix}soon-{i}": (soon, 3000) for i in range(3)}
    running.update({f"{prefix}long-{i}": (late, 100_000) for i in range(3)})
    for name, (node, seconds) in running.items():
        await create(core, name, 1, seconds, node)
    await wait_all_bound(core, list(running))
    gang = await create(core, "gang", 4, 3600)  # four GPUs on one node: none has them free
    refused = await e2e_cluster.wait_for_pod_event(
        core, "gang", lambda e: e["reason"] == "FailedScheduling")
    assert "nvidia.com/gpu" in refused["message"], refused  # kube-scheduler's own count
    hold = await wait_hold(ext, lambda h: h is not None and h["owner"] == gang)
    assert (hold["node"], hold["gpus"]) == (soon, 4)
    return soon, late, running, gang, hold


async def test_a_waiting_gang_holds_the_node_that_drains_first_until_it_binds_there(
        cluster, core, extender):
    # 1. The gang is refused and holds the node predicted to drain first; it is told so.
    soon, late, running, _, _ = await waiting_gang(cluster, core, extender, "hold-")
    told = await e2e_cluster.wait_for_pod_event(core, "gang", lambda e: e["reason"] == "NodeHeld")
    assert f"node {soon} is held for this pod's 4 GPUs" in told["message"], told

    # 2. A pod predicted to run past the hold's start (2000 s x2 > 3000 s) is kept off it:
    # it takes the other node's last GPU, and the next one waits with the hold's reason.
    await create(core, "past-hold", 1, 2000)
    assert (await wait_all_bound(core, ["past-hold"]))["past-hold"] == late
    await create(core, "past-hold-2", 1, 2000)
    waiting = await e2e_cluster.wait_for_pod_event(
        core, "past-hold-2",
        lambda e: e["reason"] == "FailedScheduling" and HOLD_REASON in e["message"])
    assert waiting["source"] != "sparse-extender", waiting  # kube-scheduler's, where users look
    assert not (await core.read_namespaced_pod("past-hold-2", "default")).spec.node_name
    # A pod predicted to end before it (60 s x2) is let in.
    await create(core, "before-hold", 1, 60)
    assert (await wait_all_bound(core, ["before-hold"]))["before-hold"] == soon

    # 3. The pods on the held node end: the gang binds there (not the pod that waited
    # longer for one GPU of it), and the hold ends.
    for name in [n for n, (node, _) in running.items() if node == soon] + ["before-hold"]:
        await e2e_cluster.delete_pod(core, name)
    assert (await wait_all_bound(core, ["gang"], timeout=120))["gang"] == soon
    await wait_hold(extender, lambda h: h is None)
    pod = await core.read_namespaced_pod("past-hold-2", "default")
    assert not pod.spec.node_name, "the gang's node went to a pod that would have delayed it"


async def test_a_restarted_extender_holds_the_same_node_for_the_waiting_gang(
        cluster, core, extender):
    """The hold and the predicted ends live in the extender's memory: after a restart they
    come back from the API objects (the bound pods' annotations and bind times, the gang's
    Unschedulable condition), and the hold is enforced again."""
    soon, late, _, gang, hold = await waiting_gang(cluster, core, extender, "restart-hold-")
    extender.kill9()
    extender.start()
    again = await wait_hold(extender, lambda h: h is not None and h["owner"] == gang)
    assert again["node"] == soon
    assert abs(again["start_s"] - hold["start_s"]) < 30  # bind time: the API's, to the second
    await create(core, "past-hold", 1, 2000)
    assert (await wait_all_bound(core, ["past-hold"]))["past-hold"] == late


async def test_a_waiting_gang_holds_only_a_node_kube_scheduler_would_let_it_onto(
        cluster, core, extender):
    """The node that drains first is tainted: a gang without the toleration holds the other
    one, a tolerating gang holds it, and one whose required node affinity excludes it holds
    the other one again (the taints come from the extender's node watch)."""
    taint = {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}
    tolerate = [{"key": "dedicated", "operator": "Equal", "value": "infer",
                 "effect": "NoSchedule"}]
    soon, late = "aff-hold-soon", "aff-hold-late"
    cluster.create_gpu_node(soon, gpus=4, memory_mib=32768, model="V100M32", taints=[taint])
    cluster.create_gpu_node(late, gpus=4, memory_mib=32768, model="V100M32")
    await wait_nodes(extender, [soon, late])
    for i in range(3):
        await create(core, f"aff-soon-{i}", 1, 3000, soon, tolerations=tolerate)
        await create(core, f"aff-long-{i}", 1, 100_000, late)
    await wait_all_bound(core, [f"aff-{k}-{i}" for k in ("soon", "long") for i in range(3)])
    not_soon = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "NotIn", "values": [soon]}]}]}}}
    for name, spec, node in (("plain", {}, late), ("tolerant", {"tolerations": tolerate}, soon),
                             ("picky", {"tolerations": tolerate, "affinity": not_soon}, late)):
        gang = await create(core, name, 4, 3600, **spec)
        hold = await wait_hold(extender, lambda h, g=gang: h is not None and h["owner"] == g)
        assert hold["node"] == node, (name, hold)
        await e2e_cluster.delete_pod(core, name)
        await wait_hold(extender, lambda h: h is None)
