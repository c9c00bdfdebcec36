"""Run ``sparse-controller`` against the local cluster as a real process (own PID)."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import cluster as e2e_cluster
from service_proc import ServiceProcess

# Peering priorities unique over the session: a later controller always outranks the earlier
# ones (a killed one stays in the peering object for its lifetime; equal priorities freeze).
_PRIORITY = itertools.count(100)


class Controller(ServiceProcess):
    what = "controller"
    poll_s = 0.2
    stop_timeout_s = 15.0
    tail_lines = 60

    def __init__(self, workdir: Path, kubeconfig: str | Path, extender_url: str, *,
                 name: str = "controller",
                 slot_ttl: float = 20, interval: float = 1, max_pass_over: float = 300,
                 extra: tuple[str, ...] = ()) -> None:
        super().__init__(workdir, name)
        self.kubeconfig = str(kubeconfig)
        self.extender_url = extender_url
        self.args = ["--slot-ttl", str(slot_ttl), "--interval", str(interval),
                     "--max-pass-over", str(max_pass_over), "--pod-delete-grace", "0", *extra]
        self.port = 0

    def before_start(self) -> None:
        (self.port,) = e2e_cluster.free_ports(1)

    def probe_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/healthz"

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "controller.cli", "--extender-url", self.extender_url,
                "--kubeconfig", self.kubeconfig, "--namespace", "default",
                "--liveness", self.probe_url(),
                # peering on, as installed; a restart outranks the killed run it replaces
                "--peering", "sparse-e2e", "--priority", str(next(_PRIORITY)), *self.args]
