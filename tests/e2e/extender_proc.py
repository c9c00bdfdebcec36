"""Run ``sparse-extender serve`` against the local cluster as a real process (own PID)."""

from __future__ import annotations

import json
import ssl
import sys
import urllib.request
from pathlib import Path

import cluster as e2e_cluster
from service_proc import ServiceProcess


class Extender(ServiceProcess):
    what = "extender"

    def __init__(self, workdir: Path, kubeconfig: str | Path, *, store: str = "memory",
                 name: str = "extender", extra: tuple[str, ...] = (),
                 tls: tuple[Path, Path, Path] | None = None) -> None:
        """``tls``: (certificate, key, CA) to serve HTTPS; the readiness probe verifies it."""
        super().__init__(workdir, name)
        self.tls = tls
        self.kubeconfig = str(kubeconfig)
        self.store = store
        self.extra = extra
        (self.port,) = e2e_cluster.free_ports(1)

    @property
    def base(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base}/scheduler"

    def ssl_context(self) -> ssl.SSLContext | None:
        return ssl.create_default_context(cafile=str(self.tls[2])) if self.tls else None

    def probe_url(self) -> str:
        return f"{self.base}/readyz"

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "extender", "serve", "--port", str(self.port),
                "--kubeconfig", self.kubeconfig, "--store", self.store, "--log-format", "text",
                "--log-level", "info",
                *(["--tls-cert", str(self.tls[0]), "--tls-key", str(self.tls[1])]
                  if self.tls else []),
                *self.extra]

    def inspect(self) -> dict:
        with urllib.request.urlopen(f"{self.url}/inspect", timeout=10,
                                    context=self.ssl_context()) as r:
            return json.loads(r.read())
