"""Install proof against the local control plane: the Helm chart, the webhook, the node agent.

* ``helm lint`` / ``helm template`` are clean, and manifests/ is what the chart renders;
* the rendered chart applies to the real API server (namespaces first, then everything);
* the API server calls the webhook over TLS with the chart-generated certificate and caBundle,
  and a GPU pod comes back with ``schedulerName`` and ``NVIDIA_VISIBLE_DEVICES`` injected;
* the agent in fake mode registers GPUs on a Node (capacity, allocatable, annotation);
* kube-scheduler runs with the chart's KubeSchedulerConfiguration (``enableHTTPS: true``, the
  chart-generated CA as ``tlsConfig.caData``) and places the webhook-mutated pod on the agent's
  node through the extender serving the chart-generated certificate (HTTPS only);
* the agent's ValidatingAdmissionPolicy: a service-account token bound to a pod on node A (the
  API server puts the node-name claim in it) lets the real agent publish on node A, and is
  refused on node B, on labels, and without the node claim.

Helm comes from hack/build-helm.sh (cached under ~/.cache/sparse/helm); without it (or without
the control plane) the tests skip, unless SPARSE_E2E_REQUIRE=1.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cluster as e2e_cluster
import pytest
import yaml
from tooling import helm_path, versions

pytestmark = pytest.mark.e2e

ROOT = e2e_cluster.REPO_ROOT
CHART = ROOT / "charts" / "sparse"
NAMESPACE = "sparse-system"
GPU_LIMITS = {"sparse.io/gpu-milli": "500", "sparse.io/gpu-mem": "4096"}


def _required() -> bool:
    return os.environ.get("SPARSE_E2E_REQUIRE", "") not in ("", "0")


@pytest.fixture(scope="module")
def helm() -> Path:
    path = helm_path()
    if not os.access(path, os.X_OK):
        msg = f"helm not built ({path}); run hack/build-helm.sh (~6 min cold)"
        if _required():
            pytest.fail(f"SPARSE_E2E_REQUIRE is set: {msg}", pytrace=False)
        pytest.skip(msg)
    return path


def run(*argv: str | Path, env: dict[str, str] | None = None, timeout: float = 120,
        input: str | None = None) -> subprocess.CompletedProcess[str]:
    res = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, **(env or {})}, input=input)
    assert res.returncode == 0, f"{argv}: rc={res.returncode}\n{res.stdout}\n{res.stderr}"
    return res


def template(helm: Path, *sets: str) -> list[dict[str, Any]]:
    k8s = versions()["K8S_VERSION"]
    args = [helm, "template", "sparse", CHART, "--namespace", NAMESPACE, "--kube-version", k8s]
    for s in sets:
        args += ["--set", s]
    return [d for d in yaml.safe_load_all(run(*args).stdout) if d]


# ------------------------------------------------------------------------------ helm only


def test_helm_lint_is_clean(helm: Path) -> None:
    for extra in ([], ["--set", "metrics.serviceMonitor.enabled=true,webhook.mps.enabled=true,"
                              "redis.enabled=false,redis.externalUrl=redis://r:6379/0,"
                              "agent.fake.enabled=true,webhook.captureWholeGpuPods=true"]):
        out = run(helm, "lint", "--strict", CHART, *extra).stdout
        assert "0 chart(s) failed" in out and "[WARNING]" not in out and "[ERROR]" not in out


def test_helm_template_variants(helm: Path) -> None:
    docs = template(helm)
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    for want in [("Deployment", "sparse-extender"), ("Deployment", "sparse-scheduler"),
                 ("Deployment", "sparse-predictor"), ("Deployment", "sparse-webhook"),
                 ("StatefulSet", "sparse-redis"), ("DaemonSet", "sparse-agent"),
                 ("MutatingWebhookConfiguration", "sparse-webhook"),
                 ("PodDisruptionBudget", "sparse-extender"), ("ConfigMap", "sparse-dashboard")]:
        assert want in kinds, want
    ext = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] ==
               "sparse-extender")
    assert ext["spec"]["replicas"] >= 2
    assert any(a.startswith("--store=redis://") for a in
               ext["spec"]["template"]["spec"]["containers"][0]["args"])
    # external Redis, no bundled one
    docs = template(helm, "redis.enabled=false", "redis.externalUrl=redis://ext:6379/1")
    assert not any(d["kind"] == "StatefulSet" for d in docs)
    assert "--store=redis://ext:6379/1" in json.dumps(docs)
    # user-provided TLS Secret: no generated webhook Secret, caBundle passed through
    docs = template(helm, "webhook.tls.existingSecret=mine", "webhook.tls.caBundle=Zm9v")
    assert not any(d["kind"] == "Secret" and "webhook" in d["metadata"]["name"] for d in docs)
    mwc = next(d for d in docs if d["kind"] == "MutatingWebhookConfiguration")
    assert mwc["webhooks"][0]["clientConfig"]["caBundle"] == "Zm9v"
    # ServiceMonitors only when asked
    docs = template(helm, "metrics.serviceMonitor.enabled=true")
    assert sum(d["kind"] == "ServiceMonitor" for d in docs) == 3


def test_manifests_match_the_chart(helm: Path) -> None:
    run(ROOT / "hack" / "render-manifests.sh", "--check", env={"HELM": str(helm)})


# ------------------------------------------------------------------------------ on the cluster


def _apply(cluster: e2e_cluster.LocalCluster, docs: list[dict[str, Any]]) -> None:
    """Namespaces and CRDs first (later objects need them), then everything else."""
    first = [d for d in docs if d["kind"] in ("Namespace", "CustomResourceDefinition")]
    rest = [d for d in docs if d not in first]
    for batch in (first, rest):
        if batch:
            cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(batch))


@pytest.fixture(scope="module")
def installed(cluster: e2e_cluster.LocalCluster, helm: Path) -> Iterator[list[dict[str, Any]]]:
    docs = template(helm, "createNamespace=true", "webhook.tls.ipSANs={127.0.0.1}",
                    "extender.tls.ipSANs={127.0.0.1}")
    try:
        _apply(cluster, docs)
        yield docs
    finally:
        # The webhook is only reachable while this module runs; never leave it registered.
        cluster.kubectl("delete", "mutatingwebhookconfiguration", "sparse-webhook",
                        "--ignore-not-found", check=False)


def test_rendered_chart_applies_to_the_api_server(cluster, installed) -> None:
    for d in installed:
        ns = d["metadata"].get("namespace")
        args = ["get", d["kind"].lower(), d["metadata"]["name"], "-o", "name"]
        if ns:
            args += ["-n", ns]
        assert cluster.kubectl(*args).stdout.strip(), d["kind"]
    # Server-side validation with strict field checking of everything once more.
    cluster.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-",
                    input=yaml.safe_dump_all(installed))


def test_chart_variants_pass_server_side_validation(cluster, installed, helm) -> None:
    """Sentinel mode and the standard knobs, validated by the API server (strict fields)."""
    docs = template(helm, "redis.sentinel.enabled=true", "redis.persistence.enabled=true",
                    "extender.tls.existingSecret=mine", "global.imageRegistry=reg.example.com",
                    "podLabels.team=ml", "podAnnotations.a=b", "extender.priorityClassName=p",
                    "extender.topologySpreadConstraints[0].maxSkew=1",
                    "extender.topologySpreadConstraints[0].topologyKey=zone",
                    "extender.topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
                    "redis.nodeSelector.disk=ssd", "agent.advertiseWholeGpus=true",
                    "extender.serviceAccount.annotations.iam=role")
    res = cluster.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-",
                          input=yaml.safe_dump_all(docs), check=False)
    assert res.returncode == 0, res.stderr


class Webhook:
    """``sparse-extender webhook`` as a process, serving the chart-generated certificate."""

    def __init__(self, workdir: Path, secret: dict[str, Any]) -> None:
        self.cert, self.key = workdir / "tls.crt", workdir / "tls.key"
        self.cert.write_bytes(base64.b64decode(secret["data"]["tls.crt"]))
        self.key.write_bytes(base64.b64decode(secret["data"]["tls.key"]))
        self.key.chmod(0o600)
        self.ca = workdir / "ca.crt"
        self.ca.write_bytes(base64.b64decode(secret["data"]["ca.crt"]))
        (self.port,) = e2e_cluster.free_ports(1)
        self.log = workdir / "webhook.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Webhook:
        import ssl

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "extender", "webhook", "--host", "127.0.0.1", "--port",
             str(self.port), "--tls-cert", str(self.cert), "--tls-key", str(self.key)],
            stdout=self.log.open("wb"), stderr=subprocess.STDOUT,
        )
        ctx = ssl.create_default_context(cafile=str(self.ca))  # proves the chain and IP SAN
        deadline = time.monotonic() + 30
        while True:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{self.port}/healthz",
                                            context=ctx, timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                assert time.monotonic() < deadline, self.log.read_text()
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


@pytest.fixture(scope="module")
def webhook(cluster, installed, tmp_path_factory) -> Iterator[Webhook]:
    secret = cluster.request("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/sparse-webhook-tls")
    hook = Webhook(tmp_path_factory.mktemp("webhook"), secret).start()
    # The chart points the API server at the Service; the test API server runs on loopback
    # without a cluster network, so repoint the same configuration (caBundle untouched) at
    # the local process.
    patch = [{"op": "remove", "path": "/webhooks/0/clientConfig/service"},
             {"op": "add", "path": "/webhooks/0/clientConfig/url",
              "value": f"https://127.0.0.1:{hook.port}/mutate"}]
    cluster.kubectl("patch", "mutatingwebhookconfiguration", "sparse-webhook", "--type=json",
                    "-p", json.dumps(patch))
    mwc = cluster.request("GET", "/apis/admissionregistration.k8s.io/v1/"
                          "mutatingwebhookconfigurations/sparse-webhook")
    assert mwc["webhooks"][0]["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    try:
        yield hook
    finally:
        hook.stop()


def _pod(name: str, limits: dict[str, str] | None, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 0, **spec, "containers": [
                {"name": "main", "image": "registry.invalid/cuda:12",
                 "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
                 **({"resources": {"limits": limits}} if limits else {})},
                {"name": "sidecar", "image": "registry.invalid/log:1"}]}}


def _create(cluster, pod: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
    # A short wait: the API server may need a moment to load the patched webhook config.
    deadline = time.monotonic() + 15
    while True:
        try:
            return cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
        except e2e_cluster.ClusterError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _delete_pod(cluster, name: str) -> None:
    cluster.request("DELETE", f"/api/v1/namespaces/default/pods/{name}",
                    {"gracePeriodSeconds": 0}, expect=(200, 202, 404))


def test_webhook_mutates_gpu_pods_over_tls(cluster, webhook) -> None:
    try:
        created = _create(cluster, _pod("wh-gpu", GPU_LIMITS))
        spec = created["spec"]
        assert spec["schedulerName"] == "sparse-scheduler"
        want = {"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {
            "apiVersion": "v1", "fieldPath": "metadata.annotations['sparse.io/gpu-uuids']"}}}
        for c in spec["containers"]:
            assert [e for e in c["env"] if e["name"] == "NVIDIA_VISIBLE_DEVICES"] == [want]
        # A pod without sparse resources is not even sent (matchConditions): untouched.
        plain = _create(cluster, _pod("wh-plain", None))
        assert plain["spec"]["schedulerName"] == "default-scheduler"
        assert plain["spec"]["containers"][0]["env"] == [
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    finally:
        _delete_pod(cluster, "wh-gpu")
        _delete_pod(cluster, "wh-plain")
    assert "mutated pod default/wh-gpu" in webhook.log.read_text()
    assert "wh-plain" not in webhook.log.read_text()


def _bare_node(cluster, name: str) -> None:
    """A Ready node with CPU/memory/pods but no GPU resources or annotation."""
    res = {"cpu": "32", "memory": "256Gi", "pods": "110"}
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"capacity": res, "allocatable": res,
                       "conditions": [e2e_cluster.ready_condition()]}}
    cluster.request("POST", "/api/v1/nodes", node)
    cluster.request("PATCH", f"/api/v1/nodes/{name}/status",
                    {"status": {"conditions": [e2e_cluster.ready_condition()]}},
                    content_type="application/merge-patch+json")


def _agent(cluster, node: str, *extra: str, kubeconfig: Path | None = None) -> None:
    run(sys.executable, "-m", "agent.cli", "run", "--once", "--node-name", node,
        "--kubeconfig", kubeconfig or cluster.kubeconfig, "--fake-gpus", "4",
        "--fake-model", "V100M16", "--fake-memory-mib", "16384", *extra)


def test_agent_registers_fake_gpus(cluster) -> None:
    from extender.inventory import node_from_annotations
    from extender.quantity import parse_int_quantity

    cluster.delete_node("agent-node")
    _bare_node(cluster, "agent-node")
    _agent(cluster, "agent-node")
    node = cluster.request("GET", "/api/v1/nodes/agent-node")
    for section in ("capacity", "allocatable"):
        got = node["status"][section]
        assert parse_int_quantity(got["sparse.io/gpu-milli"], "m") == 4000  # comes back as "4k"
        assert parse_int_quantity(got["sparse.io/gpu-mem"], "m") == 4 * 16384
        assert "nvidia.com/gpu" not in node["status"][section]
    inv = node_from_annotations("agent-node", node["metadata"]["annotations"])
    assert inv is not None and [g.index for g in inv.gpus] == [0, 1, 2, 3]
    rv = node["metadata"]["resourceVersion"]
    _agent(cluster, "agent-node")  # nothing changed: no write
    assert cluster.request("GET", "/api/v1/nodes/agent-node")["metadata"]["resourceVersion"] == rv
    cluster.delete_node("agent-node")


def _extender_tls(cluster, workdir: Path) -> tuple[Path, Path, Path]:
    """The chart-generated extender certificate, key and CA (Secret sparse-extender-tls)."""
    secret = cluster.request("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/sparse-extender-tls")
    paths = []
    for key in ("tls.crt", "tls.key", "ca.crt"):
        path = workdir / key
        path.write_bytes(base64.b64decode(secret["data"][key]))
        path.chmod(0o600)
        paths.append(path)
    return paths[0], paths[1], paths[2]


async def test_chart_scheduler_places_webhook_pod_on_agent_node(cluster, core, webhook, installed,
                                                                tmp_path) -> None:
    from extender_proc import Extender

    cm = next(d for d in installed if d["kind"] == "ConfigMap"
              and d["metadata"]["name"] == "sparse-scheduler-config")
    chart_cfg = yaml.safe_load(cm["data"]["scheduler-config.yaml"])
    (chart_ext,) = chart_cfg["extenders"]
    assert chart_ext["enableHTTPS"] is True and chart_ext["urlPrefix"].startswith("https://")
    cluster.reset()
    _bare_node(cluster, "agent-node-a")
    _bare_node(cluster, "agent-node-b")
    _agent(cluster, "agent-node-a")
    _agent(cluster, "agent-node-b")
    # As installed: the extender authenticates as the chart's ServiceAccount, so every call it
    # makes (watches, holds, events, the Binding) must be one the chart's RBAC grants.
    ext = Extender(tmp_path, _token_kubeconfig(cluster, _extender_token(cluster),
                                               tmp_path / "extender.kubeconfig"),
                   tls=_extender_tls(cluster, tmp_path)).start()
    # HTTPS only: a plain-HTTP client gets no answer from the scheduling port.
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{ext.port}/healthz", timeout=5)
    try:
        assert ext.url.startswith("https://127.0.0.1:")
        # Only the address changes (the local extender, not the Service); enableHTTPS and the
        # chart's CA (tlsConfig.caData) are the chart's own.
        extenders = [dict(e, urlPrefix=ext.url) for e in chart_cfg["extenders"]]
        # Everything but the cluster-specific connection comes from the chart's ConfigMap.
        cluster.start_scheduler(ext.url, overrides={"extenders": extenders,
                                                    "profiles": chart_cfg["profiles"]})
        _create(cluster, _pod("placed", GPU_LIMITS))
        node = await e2e_cluster.wait_for_pod_bound(core, "placed", timeout=60)
        assert node in ("agent-node-a", "agent-node-b")
        pod = cluster.request("GET", "/api/v1/namespaces/default/pods/placed")
        uuids = pod["metadata"]["annotations"]["sparse.io/gpu-uuids"].split(",")
        inv = json.loads(cluster.request("GET", f"/api/v1/nodes/{node}")["metadata"]
                         ["annotations"]["sparse.io/gpu-inventory"])
        assert uuids and set(uuids) <= {g["uuid"] for g in inv}
        await e2e_cluster.wait_for_pod_event(
            core, "placed", lambda e: e["reason"] == "Scheduled"
            and e["source"] == "sparse-scheduler")
        log = ext.log_path.read_text().lower()
        assert "forbidden" not in log and "http 403" not in log, ext.tail()
    finally:
        cluster.stop_scheduler()
        ext.stop()
        _delete_pod(cluster, "placed")
        cluster.delete_node("agent-node-a")
        cluster.delete_node("agent-node-b")


# ------------------------------------------------------------------------------ agent node policy


def _as(cluster, token: str, method: str, path: str, body: Any = None,
        content_type: str = "application/merge-patch+json") -> tuple[int, dict[str, Any]]:
    """One API call with another bearer token: (status, decoded body)."""
    import urllib.error

    req = urllib.request.Request(f"{cluster.server}{path}", method=method,
                                 data=None if body is None else json.dumps(body).encode())
    req.add_header("Authorization", f"Bearer {token}")
    req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, context=cluster._ssl, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def _sa_token(cluster, account: str, pod: dict[str, Any] | None = None) -> str:
    """TokenRequest for one of the chart's ServiceAccounts, bound to ``pod`` when given."""
    spec: dict[str, Any] = {"expirationSeconds": 600}
    if pod is not None:
        spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod",
                                  "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
    review = cluster.request(
        "POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
    return review["status"]["token"]


def _agent_token(cluster, pod: dict[str, Any] | None) -> str:
    return _sa_token(cluster, "sparse-agent", pod)


def _extender_token(cluster) -> str:
    return _sa_token(cluster, "sparse-extender")


def _token_kubeconfig(cluster, token: str, path: Path) -> Path:
    cfg = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    cfg["users"] = [{"name": "admin", "user": {"token": token}}]
    path.write_text(yaml.safe_dump(cfg))
    path.chmod(0o600)
    return path


def test_agent_token_changes_only_its_own_node(cluster, installed, tmp_path) -> None:
    policy = "sparse-agent-own-node"
    assert any(d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"] == policy
               for d in installed)
    for node in ("vap-node-a", "vap-node-b"):
        cluster.delete_node(node)
        _bare_node(cluster, node)
    pod_path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    cluster.request("DELETE", f"{pod_path}/agent-on-a", {"gracePeriodSeconds": 0},
                    expect=(200, 202, 404))
    # The agent DaemonSet's pod on node A (nothing runs it; its token is what matters).
    pod = cluster.request("POST", pod_path, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "agent-on-a"},
        "spec": {"serviceAccountName": "sparse-agent", "nodeName": "vap-node-a",
                 "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "agent", "image": "registry.invalid/agent:1"}]}})
    try:
        token = _agent_token(cluster, pod)
        # The API server turned the pod's spec.nodeName into the token's node-name claim.
        status, review = _as(cluster, token, "POST",
                             "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                             {"apiVersion": "authentication.k8s.io/v1",
                              "kind": "SelfSubjectReview"}, content_type="application/json")
        assert status == 201, review
        user = review["status"]["userInfo"]
        assert user["username"] == f"system:serviceaccount:{NAMESPACE}:sparse-agent"
        assert user["extra"]["authentication.kubernetes.io/node-name"] == ["vap-node-a"]

        ann = {"metadata": {"annotations": {"sparse.io/gpu-inventory": "[]"}}}
        # Node B with node A's token: refused by the policy (the policy loads asynchronously
        # after install, so allow it a few seconds to become active).
        deadline = time.monotonic() + 30
        while True:
            status, body = _as(cluster, token, "PATCH", "/api/v1/nodes/vap-node-b", ann)
            if status == 403 or time.monotonic() > deadline:
                break
            # not yet active: undo and retry
            cluster.request("PATCH", "/api/v1/nodes/vap-node-b",
                            {"metadata": {"annotations": {"sparse.io/gpu-inventory": None}}},
                            content_type="application/merge-patch+json")
            time.sleep(0.5)
        assert status == 403, body
        assert policy in body["message"] and 'bound to node "vap-node-a"' in body["message"]
        status, body = _as(cluster, token, "PATCH", "/api/v1/nodes/vap-node-b/status",
                           {"status": {"capacity": {"sparse.io/gpu-milli": "8000"}}})
        assert status == 403 and policy in body["message"], body
        b = cluster.request("GET", "/api/v1/nodes/vap-node-b")
        assert "sparse.io/gpu-inventory" not in (b["metadata"].get("annotations") or {})
        assert "sparse.io/gpu-milli" not in b["status"]["capacity"]

        # Node A: the real agent publishes its GPUs with this token (annotation + status).
        _agent(cluster, "vap-node-a",
               kubeconfig=_token_kubeconfig(cluster, token, tmp_path / "agent-a.kubeconfig"))
        a = cluster.request("GET", "/api/v1/nodes/vap-node-a")
        assert "sparse.io/gpu-inventory" in a["metadata"]["annotations"]
        assert "sparse.io/gpu-milli" in a["status"]["capacity"]
        # ... but not labels or other annotations of its own node,
        for patch in ({"metadata": {"labels": {"gpu": "forged"}}},
                      {"metadata": {"annotations": {"other.io/x": "1"}}},
                      {"spec": {"unschedulable": True}}):
            status, body = _as(cluster, token, "PATCH", "/api/v1/nodes/vap-node-a", patch)
            assert status == 403 and policy in body["message"], (patch, body["message"])
        status, body = _as(cluster, token, "PATCH", "/api/v1/nodes/vap-node-a/status",
                           {"status": {"capacity": {"cpu": "1000"}}})
        assert status == 403 and policy in body["message"], body
        # ... and a token of the same ServiceAccount without a pod (no node claim) gets nothing.
        status, body = _as(cluster, _agent_token(cluster, None), "PATCH",
                           "/api/v1/nodes/vap-node-a", ann)
        assert status == 403 and policy in body["message"], body
    finally:
        cluster.request("DELETE", f"{pod_path}/agent-on-a", {"gracePeriodSeconds": 0},
                        expect=(200, 202, 404))
        for node in ("vap-node-a", "vap-node-b"):
            cluster.delete_node(node)


# ------------------------------------------------------------------------------ extender binding


def test_extender_binds_with_only_the_charts_rbac(cluster, installed, tmp_path) -> None:
    """The extender's binder, authenticated as the chart's extender ServiceAccount, binds a pod
    and reads it back on the real API server: the RBAC rules the chart grants are the ones the
    binder's requests need (pods/binding create, pods get)."""
    import asyncio

    from extender.kube.binder import KubeBinder
    from extender.kube.client import make_api_client
    from extender.ledger.rules import Allocation, Reservation
    from extender.protocol import BindingArgs

    kubeconfig = _token_kubeconfig(cluster, _extender_token(cluster),
                                   tmp_path / "extender.kubeconfig")
    cluster.delete_node("bind-node")
    _bare_node(cluster, "bind-node")
    _delete_pod(cluster, "bound-by-extender")
    created = cluster.request("POST", "/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bound-by-extender"},
        "spec": {"schedulerName": "nobody", "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "main", "image": "registry.invalid/train:1"}]}})
    uid = created["metadata"]["uid"]
    reservation = Reservation(uid, "default", "bound-by-extender", "bind-node",
                              (Allocation("GPU-bind-0", "main", 4096, 250),),
                              job_class="deepfm", whole_gpus=())

    async def bind_and_read() -> Any:
        api = await make_api_client(kubeconfig, in_cluster=False)
        try:
            binder = KubeBinder(api)
            await binder.bind(BindingArgs(pod_name="bound-by-extender", pod_namespace="default",
                                          pod_uid=uid, node="bind-node"), reservation)
            return await binder.fetch_pod("default", "bound-by-extender")
        finally:
            await api.close()

    try:
        pod = asyncio.run(bind_and_read())
        assert pod is not None
        stored = cluster.request("GET", "/api/v1/namespaces/default/pods/bound-by-extender")
        assert stored["spec"]["nodeName"] == "bind-node"
        assert "GPU-bind-0" in stored["metadata"]["annotations"]["sparse.io/gpu-uuids"]
    finally:
        _delete_pod(cluster, "bound-by-extender")
        cluster.delete_node("bind-node")
