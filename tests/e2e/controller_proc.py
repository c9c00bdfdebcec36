"""Run ``sparse-controller`` against the local cluster as a real process (own PID)."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import cluster as e2e_cluster

# Peering priorities unique over the session: a later controller always outranks the earlier
# ones (a killed one stays in the peering object for its lifetime; equal priorities freeze).
_PRIORITY = itertools.count(100)


class Controller:
    def __init__(self, workdir: Path, kubeconfig: str | Path, extender_url: str, *,
                 name: str = "controller",
                 slot_ttl: float = 20, interval: float = 1, max_pass_over: float = 300,
                 extra: tuple[str, ...] = ()) -> None:
        self.workdir = workdir
        self.name = name
        self.kubeconfig = str(kubeconfig)
        self.extender_url = extender_url
        self.args = ["--slot-ttl", str(slot_ttl), "--interval", str(interval),
                     "--max-pass-over", str(max_pass_over), "--pod-delete-grace", "0", *extra]
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0
        self.port = 0

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}-{self.runs}.log"

    def start(self, timeout: float = 60) -> Controller:
        self.runs += 1
        (self.port,) = e2e_cluster.free_ports(1)
        log = open(self.log_path, "wb")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "controller.cli", "--extender-url", self.extender_url,
             "--kubeconfig", self.kubeconfig, "--namespace", "default",
             "--liveness", f"http://127.0.0.1:{self.port}/healthz",
             # peering on, as installed; a restart outranks the killed run it replaces
             "--peering", "sparse-e2e", "--priority", str(next(_PRIORITY)), *self.args],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"controller exited: {self.tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz",
                                            timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"controller not live: {self.tail()}")

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill9()

    def tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
