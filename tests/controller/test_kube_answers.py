"""A refused API call reads as a refusal, not as the object asked for: the controller's and the
extender's raw-response calls (decoded with msgspec / json, so the generated client does not
check the status) raise as preloaded calls do. A real aiohttp server stands in for the API
server."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from controller.errors import PodCreateError
from controller.kube import Kube
from extender.kube.watching import Watcher


class FakeApiServer:
    """Answers every request with ``answer`` (status, JSON body) and records the paths."""

    def __init__(self) -> None:
        self.answer: tuple[int, dict[str, Any]] = (200, {})
        self.paths: list[tuple[str, str]] = []
        self.app = web.Application()
        self.app.router.add_route("*", "/{tail:.*}", self.any)

    async def any(self, request: web.Request) -> web.Response:
        self.paths.append((request.method, request.path))
        status, body = self.answer
        return web.json_response(body, status=status)


def refused(status: int, message: str) -> tuple[int, dict[str, Any]]:
    return status, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "message": message, "code": status}


@pytest.fixture
async def api():
    fake = FakeApiServer()
    server = TestServer(fake.app, host="127.0.0.1")
    await server.start_server()
    api_client = client.ApiClient(client.Configuration(host=str(server.make_url("")).rstrip("/")))
    try:
        yield fake, api_client
    finally:
        await api_client.close()
        await server.close()


WORKER = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "job-w0", "namespace": "ml"},
          "spec": {"containers": [{"name": "main", "image": "train:1"}]}}


async def test_a_refused_worker_pod_is_an_error_with_the_api_servers_message(api) -> None:
    fake, api_client = api
    kube = Kube(api_client)
    fake.answer = refused(403, 'pods "job-w0" is forbidden: exceeded quota: gpu-quota')
    with pytest.raises(PodCreateError, match="exceeded quota"):
        await kube.create_pod(WORKER)
    fake.answer = refused(409, 'pods "job-w0" already exists')
    assert await kube.create_pod(WORKER) is False
    fake.answer = (201, WORKER)
    assert await kube.create_pod(WORKER) is True
    fake.answer = refused(500, "etcd timeout")
    with pytest.raises(ApiException) as err:
        await kube.create_pod(WORKER)
    assert err.value.status == 500


async def test_a_missing_job_is_none_not_a_status_object(api) -> None:
    fake, api_client = api
    kube = Kube(api_client)
    fake.answer = refused(404, "not found")
    assert await kube.get_job("ml", "gone") is None
    fake.answer = refused(403, "forbidden")
    with pytest.raises(ApiException):
        await kube.get_job("ml", "hidden")
    fake.answer = refused(403, "forbidden")
    with pytest.raises(ApiException):
        await kube.list_pods("ml", "uid-1")
    # Gone meanwhile is fine for a delete or a status patch; a refusal is not.
    fake.answer = refused(404, "not found")
    await kube.delete_pod("ml", "job-w0")
    await kube.patch_status("ml", "job", {"phase": "Running"})
    fake.answer = refused(422, "invalid status")
    with pytest.raises(ApiException):
        await kube.patch_status("ml", "job", {"phase": "Nonsense"})


async def test_a_refused_list_is_not_taken_for_an_empty_one(api) -> None:
    fake, api_client = api
    resynced: list[Any] = []

    async def resync(items: list[Any]) -> None:
        resynced.append(items)

    async def handle(kind: str, obj: Any) -> None:
        raise AssertionError("no event expected")

    watcher = Watcher("pods", client.CoreV1Api(api_client).list_pod_for_all_namespaces,
                      resync, handle)
    fake.answer = refused(403, "pods is forbidden")
    with pytest.raises(ApiException) as err:
        await watcher.relist()
    assert err.value.status == 403 and resynced == []  # the old view is kept, not emptied
    fake.answer = (200, {"kind": "PodList", "metadata": {"resourceVersion": "7"}, "items": []})
    assert await watcher.relist() == "7" and resynced == [[]]
