"""What the chart renders (``helm template``; fast, no cluster).

Needs the Helm binary from hack/build-helm.sh (skipped without it unless SPARSE_E2E_REQUIRE=1).
The docs check (values.schema.json and README.md generated from values.yaml) needs no Helm.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from tooling import helm_path, versions

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "sparse"
NS = "sparse-system"


def test_chart_docs_are_up_to_date() -> None:
    res = subprocess.run([sys.executable, str(ROOT / "hack" / "chart_docs.py"), "--check"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr


def _helm() -> Path:
    path = helm_path()
    if not os.access(path, os.X_OK):
        if os.environ.get("SPARSE_E2E_REQUIRE", "") not in ("", "0"):
            pytest.fail("helm not built: run hack/build-helm.sh")
        pytest.skip("helm not built (hack/build-helm.sh)")
    return path


@functools.cache
def _render(*sets: str) -> tuple[int, str, str]:
    args = [str(helm_path()), "template", "sparse", str(CHART), "--namespace", NS,
            "--kube-version", versions()["K8S_VERSION"]]
    for s in sets:
        args += ["--set", s]
    res = subprocess.run(args, capture_output=True, text=True, timeout=60)
    return res.returncode, res.stdout, res.stderr


def render(*sets: str) -> list[dict[str, Any]]:
    _helm()
    rc, out, err = _render(*sets)
    assert rc == 0, err
    return [d for d in yaml.safe_load_all(out) if d]


def render_error(*sets: str) -> str:
    _helm()
    rc, _, err = _render(*sets)
    assert rc != 0
    return err


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    hits = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(hits) == 1, f"{kind}/{name}: {len(hits)} found"
    return hits[0]


def pod_spec(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return find(docs, kind, name)["spec"]["template"]["spec"]


def container(docs: list[dict[str, Any]], kind: str, name: str, index: int = 0) -> dict:
    return pod_spec(docs, kind, name)["containers"][index]


def scheduler_config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    cm = find(docs, "ConfigMap", "sparse-scheduler-config")
    return yaml.safe_load(cm["data"]["scheduler-config.yaml"])


# ------------------------------------------------------------------------------ lint and schema


@pytest.mark.parametrize("sets", [
    "",
    "redis.sentinel.enabled=true,certManager.enabled=true,extender.inspect=true",
    "redis.enabled=false,redis.externalUrl=redis://r:6379/0,redis.auth.existingSecret=pw,"
    "extender.tls.enabled=false,scheduler.enabled=false,agent.nodeRestriction=false",
])
def test_helm_lint_strict(sets: str) -> None:
    helm = _helm()
    args = [str(helm), "lint", "--strict", str(CHART)] + (["--set", sets] if sets else [])
    res = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "[WARNING]" not in res.stdout and "[ERROR]" not in res.stdout


def test_schema_rejects_typos_and_bad_values() -> None:
    assert "additional properties 'replica' not allowed" in render_error("extender.replica=3")
    assert "failurePolicy" in render_error("webhook.failurePolicy=Sometimes")
    assert "replicas" in render_error("redis.sentinel.replicas=2")
    assert "/extender/port" in render_error("extender.port=notaport")


# ------------------------------------------------------------------------------ standard knobs


def test_names_labels_annotations_and_service_accounts() -> None:
    docs = render("fullnameOverride=gpu", "podLabels.team=ml", "podAnnotations.a=b",
                  "extender.podLabels.tier=core", "extender.podAnnotations.c=d",
                  "extender.serviceAccount.annotations.iam=role",
                  "predictor.serviceAccount.create=false", "predictor.serviceAccount.name=mine")
    meta = find(docs, "Deployment", "gpu-extender")["spec"]["template"]["metadata"]
    assert meta["labels"]["team"] == "ml" and meta["labels"]["tier"] == "core"
    assert meta["annotations"]["a"] == "b" and meta["annotations"]["c"] == "d"
    assert "checksum/tls" in meta["annotations"]
    # global pod labels reach every pod, but never change selectors
    for kind, name in [("Deployment", "gpu-scheduler"), ("DaemonSet", "gpu-agent"),
                       ("StatefulSet", "gpu-redis"), ("Deployment", "gpu-webhook")]:
        obj = find(docs, kind, name)
        assert obj["spec"]["template"]["metadata"]["labels"]["team"] == "ml"
        assert "team" not in obj["spec"]["selector"]["matchLabels"]
    sa = find(docs, "ServiceAccount", "gpu-extender")
    assert sa["metadata"]["annotations"] == {"iam": "role"}
    assert not [d for d in docs if d["kind"] == "ServiceAccount" and "predictor" in
                d["metadata"]["name"]]
    assert pod_spec(docs, "Deployment", "gpu-predictor")["serviceAccountName"] == "mine"
    crb = find(docs, "ClusterRoleBinding", "gpu-predictor")
    assert crb["subjects"][0]["name"] == "mine"
    docs = render("nameOverride=gpushare")
    assert find(docs, "Deployment", "sparse-gpushare-extender")


def test_images_default_to_app_version_and_follow_a_private_registry() -> None:
    app = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    docs = render()
    images = {c["image"] for d in docs if d["kind"] in ("Deployment", "DaemonSet", "StatefulSet")
              for c in d["spec"]["template"]["spec"]["containers"]}
    for name in ("extender", "predictor", "agent"):
        assert f"ghcr.io/sparse-gpu/sparse-{name}:{app}" in images
    docs = render("global.imageRegistry=registry.example.com/mirror/")
    images = {c["image"] for d in docs if d["kind"] in ("Deployment", "DaemonSet", "StatefulSet")
              for c in d["spec"]["template"]["spec"]["containers"]}
    assert images == {
        f"registry.example.com/mirror/sparse-gpu/sparse-{n}:{app}"
        for n in ("extender", "predictor", "agent")} | {
        "registry.example.com/mirror/library/redis:7.4.2-alpine",
        "registry.example.com/mirror/kube-scheduler:v" + versions()["K8S_VERSION"].lstrip("v")}
    docs = render("extender.image.digest=sha256:" + "a" * 64)
    assert container(docs, "Deployment", "sparse-extender")["image"].endswith("@sha256:" + "a" * 64)


def test_placement_knobs() -> None:
    docs = render("extender.topologySpreadConstraints[0].maxSkew=1",
                  "extender.topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
                  "extender.topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
                  "agent.priorityClassName=gpu-critical", "redis.nodeSelector.disk=ssd",
                  "redis.tolerations[0].operator=Exists",
                  "redis.resources.limits.memory=2Gi", "extender.priorityClassName=high")
    ext = pod_spec(docs, "Deployment", "sparse-extender")
    (tsc,) = ext["topologySpreadConstraints"]
    assert tsc["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "extender"
    assert ext["priorityClassName"] == "high"
    assert pod_spec(docs, "DaemonSet", "sparse-agent")["priorityClassName"] == "gpu-critical"
    redis = pod_spec(docs, "StatefulSet", "sparse-redis")
    assert redis["nodeSelector"] == {"disk": "ssd"}
    assert redis["tolerations"] == [{"operator": "Exists"}]
    assert redis["containers"][0]["resources"]["limits"]["memory"] == "2Gi"
    default = render()
    assert pod_spec(default, "DaemonSet", "sparse-agent")["priorityClassName"] == \
        "system-node-critical"
    assert "priorityClassName" not in pod_spec(default, "Deployment", "sparse-extender")


# ------------------------------------------------------------------------------ locked down


def _handshake(data: dict[str, str], tmp_path: Path, host: str) -> None:
    for key in ("ca.crt", "tls.crt", "tls.key"):
        (tmp_path / key).write_bytes(base64.b64decode(data[key]))
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client_ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    bios = [ssl.MemoryBIO() for _ in range(4)]
    client = client_ctx.wrap_bio(bios[0], bios[1], server_hostname=host)
    server = server_ctx.wrap_bio(bios[2], bios[3], server_side=True)
    done = {"client": False, "server": False}
    for _ in range(10):
        for name, end in (("client", client), ("server", server)):
            if not done[name]:
                try:
                    end.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        bios[2].write(bios[1].read())  # client -> server
        bios[0].write(bios[3].read())  # server -> client
        if all(done.values()):
            return
    raise AssertionError("TLS handshake did not complete")


def test_scheduler_talks_https_to_the_extender_with_the_generated_ca(tmp_path: Path) -> None:
    docs = render()
    secret = find(docs, "Secret", "sparse-extender-tls")
    (ext,) = scheduler_config(docs)["extenders"]
    assert ext["enableHTTPS"] is True
    assert ext["urlPrefix"] == "https://sparse-extender.sparse-system.svc:8888/scheduler"
    assert ext["tlsConfig"] == {"caData": secret["data"]["ca.crt"]}  # one CA per render
    # A TLS handshake (in memory) as the scheduler makes it: chain and host name check out.
    _handshake(secret["data"], tmp_path, "sparse-extender.sparse-system.svc")
    c = container(docs, "Deployment", "sparse-extender")
    assert {"--tls-cert=/tls/tls.crt", "--tls-key=/tls/tls.key"} <= set(c["args"])
    assert c["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert pod_spec(docs, "Deployment", "sparse-extender")["volumes"][1]["secret"] == {
        "secretName": "sparse-extender-tls"}


def test_extender_tls_from_an_existing_secret_or_cert_manager() -> None:
    for sets, secret in [(("extender.tls.existingSecret=mine",), "mine"),
                         (("certManager.enabled=true",), "sparse-extender-tls")]:
        docs = render(*sets)
        assert not [d for d in docs if d["kind"] == "Secret" and "extender" in
                    d["metadata"]["name"]]
        (ext,) = scheduler_config(docs)["extenders"]
        assert ext["tlsConfig"] == {"caFile": "/etc/sparse/extender-ca/ca.crt"}
        vol = next(v for v in pod_spec(docs, "Deployment", "sparse-scheduler")["volumes"]
                   if v["name"] == "extender-ca")
        # the scheduler gets the CA certificate only, never the extender's key
        assert vol["secret"] == {"secretName": secret, "items": [{"key": "ca.crt",
                                                                  "path": "ca.crt"}]}
    # renewed certificates are read at start-up: restart on renewal (Reloader's annotation)
    for name in ("sparse-extender", "sparse-scheduler"):
        assert find(docs, "Deployment", name)["metadata"]["annotations"] == {
            "secret.reloader.stakater.com/reload": "sparse-extender-tls"}
    certs = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Certificate"}
    assert certs["sparse-extender"]["spec"]["secretName"] == "sparse-extender-tls"
    assert certs["sparse-webhook"]["spec"]["secretName"] == "sparse-webhook-tls"
    assert certs["sparse-ca"]["spec"]["isCA"] is True
    mwc = find(docs, "MutatingWebhookConfiguration", "sparse-webhook")
    assert mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
        "sparse-system/sparse-webhook"
    assert not [d for d in docs if d["kind"] == "Secret" and "webhook" in d["metadata"]["name"]]
    docs = render("certManager.enabled=true", "certManager.issuerRef.kind=ClusterIssuer",
                  "certManager.issuerRef.name=corp-ca")
    assert not [d for d in docs if d["kind"] == "Issuer"]
    assert find(docs, "Certificate", "sparse-extender")["spec"]["issuerRef"] == {
        "kind": "ClusterIssuer", "name": "corp-ca"}


def test_plain_http_only_when_asked() -> None:
    docs = render("extender.tls.enabled=false")
    (ext,) = scheduler_config(docs)["extenders"]
    assert ext["enableHTTPS"] is False and "tlsConfig" not in ext
    assert ext["urlPrefix"].startswith("http://")
    assert not any(a.startswith("--tls") for a in
                   container(docs, "Deployment", "sparse-extender")["args"])


def test_filter_best_drops_prioritize_and_tells_the_extender_its_tolerance() -> None:
    (ext,) = scheduler_config(render())["extenders"]
    assert ext["prioritizeVerb"] == "prioritize"
    assert not any(a.startswith("--filter-best") for a in
                   container(render(), "Deployment", "sparse-extender")["args"])
    docs = render("extender.filterBest.enabled=true")
    (ext,) = scheduler_config(docs)["extenders"]
    assert "prioritizeVerb" not in ext
    assert {ext["filterVerb"], ext["bindVerb"], ext["preemptVerb"]} == {
        "filter", "bind", "preempt"}
    assert "--filter-best-within=0" in container(docs, "Deployment", "sparse-extender")["args"]
    assert "--filter-best-single" not in container(docs, "Deployment", "sparse-extender")["args"]
    one = render("extender.filterBest.enabled=true", "extender.filterBest.single=true")
    assert "prioritizeVerb" not in scheduler_config(one)["extenders"][0]
    assert "--filter-best-single" in container(one, "Deployment", "sparse-extender")["args"]


def test_the_locality_network_reaches_the_extender_as_a_file_it_reads() -> None:
    from extender.placement.step_time import NetworkModel

    default = render()
    assert not any(a.startswith("--locality-network") for a in
                   container(default, "Deployment", "sparse-extender")["args"])
    assert not [d for d in default if d["kind"] == "ConfigMap"
                and d["metadata"]["name"] == "sparse-extender-locality"]
    docs = render("extender.locality.network.store.gbps=40",
                  "extender.locality.network.rack.gbps=25",
                  "extender.locality.network.rack.latency_ms=0.1")
    c = container(docs, "Deployment", "sparse-extender")
    assert "--locality-network=/etc/sparse/locality/network.yaml" in c["args"]
    assert {"name": "locality", "mountPath": "/etc/sparse/locality", "readOnly": True} in \
        c["volumeMounts"]
    spec = pod_spec(docs, "Deployment", "sparse-extender")
    assert {"name": "locality", "configMap": {"name": "sparse-extender-locality"}} in \
        spec["volumes"]
    dep = find(docs, "Deployment", "sparse-extender")
    assert "checksum/locality" in dep["spec"]["template"]["metadata"]["annotations"]
    text = find(docs, "ConfigMap", "sparse-extender-locality")["data"]["network.yaml"]
    raw = yaml.safe_load(text)
    net = NetworkModel.from_dict(raw.get("network", raw))  # as `serve` reads the file
    assert net.store_gbps == 40.0 and net.rack.gbps == 25.0 and net.zone == NetworkModel().zone


def test_the_locality_wait_reaches_the_extender_and_its_cli_reads_it() -> None:
    from click.testing import CliRunner

    from extender.cli import main

    assert not any(a.startswith("--locality-max-wait") for a in
                   container(render(), "Deployment", "sparse-extender")["args"])
    args = container(render("extender.locality.maxWaitSeconds=300"), "Deployment",
                     "sparse-extender")["args"]
    assert "--locality-max-wait=300" in args
    out = CliRunner().invoke(main, ["serve", "--locality-max-wait=-1"])
    assert out.exit_code == 2 and "--locality-max-wait" in out.output


def test_network_policy_admits_only_the_scheduler_to_the_scheduling_port() -> None:
    docs = render()
    np = find(docs, "NetworkPolicy", "sparse-extender")
    sched, metrics = np["spec"]["ingress"]
    assert sched["ports"] == [{"port": 8888, "protocol": "TCP"}]
    assert sched["from"] == [{"podSelector": {"matchLabels": {
        "app.kubernetes.io/name": "sparse", "app.kubernetes.io/instance": "sparse",
        "app.kubernetes.io/component": "scheduler"}}}]
    assert metrics == {"ports": [{"port": 9090, "protocol": "TCP"}]}
    args = container(docs, "Deployment", "sparse-extender")["args"]
    assert "--metrics-port=9090" in args and "--no-inspect" in args
    svc = find(docs, "Service", "sparse-extender")
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == {"http": 8888, "metrics": 9090}
    docs = render("extender.inspect=true", "metrics.serviceMonitor.enabled=true")
    assert "--no-inspect" not in container(docs, "Deployment", "sparse-extender")["args"]
    assert find(docs, "ServiceMonitor", "sparse-extender")["spec"]["endpoints"][0]["port"] == \
        "metrics"
    # own scheduler: extra peers, and without the chart's scheduler no pod is admitted by default
    docs = render("scheduler.enabled=false",
                  "extender.networkPolicy.extraSchedulerPeers[0].namespaceSelector.matchLabels"
                  ".kubernetes\\.io/metadata\\.name=kube-system")
    (sched, _) = find(docs, "NetworkPolicy", "sparse-extender")["spec"]["ingress"]
    assert sched["from"] == [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "kube-system"}}}]


def test_redis_requires_a_password_from_a_secret() -> None:
    docs = render()
    secret = find(docs, "Secret", "sparse-redis-auth")
    password = base64.b64decode(secret["data"]["redis-password"]).decode()
    assert len(password) == 32 and password.isalnum()
    redis = container(docs, "StatefulSet", "sparse-redis")
    args = redis["args"]
    assert args[args.index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
    assert args[args.index("--protected-mode") + 1] == "yes"
    ref = {"secretKeyRef": {"name": "sparse-redis-auth", "key": "redis-password"}}
    assert {e["name"]: e.get("valueFrom") for e in redis["env"]} == {
        "REDIS_PASSWORD": ref, "REDISCLI_AUTH": ref}
    for name in ("sparse-extender", "sparse-predictor"):
        env = container(docs, "Deployment", name)["env"]
        assert {"name": "SPARSE_REDIS_PASSWORD", "valueFrom": ref} in env
    # the password never appears in an argument, only the kubelet's $(VAR) reference
    ext_args = container(docs, "Deployment", "sparse-extender")["args"]
    assert "--store=redis://sparse-redis.sparse-system.svc:6379/0" in ext_args
    assert "--redis=redis://:$(SPARSE_REDIS_PASSWORD)@sparse-redis.sparse-system.svc:6379/0" in \
        container(docs, "Deployment", "sparse-predictor")["args"]
    assert password not in json.dumps([d for d in docs if d["kind"] != "Secret"])
    docs = render("redis.auth.existingSecret=corp", "redis.auth.existingSecretKey=pw")
    assert not [d for d in docs if d["kind"] == "Secret" and "redis" in d["metadata"]["name"]]
    env = container(docs, "Deployment", "sparse-extender")["env"]
    assert env == [{"name": "SPARSE_REDIS_PASSWORD",
                    "valueFrom": {"secretKeyRef": {"name": "corp", "key": "pw"}}}]


def test_rbac_grants_only_what_the_code_calls() -> None:
    docs = render()
    rules = {d["metadata"]["name"]: [(tuple(r["resources"]), tuple(r["verbs"]))
                                     for r in d["rules"]]
             for d in docs if d["kind"] == "ClusterRole"}
    assert rules["sparse-extender"] == [
        (("nodes",), ("list", "watch")), (("pods",), ("get", "list", "watch")),
        (("pods/binding",), ("create",)), (("events",), ("create",))]
    assert rules["sparse-agent"] == [(("nodes",), ("get", "patch")),
                                     (("nodes/status",), ("patch",))]
    assert rules["sparse-predictor"] == [(("pods",), ("list", "watch")),
                                         (("events",), ("create",))]
    # the webhook and Redis never call the API server
    for kind, name in [("Deployment", "sparse-webhook"), ("StatefulSet", "sparse-redis")]:
        assert pod_spec(docs, kind, name)["automountServiceAccountToken"] is False


def test_agent_node_policy_binds_to_the_agents_token_node_claim() -> None:
    docs = render()
    vap = find(docs, "ValidatingAdmissionPolicy", "sparse-agent-own-node")
    (cond,) = vap["spec"]["matchConditions"]
    assert cond["expression"].strip() == (
        'request.userInfo.username == "system:serviceaccount:sparse-system:sparse-agent"')
    text = json.dumps(vap["spec"])
    assert "authentication.kubernetes.io/node-name" in text and "request.name" in text
    assert vap["spec"]["failurePolicy"] == "Fail"
    assert set(vap["spec"]["matchConstraints"]["resourceRules"][0]["resources"]) == {
        "nodes", "nodes/status"}
    binding = find(docs, "ValidatingAdmissionPolicyBinding", "sparse-agent-own-node")
    assert binding["spec"] == {"policyName": "sparse-agent-own-node",
                               "validationActions": ["Deny"]}
    assert "nvidia.com/gpu" not in text
    assert "nvidia.com/gpu" in json.dumps(
        find(render("agent.advertiseWholeGpus=true"), "ValidatingAdmissionPolicy",
             "sparse-agent-own-node")["spec"])
    assert not [d for d in render("agent.nodeRestriction=false")
                if d["kind"].startswith("ValidatingAdmissionPolicy")]


# ------------------------------------------------------------------------------ Redis Sentinel


def test_sentinel_mode() -> None:
    docs = render("redis.sentinel.enabled=true")
    sts = find(docs, "StatefulSet", "sparse-redis-ha")
    assert sts["spec"]["replicas"] == 3
    assert sts["spec"]["serviceName"] == "sparse-redis-headless"
    redis, sentinel = sts["spec"]["template"]["spec"]["containers"]
    assert redis["command"] == ["sh", "/scripts/redis.sh"]
    assert sentinel["command"] == ["sh", "/scripts/sentinel.sh"]
    assert sentinel["ports"] == [{"name": "sentinel", "containerPort": 26379}]
    headless = find(docs, "Service", "sparse-redis-headless")
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert find(docs, "Service", "sparse-redis-sentinel")["spec"]["ports"][0]["port"] == 26379
    assert "--store=sentinel://sparse-redis-sentinel.sparse-system.svc:26379/sparse" in \
        container(docs, "Deployment", "sparse-extender")["args"]
    scripts = find(docs, "ConfigMap", "sparse-redis-scripts")["data"]
    assert 'echo "requirepass $REDIS_PASSWORD"' in scripts["sentinel.sh"]
    assert "--masterauth" in scripts["redis.sh"]
    # Redis pods reach each other (replication, gossip); spread over nodes by default
    np = find(docs, "NetworkPolicy", "sparse-redis")["spec"]["ingress"][0]
    assert "redis" in np["from"][0]["podSelector"]["matchExpressions"][1]["values"]
    assert {"port": 26379, "protocol": "TCP"} in np["ports"]
    assert "podAntiAffinity" in sts["spec"]["template"]["spec"]["affinity"]


@pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-cli not installed")
def test_sentinel_scripts_parse_and_first_start_picks_pod_zero(tmp_path: Path) -> None:
    scripts = find(render("redis.sentinel.enabled=true"), "ConfigMap",
                   "sparse-redis-scripts")["data"]
    for name, text in scripts.items():
        (tmp_path / name).write_text(text)
        res = subprocess.run(["sh", "-n", str(tmp_path / name)], capture_output=True, text=True)
        assert res.returncode == 0, f"{name}: {res.stderr}"
    # No sentinel answers (first start): pod 0 is the primary, as seen from pod 1.
    env = {"PATH": os.environ["PATH"], "HOSTNAME": "r-1", "HEADLESS": "h", "NAMESPACE": "n.invalid",
           "STATEFULSET": "r", "REPLICAS": "3", "MASTER_NAME": "m"}
    res = subprocess.run(["sh", "-c", f". {tmp_path / 'discover.sh'}; echo $PRIMARY $KNOWN"],
                         capture_output=True, text=True, env=env, timeout=30)
    assert res.stdout.split() == ["r-0.h.n.invalid.svc", "0"], res.stderr


CALL = re.compile(r"\.(list|read|patch|create|delete|replace)_"
                  r"(namespaced_[a-z_]+|node(?:_status)?|pod_for_all_namespaces|"
                  r"event_for_all_namespaces)\b")
RESOURCE = {"namespaced_pod": "pods", "pod_for_all_namespaces": "pods", "node": "nodes",
            "node_status": "nodes/status", "namespaced_binding": "pods/binding",
            "namespaced_pod_binding": "pods/binding", "namespaced_event": "events",
            "event_for_all_namespaces": "events", "namespaced_pod_status": "pods/status"}
VERBS = {"list": {"list", "watch"}, "read": {"get"}, "patch": {"patch"},
         "create": {"create"}, "delete": {"delete"}, "replace": {"update"}}


# Calls made as raw requests on the client's session (the binder's hot path): the URL's shape.
RAW_CALLS = {re.compile(r'/pods/"\s*f"\{[^}]+\}/binding"'): ("pods/binding", "create"),
             re.compile(r'_session\.get\(url'): ("pods", "get")}


def _api_calls(package: str) -> set[tuple[str, str]]:
    """(resource, verb) of every CoreV1Api call in a package (list_* are watched, too)."""
    found: set[tuple[str, str]] = set()
    for path in (ROOT / package).rglob("*.py"):
        text = path.read_text()
        found |= {call for pattern, call in RAW_CALLS.items() if pattern.search(text)}
        for verb, noun in CALL.findall(text):
            assert noun in RESOURCE, f"{path}: unknown API call {verb}_{noun}: map it here " \
                                     "and grant it in charts/sparse/templates/rbac.yaml"
            found |= {(RESOURCE[noun], v) for v in VERBS[verb]}
    return found


def test_rbac_matches_the_api_calls_in_the_code() -> None:
    """A new API call without its RBAC rule (or a rule nothing uses) fails here."""
    docs = render()
    for component in ("extender", "agent", "predictor"):
        role = find(docs, "ClusterRole", f"sparse-{component}")
        granted = {(res, verb) for r in role["rules"] for res in r["resources"]
                   for verb in r["verbs"]}
        assert granted == _api_calls(component), component
    assert _api_calls("webhook") == set()


@pytest.mark.parametrize("order", ["longest-first", "shortest-first", "critical-first"])
def test_queue_band_priority_classes_follow_the_controllers_rule(order: str) -> None:
    from extender.queueorder import DurationBands

    docs = render(f"controller.queueOrder={order}")
    classes = {d["metadata"]["name"]: d for d in docs if d["kind"] == "PriorityClass"}
    ctl = next(d for d in docs if d["kind"] == "Deployment"
               and d["metadata"]["name"] == "sparse-controller")
    args = ctl["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--queue-order={order}" in args and "--priority-class-prefix=sparse-duration" in args
    bands = DurationBands.log_spaced(60, 14_400, 4, order=order)
    assert {n: (c["value"], c["preemptionPolicy"], c["globalDefault"])
            for n, c in classes.items()} == {
        **{bands.class_name(i): (bands.priority(i), "Never", False) for i in range(4)},
        bands.gang_class_name(): (bands.gang_priority(), "Never", False)}
    # critical-first: the chart's criticalBands (default 2) is the controller's own rule
    assert ("--queue-critical-bands=2" in args) == (order == "critical-first")


def test_critical_first_with_another_band_count() -> None:
    from extender.queueorder import DurationBands

    docs = render("controller.queueOrder=critical-first", "controller.queueBands.count=8",
                  "controller.queueBands.criticalBands=3")
    values = {d["metadata"]["name"]: d["value"] for d in docs if d["kind"] == "PriorityClass"}
    bands = DurationBands.log_spaced(60, 14_400, 8, order="critical-first")
    assert bands.critical_count == 3  # the value the chart's comment gives for 8 bands
    assert values == {**{bands.class_name(i): bands.priority(i) for i in range(8)},
                      bands.gang_class_name(): bands.gang_priority()}
    rc, _, err = _render("controller.queueOrder=critical-first",
                         "controller.queueBands.criticalBands=5")
    assert rc != 0 and "criticalBands must not exceed" in err


def test_queue_order_schema_is_the_controllers_choice() -> None:
    """The chart's schema accepts exactly the orders the controller accepts (plus off)."""
    import click

    from controller.cli import main

    schema = json.loads((CHART / "values.schema.json").read_text())
    enum = schema["properties"]["controller"]["properties"]["queueOrder"]["enum"]
    opt = next(p for p in main.params if p.name == "queue_order")
    assert isinstance(opt.type, click.Choice) and set(enum) == set(opt.type.choices)
    assert "critical-first" in enum
    assert "queueOrder" in render_error("controller.queueOrder=middle-first")


def test_queue_bands_off_or_bad_range() -> None:
    docs = render("controller.queueOrder=off")
    assert not [d for d in docs if d["kind"] == "PriorityClass"]
    _helm()
    rc, _, err = _render("controller.queueBands.maxSeconds=30")
    assert rc != 0 and "maxSeconds must exceed" in err
