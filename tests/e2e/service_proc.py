"""One of the project's own servers (extender, controller) run against the local cluster as a
real process with its own PID: a fresh log per run, live once its probe URL answers 200,
``kill9`` (kill -9) and a clean ``stop``. Subclasses say only how to start and probe it."""

from __future__ import annotations

import ssl
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Self

import cluster as e2e_cluster


class ServiceProcess:
    what = "process"  # how errors name it
    poll_s = 0.1  # between probes while it starts
    stop_timeout_s = 10.0  # SIGTERM, then SIGKILL after this long
    tail_lines = 40

    def __init__(self, workdir: Path, name: str) -> None:
        self.workdir = workdir
        self.name = name
        self.runs = 0
        self._proc: e2e_cluster.Proc | None = None

    def argv(self) -> list[str]:
        raise NotImplementedError

    def probe_url(self) -> str:
        raise NotImplementedError

    def ssl_context(self) -> ssl.SSLContext | None:
        return None

    def before_start(self) -> None:
        """Called before each start (a fresh port, say)."""

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self._proc.popen if self._proc is not None else None

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}-{self.runs}.log"

    def start(self, timeout: float = 60) -> Self:
        self.runs += 1
        self.before_start()
        self._proc = e2e_cluster.Proc(self.name, self.argv(), self.log_path).start(
            {"PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._proc.alive():
                raise RuntimeError(f"{self.what} exited: {self.tail()}")
            try:
                with urllib.request.urlopen(self.probe_url(), timeout=1,
                                            context=self.ssl_context()) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(self.poll_s)
        raise RuntimeError(f"{self.what} not live within {timeout:.0f} s: {self.tail()}")

    def kill9(self) -> None:
        if self._proc is not None:
            self._proc.kill()

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.stop(self.stop_timeout_s)

    def tail(self, lines: int | None = None) -> str:
        text = self._proc.tail(lines or self.tail_lines) if self._proc is not None else ""
        return text or "(no log)"
