"""A real toxiproxy for the cache benchmarks, in front of the store (built from the Go module
proxy by ``hack/build-toxiproxy.sh`` into ``~/.cache/sparse/toxiproxy``); the redis-servers come
from ``bench.redis_server``. Loopback addresses only."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from bench.redis_server import free_port

TOXIPROXY = Path(os.environ.get("SPARSE_TOXIPROXY",
                                Path.home() / ".cache" / "sparse" / "toxiproxy" / "server"))
TOXIPROXY_INSTALL = "hack/build-toxiproxy.sh (go install .../toxiproxy/v2/cmd/server)"


def _wait(check, what: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not start")


class Toxiproxy:
    def __init__(self, binary: Path = TOXIPROXY) -> None:
        if not os.access(binary, os.X_OK):
            raise RuntimeError(f"toxiproxy not found at {binary}; build it: {TOXIPROXY_INSTALL}")
        self.api_port = free_port()
        self.proc = subprocess.Popen([str(binary), "-host", "127.0.0.1", "-port",
                                      str(self.api_port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        _wait(lambda: self._call("GET", "/version") is not None, "toxiproxy")

    def _call(self, method: str, path: str, body: dict | None = None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://127.0.0.1:{self.api_port}{path}", data=data,
                                     method=method, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            raw = resp.read()
        return json.loads(raw) if raw.strip().startswith((b"{", b"[")) else raw

    def proxy(self, name: str, upstream_port: int) -> int:
        port = free_port()
        self._call("POST", "/proxies", {"name": name, "listen": f"127.0.0.1:{port}",
                                        "upstream": f"127.0.0.1:{upstream_port}",
                                        "enabled": True})
        return port

    def set_latency(self, name: str, ms: int) -> None:
        """Added one-way latency on the store's replies (toxiproxy takes whole ms)."""
        with contextlib.suppress(urllib.error.HTTPError):
            self._call("DELETE", f"/proxies/{name}/toxics/latency")
        if ms:
            self._call("POST", f"/proxies/{name}/toxics",
                       {"name": "latency", "type": "latency", "stream": "downstream",
                        "attributes": {"latency": int(ms), "jitter": 0}})

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
