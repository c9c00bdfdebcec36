"""The Binding goes out as the API server expects it, on the generated client's session and
credentials, and every refusal becomes a BindError (rolled back, retried), a lost answer an
unknown outcome; reading a pod back maps 404 to None. A real aiohttp server stands in for the
API server."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from builders import bind_args, pod
from kubernetes_asyncio import client

from extender.binder import BindError
from extender.kube.assignment import annotations_for, reservation_from_pod
from extender.kube.binder import KubeBinder
from extender.ledger.rules import Allocation, Reservation


class FakeApiServer:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.answer: tuple[int, dict[str, Any] | None] = (201, {"kind": "Status"})
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.app = web.Application()
        self.app.router.add_post("/api/v1/namespaces/{ns}/pods/{name}/binding", self.binding)
        self.app.router.add_get("/api/v1/namespaces/{ns}/pods/{name}", self.read_pod)

    async def binding(self, request: web.Request) -> web.Response:
        self.requests.append(("POST", request.path, dict(request.headers), await request.read()))
        status, body = self.answer
        if status == 0:  # the connection drops before any answer
            assert request.transport is not None
            request.transport.close()
            raise ConnectionResetError
        return web.json_response(body, status=status)

    async def read_pod(self, request: web.Request) -> web.Response:
        self.requests.append(("GET", request.path, dict(request.headers), b""))
        found = self.pods.get((request.match_info["ns"], request.match_info["name"]))
        if found is None:
            return web.json_response({"kind": "Status", "message": "not found"}, status=404)
        if found.get("kind") == "Status":
            return web.json_response(found, status=403)
        return web.json_response(found)


@pytest.fixture
async def api():
    fake = FakeApiServer()
    server = TestServer(fake.app, host="127.0.0.1")
    await server.start_server()
    configuration = client.Configuration(host=str(server.make_url("")).rstrip("/"))
    configuration.api_key = {"BearerToken": "s3cret"}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    api_client = client.ApiClient(configuration)
    try:
        yield fake, KubeBinder(api_client)
    finally:
        await api_client.close()
        await server.close()


def booking(p: dict[str, Any], node: str) -> Reservation:
    uid = p["metadata"]["uid"]
    return Reservation(uid, "ml", p["metadata"]["name"], node,
                       (Allocation("GPU-a", "main", 4096, 250),), job_class="deepfm",
                       whole_gpus=())


async def test_the_binding_names_pod_uid_node_and_carries_the_annotations(api) -> None:
    fake, binder = api
    p = pod()
    reservation = booking(p, "n1")
    await binder.bind(bind_args(p, "n1"), reservation)
    [(method, path, headers, raw)] = fake.requests
    # The pod's binding subresource: what the chart's RBAC grants (create pods/binding).
    assert (method, path) == ("POST", f"/api/v1/namespaces/ml/pods/{p['metadata']['name']}/binding")
    assert headers["Authorization"] == "Bearer s3cret"
    assert headers["Content-Type"] == "application/json"
    body = json.loads(raw)
    assert body["apiVersion"] == "v1" and body["kind"] == "Binding"
    assert body["target"] == {"apiVersion": "v1", "kind": "Node", "name": "n1"}
    meta = body["metadata"]
    assert (meta["name"], meta["namespace"], meta["uid"]) == (
        p["metadata"]["name"], "ml", p["metadata"]["uid"])
    assert meta["annotations"] == annotations_for(reservation)
    # The pod as the API server writes it reads back as the same booking.
    bound = {"metadata": {"annotations": meta["annotations"], "uid": meta["uid"],
                          "name": meta["name"], "namespace": "ml"},
             "spec": {"nodeName": "n1"}}
    back = reservation_from_pod(bound)
    assert back is not None and back.node == "n1" and back.gpus == ("GPU-a",)


@pytest.mark.parametrize("status,message", [
    (409, 'Operation cannot be fulfilled on pods/binding "x": pod x is already assigned'),
    (404, 'pods "x" not found'),
    (500, "etcdserver: request timed out"),
    (403, "forbidden"),
])
async def test_every_refusal_is_a_bind_error_with_the_api_servers_message(
        api, status: int, message: str) -> None:
    fake, binder = api
    fake.answer = (status, {"kind": "Status", "message": message})
    p = pod()
    with pytest.raises(BindError) as caught:
        await binder.bind(bind_args(p, "n1"), booking(p, "n1"))
    assert f"HTTP {status}" in str(caught.value) and message in str(caught.value)


async def test_a_refusal_without_a_status_body_still_says_its_status(api) -> None:
    fake, binder = api
    fake.answer = (503, None)
    p = pod()
    with pytest.raises(BindError, match="HTTP 503"):
        await binder.bind(bind_args(p, "n1"), booking(p, "n1"))


async def test_a_lost_answer_is_not_a_refusal(api) -> None:
    """The Binding may exist: not a BindError (which would roll the booking back)."""
    fake, binder = api
    fake.answer = (0, None)
    p = pod()
    with pytest.raises(aiohttp.ClientError):
        await binder.bind(bind_args(p, "n1"), booking(p, "n1"))


async def test_reading_a_pod_back(api) -> None:
    fake, binder = api
    p = pod(name="reader", mem=4096, milli=250)
    fake.pods[("ml", "reader")] = p
    read = await binder.fetch_pod("ml", "reader")
    assert read is not None and read.metadata.uid == p["metadata"]["uid"]
    assert await binder.fetch_pod("ml", "gone") is None
    fake.pods[("ml", "secret")] = {"kind": "Status", "message": "forbidden"}
    with pytest.raises(LookupError, match="HTTP 403"):
        await binder.fetch_pod("ml", "secret")
    assert all(h["Authorization"] == "Bearer s3cret" for _, _, h, _ in fake.requests)
