"""Run ``sparse-extender serve`` against the local cluster as a real process (own PID)."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import cluster as e2e_cluster


class Extender:
    def __init__(self, workdir: Path, kubeconfig: str | Path, *, store: str = "memory",
                 name: str = "extender", extra: tuple[str, ...] = (),
                 tls: tuple[Path, Path, Path] | None = None) -> None:
        """``tls``: (certificate, key, CA) to serve HTTPS; the readiness probe verifies it."""
        self.workdir = workdir
        self.tls = tls
        self.kubeconfig = str(kubeconfig)
        self.store = store
        self.name = name
        self.extra = extra
        (self.port,) = e2e_cluster.free_ports(1)
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0

    @property
    def base(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base}/scheduler"

    def _context(self) -> ssl.SSLContext | None:
        return ssl.create_default_context(cafile=str(self.tls[2])) if self.tls else None

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}-{self.runs}.log"

    def start(self, timeout: float = 60) -> Extender:
        self.runs += 1
        log = open(self.log_path, "wb")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "extender", "serve", "--port", str(self.port),
             "--kubeconfig", self.kubeconfig, "--store", self.store, "--log-format", "text",
             "--log-level", "info",
             *(["--tls-cert", str(self.tls[0]), "--tls-key", str(self.tls[1])] if self.tls else []),
             *self.extra],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"extender exited: {self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.base}/readyz", timeout=1,
                                            context=self._context()) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"extender not ready: {self.tail()}")

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill9()

    def inspect(self) -> dict:
        import json

        with urllib.request.urlopen(f"{self.url}/inspect", timeout=10,
                                    context=self._context()) as r:
            return json.loads(r.read())

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
