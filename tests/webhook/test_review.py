"""AdmissionReview v1 handling (pure) and the aiohttp/TLS layer: good, bad and hostile input."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession, TCPConnector, web
from aiohttp.test_utils import TestClient, TestServer

from webhook.app import make_app, server_ssl_context
from webhook.patch import PatchConfig
from webhook.review import MAX_BODY_BYTES, handle

CFG = PatchConfig()
GPU_POD = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
    "spec": {"schedulerName": "default-scheduler", "containers": [
        {"name": "main", "image": "x",
         "resources": {"limits": {"sparse.io/gpu-milli": "500", "sparse.io/gpu-mem": "4096"}}}]},
}


def review(obj: Any = GPU_POD, **request: Any) -> dict[str, Any]:
    req = {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
           "resource": {"group": "", "version": "v1", "resource": "pods"},
           "operation": "CREATE", "namespace": "default", "object": obj}
    req.update(request)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def call(doc: Any) -> tuple[int, dict[str, Any]]:
    body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return handle(body, CFG)


def test_gpu_pod_is_patched() -> None:
    status, out = call(review())
    assert status == 200
    assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
    resp = out["response"]
    assert resp["uid"] == "u-1" and resp["allowed"] is True and resp["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(resp["patch"]))
    assert {"op": "replace", "path": "/spec/schedulerName", "value": "sparse-scheduler"} in ops


def test_plain_pod_is_allowed_without_patch() -> None:
    pod = {"spec": {"containers": [{"name": "a", "image": "x"}]}}
    status, out = call(review(pod))
    assert status == 200 and out["response"] == {"uid": "u-1", "allowed": True}


@pytest.mark.parametrize("request_patch", [
    {"operation": "UPDATE"},
    {"operation": "DELETE", "object": None},
    {"kind": {"group": "apps", "version": "v1", "kind": "Deployment"}},
    {"subResource": "status"},
])
def test_other_requests_pass_through(request_patch: dict[str, Any]) -> None:
    status, out = call(review(**request_patch))
    assert status == 200 and out["response"] == {"uid": "u-1", "allowed": True}


def test_malformed_pod_is_denied_with_a_reason() -> None:
    status, out = call(review({"spec": {"containers": "nope"}}))
    assert status == 200
    resp = out["response"]
    assert resp["uid"] == "u-1" and resp["allowed"] is False
    assert resp["status"]["code"] == 400 and "spec.containers" in resp["status"]["message"]


@pytest.mark.parametrize("body", [
    b"",
    b"not json",
    b"[]",
    b"null",
    b'"x"',
    json.dumps({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1beta1",
                "request": {"uid": "u"}}).encode(),
    json.dumps({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}).encode(),
    json.dumps({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
                "request": {"uid": 7}}).encode(),
    json.dumps({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
                "request": {"uid": "x" * 1000}}).encode(),
    b"[" * 100_000 + b"]" * 100_000,   # deep nesting
    b"\xff\xfe\x00garbage",
])
def test_bad_bodies_get_an_admission_review_error(body: bytes) -> None:
    status, out = handle(body, CFG)
    assert status == 400
    assert out["kind"] == "AdmissionReview" and out["response"]["allowed"] is False
    assert out["response"]["status"]["message"]


def test_oversized_body() -> None:
    status, out = handle(b" " * (MAX_BODY_BYTES + 1), CFG)
    assert status == 400 and "over" in out["response"]["status"]["message"]


def test_unexpected_errors_become_500_not_crash(monkeypatch) -> None:
    import webhook.review as r

    def boom(*_: Any) -> Any:
        raise KeyError("x")

    monkeypatch.setattr(r, "compute_patch", boom)
    status, out = handle(json.dumps(review()).encode(), CFG)
    assert status == 500 and out["response"]["allowed"] is False


async def test_http_layer() -> None:
    async with TestClient(TestServer(make_app(CFG))) as client:
        resp = await client.post("/mutate", data=json.dumps(review()))
        assert resp.status == 200
        assert (await resp.json())["response"]["patchType"] == "JSONPatch"
        resp = await client.post("/mutate", data=b"{oops")
        assert resp.status == 400
        assert (await resp.json())["response"]["allowed"] is False
        assert (await client.get("/healthz")).status == 200
        assert (await client.get("/mutate")).status == 405


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    cert, key = tmp / "tls.crt", tmp / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


async def test_tls(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    runner = web.AppRunner(make_app(CFG))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ssl_context(cert, key))
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        client_ctx = ssl.create_default_context(cafile=str(cert))
        async with (
            ClientSession(connector=TCPConnector(ssl=client_ctx)) as s,
            s.post(f"https://127.0.0.1:{port}/mutate", data=json.dumps(review())) as resp,
        ):
            assert resp.status == 200
            assert (await resp.json())["response"]["allowed"] is True
    finally:
        await runner.cleanup()
