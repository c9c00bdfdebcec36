"""RecommendDLJob end to end: the CRD on a real API server, the controller (kopf) as a process,
the extender and kube-scheduler placing the workers all together or not at all."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import cluster as e2e_cluster
import pytest
import yaml
from controller_proc import Controller
from tooling import helm_path, versions

from controller.prediction import predict

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "charts" / "sparse" / "crds"
JOBS = "/apis/sparse.io/v1alpha1/namespaces/default/recommenddljobs"
SLOT_TTL = 20

DLRM = {"replicas": 4, "batchSize": 2048, "macs": 2.0e6, "params": 0,
        "vocabularySize": [1_000_000] * 8, "embeddingDim": [64] * 8, "embeddingTableCount": 8,
        "embeddingSizeTotal": 8_000_000, "embeddingDimTotal": 512,
        "optimizer": "adagrad", "jobClass": "recommendation", "runPolicy": {"backoffLimit": 1},
        "template": {"spec": {"terminationGracePeriodSeconds": 0, "containers": [
            {"name": "trainer", "image": "registry.k8s.io/pause:3.10"}]}}}

NO_WORKER_PODS = """
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: e2e-no-worker-pods}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}
  validations:
  - expression: "!has(object.metadata.labels) || !('sparse.io/job' in object.metadata.labels)"
    message: "e2e: worker pods are refused"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: e2e-no-worker-pods}
spec: {policyName: e2e-no-worker-pods, validationActions: [Deny]}
"""


def gpu_mib() -> int:
    """GPU memory holding one worker of DLRM but never two, whatever the predictor's models."""
    return int(predict(DLRM).gpu_mem_mib * 1.5)


def gpu_node(c: e2e_cluster.LocalCluster, name: str = "gpu-0") -> None:
    c.create_gpu_node(name, gpus=4, memory_mib=gpu_mib())


def job_manifest(name: str, **overrides: Any) -> dict[str, Any]:
    return {"apiVersion": "sparse.io/v1alpha1", "kind": "RecommendDLJob",
            "metadata": {"name": name}, "spec": {**json.loads(json.dumps(DLRM)), **overrides}}


@pytest.fixture(scope="module")
def crds(cluster: e2e_cluster.LocalCluster) -> e2e_cluster.LocalCluster:
    cluster.kubectl("apply", "-f", str(CRDS))
    # Right after the API server starts on a busy machine, kubectl's discovery may not know
    # the CRD type yet and the wait fails at once (not a timeout): ask again until a deadline.
    deadline = time.monotonic() + 180
    while True:
        done = cluster.kubectl("wait", "--for=condition=Established",
                               "crd/recommenddljobs.sparse.io", "--timeout=60s", check=False,
                               timeout=90)
        if done.returncode == 0:
            return cluster
        if time.monotonic() > deadline:
            raise AssertionError(f"CRD not established: {done.stderr.strip()}")
        time.sleep(1)


@pytest.fixture
def stack(crds: e2e_cluster.LocalCluster, extender: Any, tmp_path: Path) -> Any:
    ctl = Controller(tmp_path, crds.kubeconfig, extender.url, slot_ttl=SLOT_TTL).start()
    env = SimpleNamespace(cluster=crds, ext=extender, ctl=ctl)
    yield env
    crds.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy",
                 "e2e-no-worker-pods", "--ignore-not-found", check=False)
    if ctl.proc is None or ctl.proc.poll() is not None:
        ctl.start()
    crds.request("DELETE", JOBS)
    try:
        wait_for(env, lambda: not crds.request("GET", JOBS)["items"], 30, "jobs deleted")
    finally:
        ctl.stop()
        if env.ctl is not ctl:  # a test that replaced it (other flags, other RBAC)
            env.ctl.stop()
        for item in crds.request("GET", JOBS)["items"]:  # never leave one Terminating
            crds.request("PATCH", f"{JOBS}/{item['metadata']['name']}",
                         {"metadata": {"finalizers": None}},
                         content_type="application/merge-patch+json", expect=(200, 404))


def wait_for(env: Any, check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout}s waiting for {what}\n--- controller ---\n"
                f"{env.ctl.tail()}\n--- extender ---\n{env.ext.tail()}")
        time.sleep(0.3)


def delete_job(env: Any, name: str) -> None:
    """``kubectl delete --wait``; a loaded machine may stall the API server for a minute."""
    try:
        env.cluster.kubectl("delete", "rdj", name, "--wait=true", "--timeout=150s", timeout=180)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"job {name} not deleted in 150 s\n--- controller ---\n"
                             f"{env.ctl.tail()}\n--- extender ---\n{env.ext.tail()}") from exc


def get_job(env: Any, name: str) -> dict[str, Any]:
    return env.cluster.request("GET", f"{JOBS}/{name}", expect=(200, 404)) or {}


def condition(job: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (job.get("status") or {}).get("conditions") or []
                 if c["type"] == kind), {})


def worker_pods(env: Any) -> list[dict[str, Any]]:
    return env.cluster.request("GET", "/api/v1/namespaces/default/pods?labelSelector="
                               "sparse.io%2Fjob")["items"]


def bookings(env: Any) -> dict[str, dict[str, Any]]:
    """Ledger entries by UID: pod (namespace/name), node, GPUs, state."""
    out: dict[str, dict[str, Any]] = {}
    for node in env.ext.inspect()["nodes"]:
        for gpu in node["gpus"]:
            for p in gpu["pods"]:
                entry = out.setdefault(p["uid"], {"pod": p["pod"], "node": node["name"],
                                                  "gpus": [], "state": p["state"]})
                entry["gpus"].append(gpu["uuid"])
    return out


def job_events(env: Any, name: str) -> list[str]:
    out = env.cluster.kubectl("get", "events", "--field-selector",
                              f"involvedObject.kind=RecommendDLJob,involvedObject.name={name}",
                              "-o", "json")
    return [e["reason"] for e in json.loads(out.stdout)["items"]]


def test_crd_applies_and_refuses_invalid_jobs(crds: e2e_cluster.LocalCluster) -> None:
    bad = job_manifest("bad-lengths", embeddingDim=[64] * 7, embeddingDimTotal=448)
    out = crds.kubectl("apply", "-f", "-", input=json.dumps(bad), check=False)
    assert out.returncode != 0
    assert "spec.embeddingDim" in out.stderr and "same length" in out.stderr
    bad = job_manifest("bad-size", vocabularySize=[0] + [1_000_000] * 7)
    out = crds.kubectl("apply", "-f", "-", input=json.dumps(bad), check=False)
    assert out.returncode != 0 and "spec.vocabularySize[0]" in out.stderr
    bad = job_manifest("bad-replicas", replicas=0)
    out = crds.kubectl("apply", "-f", "-", input=json.dumps(bad), check=False)
    assert out.returncode != 0 and "spec.replicas" in out.stderr
    assert crds.request("GET", JOBS)["items"] == []
    out = crds.kubectl("apply", "--dry-run=server", "-f", str(REPO / "examples" /
                                                              "dlrm-job.yaml"), check=False)
    assert out.returncode == 0, out.stderr
    bad = job_manifest("bad-sharding", embeddingSharding="diagonal")
    out = crds.kubectl("apply", "-f", "-", input=json.dumps(bad), check=False)
    assert out.returncode != 0 and "spec.embeddingSharding" in out.stderr


def test_gang_waits_for_a_free_slot_then_runs_and_delete_releases(stack: Any) -> None:
    demand = predict(DLRM)
    env, c = stack, stack.cluster
    gpu_node(c)
    # A legacy pod (the original system's annotation, no job) takes one GPU of four.
    c.request("POST", "/api/v1/namespaces/default/pods", e2e_cluster.gpu_pod_manifest(
        "legacy", milli=1000, mem_mib=gpu_mib(), annotations={
            "kube-gpu-sparse/task_info": json.dumps({"batch_size": 256, "macs": 1e6})}))
    wait_for(env, lambda: c.request("GET", "/api/v1/namespaces/default/pods/legacy")["spec"]
             .get("nodeName"), 30, "legacy pod bound")

    c.kubectl("apply", "-f", "-", input=json.dumps(job_manifest("dlrm")))
    job = wait_for(env, lambda: (j := get_job(env, "dlrm")) and
                   condition(j, "Admitted").get("reason") == "InsufficientGPU" and j, 30,
                   "job refused admission")
    assert job["status"]["phase"] == "Pending"
    assert condition(job, "Predicted")["status"] == "True"
    assert job["status"]["demand"]["gpuMemMiB"] == demand.gpu_mem_mib
    assert "3 of 4 workers fit" in condition(job, "Admitted")["message"]
    time.sleep(3)  # a few more admission attempts: still nothing held
    assert worker_pods(env) == []
    assert [b["pod"] for b in bookings(env).values()] == ["default/legacy"]
    assert "NotAdmitted" in job_events(env, "dlrm")
    wide = c.kubectl("get", "rdj", "dlrm", "-o", "wide").stdout.splitlines()
    assert "REASON" in wide[0].split() and "InsufficientGPU" in wide[1].split()

    c.request("DELETE", "/api/v1/namespaces/default/pods/legacy", {"gracePeriodSeconds": 0})
    job = wait_for(env, lambda: (j := get_job(env, "dlrm"))
                   and j["status"].get("phase") == "Scheduled" and j, 60, "job scheduled")
    pods = worker_pods(env)
    assert sorted(p["metadata"]["name"] for p in pods) == [f"dlrm-worker-{i}" for i in range(4)]
    assert all(p["spec"]["nodeName"] == "gpu-0" for p in pods)
    placement = job["status"]["placement"]
    gpus = [g for x in placement for g in x["gpus"]]
    assert len(placement) == 4 and len(set(gpus)) == 4 and job["status"]["gpuCount"] == 4
    held = bookings(env)
    assert sorted(b["pod"] for b in held.values()) == [f"default/dlrm-worker-{i}"
                                                        for i in range(4)]
    assert all(b["state"] == "bound" for b in held.values())
    assert sorted(g for b in held.values() for g in b["gpus"]) == sorted(gpus)

    table = c.kubectl("get", "rdj").stdout.splitlines()
    assert table[0].split() == ["NAME", "PHASE", "READY", "MEM-MIB", "MILLI", "GPUS", "AGE"]
    row = table[1].split()
    assert row[:6] == ["dlrm", "Scheduled", "0/4", str(demand.gpu_mem_mib),
                       str(demand.gpu_milli), "4"]

    for p in pods:  # the kubelet's part: the workers start
        c.request("PATCH", f"/api/v1/namespaces/default/pods/{p['metadata']['name']}/status",
                  {"status": {"phase": "Running"}}, content_type="application/merge-patch+json")
    job = wait_for(env, lambda: (j := get_job(env, "dlrm"))
                   and j["status"].get("phase") == "Running" and j, 30, "job running")
    assert job["status"]["ready"] == "4/4" and condition(job, "Running")["status"] == "True"
    assert {"Predicted", "NotAdmitted", "Admitted", "Scheduled", "Running"} <= set(
        job_events(env, "dlrm"))

    delete_job(env, "dlrm")
    wait_for(env, lambda: not worker_pods(env), 30, "worker pods deleted")
    wait_for(env, lambda: not bookings(env), 30, "every GPU released")


def test_tables_sharded_over_the_workers_fit_where_replicated_ones_do_not(stack: Any) -> None:
    # 40 GiB of tables: every worker holding all of them (with Adagrad's sums, their
    # gradients and DDP's buckets) fits no GPU; row-wise over four workers, a quarter each
    env, c = stack, stack.cluster
    tables = {"vocabularySize": [20_000_000] * 8, "embeddingSizeTotal": 160_000_000}
    sharded = {**DLRM, **tables, "embeddingSharding": "row-wise"}
    demand = predict(sharded)
    replicated = predict({**DLRM, **tables})
    gpu = int(demand.gpu_mem_mib * 1.2)
    assert replicated.gpu_mem_mib > gpu
    c.create_gpu_node("gpu-0", gpus=4, memory_mib=gpu)

    c.kubectl("apply", "-f", "-", input=json.dumps(job_manifest("whole", **tables)))
    job = wait_for(env, lambda: (j := get_job(env, "whole")) and
                   condition(j, "Admitted").get("reason") == "Unschedulable" and j, 60,
                   "the replicated job refused: it never fits")
    assert job["status"]["demand"]["gpuMemMiB"] == replicated.gpu_mem_mib
    assert "never fits" in condition(job, "Admitted")["message"]
    delete_job(env, "whole")

    c.kubectl("apply", "-f", "-", input=json.dumps(job_manifest(
        "shards", **tables, embeddingSharding="row-wise")))
    job = wait_for(env, lambda: (j := get_job(env, "shards"))
                   and (j.get("status") or {}).get("phase") == "Scheduled" and j, 60,
                   "job scheduled")
    assert job["status"]["demand"]["gpuMemMiB"] == demand.gpu_mem_mib
    assert "its row-wise shard of the tables" in condition(job, "Predicted")["message"]
    model = json.loads(worker_pods(env)[0]["metadata"]["annotations"]["sparse.io/model"])
    assert model["embeddingSharding"] == "row-wise" and model["dataParallelWorkers"] == 4
    assert len({g for b in bookings(env).values() for g in b["gpus"]}) == 4
    delete_job(env, "shards")

    # sharded tables without DDP's workers to shard them over: the job fails, named why
    c.kubectl("apply", "-f", "-", input=json.dumps(job_manifest(
        "no-ddp", **tables, embeddingSharding="row-wise", dataParallel="none")))
    job = wait_for(env, lambda: (j := get_job(env, "no-ddp"))
                   and (j.get("status") or {}).get("phase") == "Failed" and j, 60, "job failed")
    assert condition(job, "Predicted")["reason"] == "InvalidModel"
    assert "embeddingSharding" in condition(job, "Predicted")["message"]
    assert worker_pods(env) == []


def test_controller_killed_mid_admission_leaves_no_partial_reservation(stack: Any) -> None:
    env, c = stack, stack.cluster
    gpu_node(c)
    c.kubectl("apply", "-f", "-", input=NO_WORKER_PODS)  # pod creation fails after the slots

    def refused() -> bool:
        probe = e2e_cluster.gpu_pod_manifest("probe", labels={"sparse.io/job": "x"})
        try:
            c.request("POST", "/api/v1/namespaces/default/pods", probe)
        except e2e_cluster.ClusterError as exc:
            return "worker pods are refused" in str(exc)
        c.request("DELETE", "/api/v1/namespaces/default/pods/probe", {"gracePeriodSeconds": 0})
        return False

    wait_for(env, refused, 30, "the admission policy in force")
    c.kubectl("apply", "-f", "-", input=json.dumps(job_manifest("dlrm")))
    wait_for(env, lambda: get_job(env, "dlrm").get("status", {}).get("phase") == "Admitted",
             30, "job admitted")
    slots = wait_for(env, lambda: [u for u in bookings(env) if u.startswith("gang/")], 10,
                     "slots booked")
    assert len(slots) == 4 and worker_pods(env) == []
    env.ctl.kill9()
    # Nobody finishes the admission: the slots expire, all of them at once.
    wait_for(env, lambda: not bookings(env), SLOT_TTL + 30, "slots expired")

    c.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy",
              "e2e-no-worker-pods")
    wait_for(env, lambda: not refused(), 30, "the admission policy gone")
    env.ctl.start()
    job = wait_for(env, lambda: (j := get_job(env, "dlrm"))
                   and j["status"].get("phase") == "Scheduled" and j, 60, "job scheduled")
    held = bookings(env)
    assert sorted(b["pod"] for b in held.values()) == [f"default/dlrm-worker-{i}"
                                                        for i in range(4)]
    assert not any(u.startswith("gang/") for u in held)
    assert len({g for x in job["status"]["placement"] for g in x["gpus"]}) == 4


def set_pod_phase(c: e2e_cluster.LocalCluster, name: str, phase: str) -> None:
    c.request("PATCH", f"/api/v1/namespaces/default/pods/{name}/status",
              {"status": {"phase": phase}}, content_type="application/merge-patch+json")


def test_failed_worker_restarts_the_job_then_backoff_limit_fails_it(stack: Any) -> None:
    env, c = stack, stack.cluster
    gpu_node(c)
    c.kubectl("apply", "-f", "-", input=json.dumps(job_manifest("dlrm", replicas=2)))
    wait_for(env, lambda: get_job(env, "dlrm").get("status", {}).get("phase") == "Scheduled",
             60, "job scheduled")
    set_pod_phase(c, "dlrm-worker-0", "Failed")
    job = wait_for(env, lambda: (j := get_job(env, "dlrm"))
                   and j["status"].get("attempt") == 1
                   and j["status"].get("phase") == "Scheduled" and j, 60, "job restarted")
    assert job["status"]["restarts"] == 1
    assert sorted(p["metadata"]["name"] for p in worker_pods(env)) == [
        "dlrm-r1-worker-0", "dlrm-r1-worker-1"]
    wait_for(env, lambda: sorted(b["pod"] for b in bookings(env).values()) == [
        "default/dlrm-r1-worker-0", "default/dlrm-r1-worker-1"], 30, "old workers' GPUs freed")
    assert "Restarting" in job_events(env, "dlrm")

    set_pod_phase(c, "dlrm-r1-worker-1", "Failed")  # backoffLimit 1: no second restart
    job = wait_for(env, lambda: (j := get_job(env, "dlrm"))
                   and j["status"].get("phase") == "Failed" and j, 60, "job failed")
    assert condition(job, "Failed")["reason"] == "BackoffLimitExceeded"
    wait_for(env, lambda: not bookings(env), 30, "every GPU released")


def test_controller_works_with_the_charts_rbac_only(stack: Any, tmp_path: Path) -> None:
    """The chart's ClusterRole is all the controller needs: run it with that token alone,
    in the chart's default queue order (latest-start: it watches nodes for their GPUs)."""
    env, c = stack, stack.cluster
    helm = helm_path()
    if not helm.exists():
        pytest.skip("helm not built (hack/build-helm.sh)")
    env.ctl.stop()  # the admin-token controller steps aside
    rendered = subprocess.run(
        [str(helm), "template", "sparse", str(REPO / "charts" / "sparse"), "--namespace",
         "sparse-system", "--kube-version", versions()["K8S_VERSION"],
         "--show-only", "templates/controller.yaml",
         "--show-only", "templates/priorityclasses.yaml"],
        capture_output=True, text=True, check=True).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] != "Deployment"]
    deployment = next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--queue-order=latest-start" in args
    queue = tuple(a for a in args if a.startswith("--queue-"))
    c.kubectl("create", "namespace", "sparse-system", check=False)
    c.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    token = c.kubectl("create", "token", "sparse-controller", "-n", "sparse-system").stdout
    kubeconfig = yaml.safe_load(Path(c.kubeconfig).read_text())
    kubeconfig["users"] = [{"name": "admin", "user": {"token": token.strip()}}]
    limited = tmp_path / "controller-kubeconfig"
    limited.write_text(yaml.safe_dump(kubeconfig))
    ctl = Controller(tmp_path, limited, env.ext.url, slot_ttl=SLOT_TTL, name="rbac",
                     extra=(*queue, "--priority-class-prefix=sparse-duration")).start()
    env.ctl = ctl  # the fixture's teardown uses (and stops) this one
    gpu_node(c)
    c.kubectl("apply", "-f", "-", input=json.dumps(job_manifest("dlrm", replicas=2,
                                                                steps=10**8)))
    wait_for(env, lambda: get_job(env, "dlrm").get("status", {}).get("phase") == "Scheduled",
             60, "job scheduled by the least-privileged controller")
    band = get_job(env, "dlrm")["status"]["queueBand"]
    assert band["priority"] == 1000 and band["errorBound"] > 0 and band["medianError"] > 0, band
    log = ctl.tail(400)  # a bare "403" may be part of a port number: match the status alone
    assert "Forbidden" not in log and not re.search(r"\b403\b", log), log
    delete_job(env, "dlrm")
    wait_for(env, lambda: not bookings(env), 30, "every GPU released")


def test_controller_restarted_mid_admission_reuses_its_slots(stack: Any) -> None:
    env, c = stack, stack.cluster
    gpu_node(c)
    c.kubectl("apply", "-f", "-", input=NO_WORKER_PODS)
    probe = e2e_cluster.gpu_pod_manifest("probe", labels={"sparse.io/job": "x"})

    def refused() -> bool:
        try:
            c.request("POST", "/api/v1/namespaces/default/pods", probe)
        except e2e_cluster.ClusterError:
            return True
        c.request("DELETE", "/api/v1/namespaces/default/pods/probe", {"gracePeriodSeconds": 0})
        return False

    wait_for(env, refused, 30, "the admission policy in force")
    c.kubectl("apply", "-f", "-", input=json.dumps(job_manifest("dlrm")))
    slots = wait_for(env, lambda: {u: b["gpus"] for u, b in bookings(env).items()
                                   if u.startswith("gang/")}, 30, "slots booked")
    assert len(slots) == 4
    env.ctl.kill9()
    c.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy",
              "e2e-no-worker-pods")
    wait_for(env, lambda: not refused(), 30, "the admission policy gone")
    env.ctl.start()  # well within the slot TTL: the same slots come back
    job = wait_for(env, lambda: (j := get_job(env, "dlrm"))
                   and j["status"].get("phase") == "Scheduled" and j, 60, "job scheduled")
    held = bookings(env)
    assert not any(u.startswith("gang/") for u in held) and len(held) == 4
    assert sorted(g for b in held.values() for g in b["gpus"]) == sorted(
        g for gpus in slots.values() for g in gpus)
    assert {x["slot"] for x in job["status"]["placement"]} == set(slots)


def test_queue_band_priority_class_from_the_chart_reaches_the_workers(stack: Any,
                                                                     tmp_path: Path) -> None:
    """The chart's band PriorityClasses (and the long gangs' class) exist; a job declaring its
    steps gets its band's class on every worker, the API server resolves it to the band's
    priority, and the pods bind."""
    env, c = stack, stack.cluster
    helm = helm_path()
    if not helm.exists():
        pytest.skip("helm not built (hack/build-helm.sh)")
    rendered = subprocess.run(
        [str(helm), "template", "sparse", str(REPO / "charts" / "sparse"), "--namespace",
         "sparse-system", "--kube-version", versions()["K8S_VERSION"],
         "--show-only", "templates/priorityclasses.yaml"],
        capture_output=True, text=True, check=True).stdout
    classes = [d for d in yaml.safe_load_all(rendered) if d]
    assert sorted(d["metadata"]["name"] for d in classes) == [
        *(f"sparse-duration-{b}" for b in range(4)), "sparse-duration-gang"]
    assert {d["preemptionPolicy"] for d in classes} == {"Never"}
    c.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(classes))
    env.ctl.stop()
    env.ctl = Controller(tmp_path, c.kubeconfig, env.ext.url, slot_ttl=SLOT_TTL, name="bands",
                         extra=("--queue-order", "latest-start")).start()  # the chart's
    gpu_node(c)
    c.kubectl("apply", "-f", "-", input=json.dumps(job_manifest("dlrm", replicas=2,
                                                                steps=10**8)))
    job = wait_for(env, lambda: (j := get_job(env, "dlrm"))
                   and (j.get("status") or {}).get("phase") == "Scheduled" and j, 60,
                   "job scheduled")
    assert job["status"]["queueBand"]["name"] == "sparse-duration-3"
    pods = worker_pods(env)
    assert {(p["spec"]["priorityClassName"], p["spec"]["priority"]) for p in pods} == {
        ("sparse-duration-3", 1000)}  # latest-start: the longest band is taken last
    assert "QueueBand" in job_events(env, "dlrm")
    delete_job(env, "dlrm")
    wait_for(env, lambda: not bookings(env), 30, "every GPU released")
