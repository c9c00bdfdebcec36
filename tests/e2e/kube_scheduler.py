"""kube-scheduler for the end-to-end control plane: its configuration (rendered from
``manifests/scheduler-config.yaml``) and its runs, each with a config file and a log of its
own, so that a test can stop, kill or repoint the scheduler while the API server stays up.

Plain Python (stdlib + PyYAML); no pytest import.
"""

from __future__ import annotations

import copy
import ssl
import subprocess
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import tooling
import yaml
from child_process import Proc, free_ports, http_get

SCHEDULER_CONFIG_TEMPLATE = tooling.ROOT / "manifests" / "scheduler-config.yaml"
EXTENDER_URL_PLACEHOLDER = "${SPARSE_EXTENDER_URL}"

# Wait until a process answers a probe (raises if it exits or times out first).
Wait = Callable[[Proc, Callable[[], bool], str], None]


def render_scheduler_config(
    extender_url: str | None,
    kubeconfig: str | Path | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    template: Path = SCHEDULER_CONFIG_TEMPLATE,
) -> dict[str, Any]:
    """manifests/scheduler-config.yaml with the extender URL filled in.

    With ``kubeconfig`` (tests) it also sets ``clientConnection.kubeconfig`` and turns leader
    election off; nothing else changes. ``extender_url=None`` drops ``extenders`` (plain
    scheduler). ``overrides`` are shallow-merged top-level keys (explicit test-only tuning).
    """
    cfg = yaml.safe_load(template.read_text())
    if extender_url is None:
        cfg.pop("extenders", None)
    else:
        hits = 0
        for ext in cfg.get("extenders", []):
            if ext.get("urlPrefix") == EXTENDER_URL_PLACEHOLDER:
                ext["urlPrefix"] = extender_url.rstrip("/")
                hits += 1
        if hits != 1:
            raise ValueError(f"{template}: expected one urlPrefix {EXTENDER_URL_PLACEHOLDER!r}")
    if kubeconfig is not None:
        cfg["clientConnection"] = {**cfg.get("clientConnection", {}), "kubeconfig": str(kubeconfig)}
        cfg["leaderElection"] = {"leaderElect": False}
    for key, value in (overrides or {}).items():
        cfg[key] = copy.deepcopy(value)
    return cfg


_HELP_TEXT: dict[str, str] = {}


def binary_supports(binary: Path, flag: str) -> bool:
    """Whether ``binary --help`` lists ``flag`` (read once per binary)."""
    exe = str(binary)
    if exe not in _HELP_TEXT:
        res = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=30)
        _HELP_TEXT[exe] = res.stdout + res.stderr
    return flag in _HELP_TEXT[exe]


class KubeScheduler:
    """The runs of one kube-scheduler binary against one API server (``kubeconfig``).

    ``wait`` and ``report_failure`` come from the control plane, whose failures carry the
    tails of every process log. Attributes after :meth:`start`: ``proc`` (:class:`Proc`),
    ``config_path``, ``port``, ``extender_url``.
    """

    def __init__(self, binary: Path, kubeconfig: Path, workdir: Path, logs_dir: Path, *,
                 tls: ssl.SSLContext, wait: Wait,
                 report_failure: Callable[[str], None]) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.logs_dir = logs_dir
        self._tls = tls
        self._wait = wait
        self._report_failure = report_failure
        self.proc: Proc | None = None
        self.config_path: Path | None = None
        self.port = 0
        self.extender_url: str | None = None
        self._runs = 0

    def start(
        self,
        extender_url: str | None = None,
        *,
        overrides: Mapping[str, Any] | None = None,
        extra_args: Iterable[str] = (),
        verbosity: int = 2,
        unschedulable_flush: str | None = "10s",
        wait_ready: bool = True,
    ) -> Proc:
        """Start kube-scheduler from manifests/scheduler-config.yaml.

        ``extender_url`` (e.g. ``http://127.0.0.1:8888/scheduler``) fills urlPrefix; ``None``
        runs the same profile (``sparse-scheduler``) without extenders. ``unschedulable_flush``
        sets --pod-max-in-unschedulable-pods-duration (default 5m upstream) when supported.
        A running scheduler is stopped first. Waits for its /readyz unless ``wait_ready=False``.
        """
        if self.proc is not None and self.proc.alive():
            self.stop()
        self._runs += 1
        run = self._runs
        cfg = render_scheduler_config(extender_url, self.kubeconfig, overrides=overrides)
        self.config_path = self.workdir / f"scheduler-config-{run}.yaml"
        self.config_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        self.extender_url = extender_url
        (port,) = free_ports(1)
        argv = [
            str(self.binary),
            f"--config={self.config_path}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"-v={verbosity}",
        ]
        if unschedulable_flush and binary_supports(
            self.binary, "--pod-max-in-unschedulable-pods-duration"
        ):
            argv.append(f"--pod-max-in-unschedulable-pods-duration={unschedulable_flush}")
        argv += list(extra_args)
        self.proc = Proc("kube-scheduler", argv, self.logs_dir / f"kube-scheduler-{run}.log")
        self.proc.start()
        self.port = port
        if wait_ready:
            url = f"https://127.0.0.1:{port}/readyz"
            try:
                self._wait(
                    self.proc,
                    lambda: http_get(url, context=self._tls)[0] == 200,
                    "kube-scheduler /readyz",
                )
            except BaseException:
                self._report_failure("kube-scheduler failed to start")
                self.proc.stop()
                raise
        return self.proc

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM the scheduler (SIGKILL after ``timeout``); returns its exit code."""
        return self.proc.stop(timeout) if self.proc else None

    def kill(self) -> int | None:
        """kill -9 the scheduler."""
        return self.proc.kill() if self.proc else None

    def restart(self, extender_url: Any = ..., **kw: Any) -> Proc:
        """Stop and start again; same extender URL unless a new one (or None) is given."""
        url = self.extender_url if extender_url is ... else extender_url
        self.stop()
        return self.start(url, **kw)
