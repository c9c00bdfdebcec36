"""One child process of the end-to-end harness (etcd, kube-apiserver, kube-scheduler) with its
log, stopped only through its own PID; and the loopback helpers its callers share (free
ports, a plain HTTP GET for readiness probes).

Plain Python (stdlib only); no pytest import.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def free_ports(n: int) -> list[int]:
    """n distinct free loopback TCP ports (held open together so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def insecure_tls() -> ssl.SSLContext:
    """A client context that accepts the control plane's self-signed certificates."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def http_get(url: str, *, context: ssl.SSLContext, token: str | None = None) -> tuple[int, bytes]:
    """(status, body) of one GET; (0, b"") when nothing answers (a probe, not an API call)."""
    req = urllib.request.Request(url)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, context=context, timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
    except (OSError, ValueError):
        return 0, b""


def _set_pdeathsig() -> None:  # pragma: no cover - runs in the child
    """Linux: SIGTERM the child if the (main) thread that spawned it dies, e.g. a killed pytest."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


@dataclass
class Proc:
    """One child process with its log file; stopped only through its own PID."""

    name: str
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    _log: Any = field(default=None, repr=False)

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def start(self, env: Mapping[str, str] | None = None) -> Proc:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in _reap
        self._log.write(f"# {time.strftime('%H:%M:%S')} $ {' '.join(self.argv)}\n".encode())
        self._log.flush()
        on_main = threading.current_thread() is threading.main_thread()
        self.popen = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a terminal Ctrl-C reaches the harness, not the children
            preexec_fn=_set_pdeathsig if on_main and sys.platform == "linux" else None,
            env={**os.environ, **(env or {})},
        )
        self.started_at = time.monotonic()
        return self

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def returncode(self) -> int | None:
        return self.popen.poll() if self.popen else None

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, wait up to ``timeout``, then SIGKILL. Returns the exit code."""
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.terminate()
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                return self.kill()
        return self._reap()

    def kill(self) -> int | None:
        """SIGKILL (kill -9) and reap."""
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.popen.kill()
        return self._reap()

    def _reap(self) -> int | None:
        rc = self.popen.wait() if self.popen else None
        if self._log and not self._log.closed:
            self._log.close()
        return rc

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])
