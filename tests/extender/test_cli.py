"""The sparse-extender command line: argument errors, and HTTPS with mutual TLS."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from builders import free_port
from click.testing import CliRunner

from extender.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_bad_arguments_are_cli_errors(tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["serve"])
    assert result.exit_code == 2 and "--nodes" in result.output
    result = runner.invoke(main, ["serve", "--nodes", str(tmp_path / "missing.yaml"),
                                  "--store", "mongodb://x"])
    assert result.exit_code == 2
    assert "--store must be" in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: [{name: a, gpu: 2, gpu-mem: 16, model: X, uuids: [one]}]")
    result = runner.invoke(main, ["serve", "--nodes", str(bad)])
    assert result.exit_code == 1 and "exactly 2 UUIDs" in result.output
    net = tmp_path / "net.yaml"
    net.write_text("network: {rack: {gbps: 0, latency_ms: 1}}")
    result = runner.invoke(main, ["serve", "--nodes", str(bad), "--locality-network", str(net)])
    assert result.exit_code == 2 and "gbps must be > 0" in result.output


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def pki(tmp_path):
    for name in ("ca", "server", "client"):
        openssl("genrsa", "-out", f"{name}.key", "2048", cwd=tmp_path)
    openssl("req", "-x509", "-new", "-key", "ca.key", "-days", "1", "-subj", "/CN=test-ca",
            "-out", "ca.crt", cwd=tmp_path)
    (tmp_path / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        openssl("req", "-new", "-key", f"{name}.key", "-subj", f"/CN={name}", "-out",
                f"{name}.csr", cwd=tmp_path)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "1", "-extfile", "san.cnf", "-out", f"{name}.crt",
                cwd=tmp_path)
    return tmp_path


def test_https_with_client_certificates(pki):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "extender", "serve", "--port", str(port), "--nodes",
         str(ROOT / "examples/node-conf.yaml"), "--tls-cert", str(pki / "server.crt"),
         "--tls-key", str(pki / "server.key"), "--tls-client-ca", str(pki / "ca.crt"),
         "--store", "memory"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ),
    )
    url = f"https://127.0.0.1:{port}/healthz"
    trusted = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    with_cert = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    with_cert.load_cert_chain(str(pki / "client.crt"), str(pki / "client.key"))
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(url, context=with_cert, timeout=2) as resp:
                    assert resp.status == 200
                    break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        with pytest.raises((urllib.error.URLError, ConnectionError, ssl.SSLError)):
            urllib.request.urlopen(url, context=trusted, timeout=2)  # no client certificate
    finally:
        proc.terminate()
        proc.wait(10)
