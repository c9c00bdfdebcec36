"""The throughput bench's null extender: every candidate passes, every score is 0, and bind
creates the Binding through the API server in one call (its errors answered as Error)."""

from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from bench.throughput.null_extender import null_app


async def test_answers_at_once_and_binds_through_the_api_server() -> None:
    seen: list[tuple[str, str, dict]] = []

    async def binding(request: web.Request) -> web.Response:
        seen.append((request.path, request.headers["Authorization"], await request.json()))
        status = 409 if request.match_info["name"] == "taken" else 201
        return web.json_response({"kind": "Status"}, status=status)

    api = web.Application()
    api.router.add_post("/api/v1/namespaces/{ns}/pods/{name}/binding", binding)
    async with TestServer(api) as server:
        app = null_app(str(server.make_url("")).rstrip("/"), "secret")
        async with TestClient(TestServer(app)) as c:
            args = {"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["a", "b"]}
            got = await (await c.post("/scheduler/filter", json=args)).json()
            assert got["NodeNames"] == ["a", "b"] and got["Error"] == ""
            scores = await (await c.post("/scheduler/prioritize", json=args)).json()
            assert scores == [{"Host": "a", "Score": 0}, {"Host": "b", "Score": 0}]
            bind = {"PodName": "p", "PodNamespace": "ml", "PodUID": "u1", "Node": "a"}
            assert (await (await c.post("/scheduler/bind", json=bind)).json()) == {"Error": ""}
            taken = {**bind, "PodName": "taken"}
            error = (await (await c.post("/scheduler/bind", json=taken)).json())["Error"]
            assert error.startswith("HTTP 409")
    path, auth, body = seen[0]
    assert path == "/api/v1/namespaces/ml/pods/p/binding" and auth == "Bearer secret"
    assert body["target"]["name"] == "a" and body["metadata"]["uid"] == "u1"


async def test_one_passes_only_the_first_candidate() -> None:
    app = null_app("http://127.0.0.1:1", "secret", one=True)
    async with TestClient(TestServer(app)) as c:
        args = {"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["b", "a", "c"]}
        got = await (await c.post("/scheduler/filter", json=args)).json()
        assert got["NodeNames"] == ["b"] and got["FailedNodes"] == {}


async def test_a_burning_filter_spends_its_cpu_first_and_answers_the_same() -> None:
    import time

    app = null_app("http://127.0.0.1:1", "secret", one=True, burn_ms=20)
    async with TestClient(TestServer(app)) as c:
        args = {"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["a", "b"]}
        before = time.process_time()
        got = await (await c.post("/scheduler/filter", json=args)).json()
        assert time.process_time() - before >= 0.020  # a floor: the loop runs until then
    assert got["NodeNames"] == ["a"]
