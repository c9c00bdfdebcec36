"""The controller's extender client over HTTPS (the chart's default) against the real app."""

from __future__ import annotations

import ssl
import subprocess

import pytest
from aiohttp.test_utils import TestServer
from builders import gpu_node, inventory, pod

from controller.errors import GangError
from controller.gangs import GangClient
from extender.config import Settings
from extender.http.app import make_app
from extender.interference import default_matrix
from extender.ledger.memory import MemoryLedger
from extender.placement import make_policy
from extender.service import Scheduler


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def pki(tmp_path):
    for name in ("ca", "server"):
        openssl("genrsa", "-out", f"{name}.key", "2048", cwd=tmp_path)
    openssl("req", "-x509", "-new", "-key", "ca.key", "-days", "1", "-subj", "/CN=test-ca",
            "-out", "ca.crt", cwd=tmp_path)
    (tmp_path / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("req", "-new", "-key", "server.key", "-subj", "/CN=server", "-out", "server.csr",
            cwd=tmp_path)
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "1", "-extfile", "san.cnf", "-out", "server.crt",
            cwd=tmp_path)
    return tmp_path


def request(replicas):
    worker = pod("w", gpus=1)
    return {"job": "j1", "namespace": "ml", "name": "dlrm-worker", "replicas": replicas,
            "pod": {"metadata": worker["metadata"], "spec": worker["spec"]}}


async def test_reserve_and_release_over_https(pki):
    s = Scheduler(inventory=inventory(gpu_node("a", 2)), ledger=MemoryLedger(),
                  matrix=default_matrix(), policy=make_policy("sparse"))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(pki / "server.crt"), str(pki / "server.key"))
    server = TestServer(make_app(Settings(nodes=None), scheduler=s), host="127.0.0.1")
    await server.start_server(ssl=context)
    base = f"https://127.0.0.1:{server.port}/scheduler"
    client = GangClient(base, ca_file=str(pki / "ca.crt"))
    untrusting = GangClient(base)
    try:
        answer = await client.reserve(request(2))
        assert answer["admitted"] is True and len(answer["slots"]) == 2
        refused = await client.reserve({**request(3), "job": "j2"})
        assert refused["admitted"] is False and refused["placeable"] == 0
        assert len(await client.release("j1")) == 2
        with pytest.raises(GangError, match="400"):
            await client.reserve({**request(1), "replicas": 0})
        with pytest.raises(GangError, match="unreachable"):
            await untrusting.reserve(request(1))  # the extender's CA is not trusted
    finally:
        await client.close()
        await untrusting.close()
        await server.close()
