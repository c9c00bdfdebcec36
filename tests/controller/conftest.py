"""Fakes for the controller: an API server of dicts, and the real extender service in-process
(the gang verb, filter and bind run for real on a MemoryLedger)."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import msgspec
import pytest
from builders import gpu_node, inventory

from controller.errors import PodCreateError
from controller.prediction import predict
from controller.reconcile import Config, Reconciler, waiting_entry
from extender.interference import default_matrix
from extender.ledger.memory import MemoryLedger
from extender.placement import make_policy
from extender.protocol import BindingArgs, ExtenderArgs, pod_from_dict
from extender.service import Scheduler
from extender.verbs import gang

_uids = itertools.count()

MODEL = {"batchSize": 2048, "vocabularySize": [1_000_000] * 8, "embeddingDim": [64] * 8,
         "optimizer": "adagrad"}


def gpu_mib_for_one_worker() -> int:
    """GPU memory that holds one worker of MODEL but never two, whatever the predictor's
    current models say (so the tests count GPUs, not predictor versions)."""
    return int(predict(MODEL).gpu_mem_mib * 1.5)


def merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        else:
            target[k] = copy.deepcopy(v)


class FakeKube:
    def __init__(self) -> None:
        self.pods: dict[str, dict[str, Any]] = {}
        self.jobs: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[str, str, str]] = []
        self.fail_creates = 0
        self.refuse_creates = False

    async def get_job(self, namespace, name):
        job = self.jobs.get(name)
        return copy.deepcopy(job) if job is not None else None

    async def list_pods(self, namespace, job_uid):
        return [copy.deepcopy(p) for p in self.pods.values()
                if p["metadata"]["labels"].get("sparse.io/job-uid") == job_uid]

    async def create_pod(self, body):
        if self.refuse_creates:
            raise PodCreateError("admission webhook denied the request")
        if self.fail_creates:
            self.fail_creates -= 1
            raise RuntimeError("controller killed")
        name = body["metadata"]["name"]
        if name in self.pods:
            return False
        pod = copy.deepcopy(body)
        pod["metadata"]["uid"] = f"pod-uid-{next(_uids)}"
        pod["status"] = {"phase": "Pending"}
        self.pods[name] = pod
        return True

    async def delete_pod(self, namespace, name):
        self.pods.pop(name, None)

    async def patch_status(self, namespace, name, status):
        if name in self.jobs:
            merge(self.jobs[name].setdefault("status", {}), status)

    async def delete_job(self, namespace, name):
        self.jobs.pop(name, None)

    async def event(self, job, kind, reason, message):
        self.events.append((kind, reason, message))


class InProcessGangs:
    def __init__(self, scheduler: Scheduler) -> None:
        self.s = scheduler

    async def reserve(self, request):
        req = gang.decode_reserve(msgspec.json.encode(request))
        return msgspec.to_builtins(await gang.reserve(self.s, req))

    async def release(self, job_uid, attempt=None):
        return await gang.release(self.s, gang.GangRelease(job=job_uid, attempt=attempt))


class World:
    def __init__(self, nodes) -> None:
        self.scheduler = Scheduler(inventory=inventory(*nodes), ledger=MemoryLedger(),
                                   matrix=default_matrix(), policy=make_policy("sparse"))
        self.kube = FakeKube()
        self.now = 1_000_000.0
        self.r = Reconciler(self.kube, InProcessGangs(self.scheduler),
                            Config(slot_ttl_s=60, max_pass_over_s=300),
                            waiting=self.waiting, clock=lambda: self.now)
        self.scheduler.clock = lambda: self.now

    def waiting(self):
        return [w for j in self.kube.jobs.values() if (w := waiting_entry(j)) is not None]

    def submit(self, name, replicas=4, created=None, **spec):
        job = {"metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}",
                            "creationTimestamp": created or "2026-12-01T00:00:00Z"},
               "spec": {"replicas": replicas, **MODEL, "runPolicy": {"backoffLimit": 1},
                        "template": {"spec": {"containers": [{"name": "trainer",
                                                              "image": "x"}]}}, **spec}}
        self.kube.jobs[name] = job
        return job

    async def reconcile(self, name):
        await self.r.reconcile(copy.deepcopy(self.kube.jobs[name]))
        return self.kube.jobs.get(name, {}).get("status", {})

    async def schedule(self):
        """kube-scheduler's part: filter then bind every unbound pod through the extender."""
        names = list(self.scheduler.inventory.nodes)
        for pod in self.kube.pods.values():
            if pod["spec"].get("nodeName"):
                continue
            p = pod_from_dict(pod)
            out = await self.scheduler.filter(ExtenderArgs(pod=p, node_names=names, nodes=None,
                                                           raw_nodes=None))
            if not out.NodeNames:
                continue
            meta = pod["metadata"]
            result = await self.scheduler.bind(BindingArgs(
                pod_name=meta["name"], pod_namespace=meta["namespace"], pod_uid=meta["uid"],
                node=out.NodeNames[0]))
            assert result.Error == "", result.Error
            held = await self.scheduler.ledger.get(meta["uid"])
            pod["spec"]["nodeName"] = held.node
            meta["annotations"]["sparse.io/gpu-uuids"] = ",".join(held.gpus)

    def set_phase(self, phase, *names):
        for name, pod in self.kube.pods.items():
            if not names or name in names:
                pod["status"]["phase"] = phase

    async def ledger(self):
        return (await self.scheduler.ledger.snapshot())[1]


@pytest.fixture
def world():
    mib = gpu_mib_for_one_worker()
    w = World([gpu_node("a", 2, memory_mib=mib), gpu_node("b", 2, memory_mib=mib)])
    w.gpu_mib = mib
    return w
