"""Real redis-server and redis-sentinel processes for tests: restartable, freezable, on free
loopback ports."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from builders import free_port


def redis_binary() -> str:
    return shutil.which("redis-server") or "redis-server"


def wait_pong(port: int, timeout_s: float = 20.0, password: str | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as conn:
                if password:
                    conn.sendall(f"AUTH {password}\r\n".encode())
                    conn.recv(64)
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"redis on port {port} did not answer")


class RestartableRedis:
    """A redis-server this test may stop and start again on the same port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="sparse-views-")
        self.proc: subprocess.Popen[bytes] | None = None
        self.start(keep=False)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, keep: bool) -> None:
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = tempfile.mkdtemp(prefix="sparse-views-")
        self.proc = subprocess.Popen(
            [redis_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes", "--appendfsync", "always", "--dir", self.dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        wait_pong(self.port)

    def freeze(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)

    def restart(self, keep: bool) -> None:
        self.stop()
        self.start(keep)

    def flush(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port)) as conn:
            conn.sendall(b"FLUSHALL\r\n")
            conn.recv(16)




class SentinelGroup:
    """A primary, its replicas and real sentinels (``redis-server --sentinel``), all with one
    password. ``url`` is what ``--store`` takes."""

    def __init__(self, replicas: int = 1, sentinels: int = 3, password: str = "s3cret",
                 master: str = "sparse", down_after_ms: int = 1000,
                 appendonly: bool = False) -> None:
        self.password = password
        self.master = master
        self.dir = Path(tempfile.mkdtemp(prefix="sparse-sentinel-"))
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.argv: dict[int, list[str]] = {}
        self.data_ports = [free_port() for _ in range(1 + replicas)]
        self.sentinel_ports = [free_port() for _ in range(sentinels)]
        for i, port in enumerate(self.data_ports):
            args = ["--port", str(port), "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "yes" if appendonly else "no", "--appendfsync", "always",
                    "--appendfilename", f"aof-{port}.aof", "--dir", str(self.dir),
                    "--requirepass", password,
                    "--masterauth", password, "--dbfilename", f"dump-{port}.rdb"]
            if i > 0:
                args += ["--replicaof", "127.0.0.1", str(self.data_ports[0])]
            self._spawn(port, [redis_binary(), *args])
        for port in self.sentinel_ports:
            conf = self.dir / f"sentinel-{port}.conf"
            conf.write_text("\n".join([
                f"port {port}", "bind 127.0.0.1", f"dir {self.dir}",
                f"requirepass {password}",
                f"sentinel monitor {master} 127.0.0.1 {self.data_ports[0]} 2",
                f"sentinel auth-pass {master} {password}",
                f"sentinel down-after-milliseconds {master} {down_after_ms}",
                f"sentinel failover-timeout {master} 10000",
                f"sentinel parallel-syncs {master} 1", ""]))
            self._spawn(port, [redis_binary(), str(conf), "--sentinel"])
        self.wait_replicas_synced()

    def _spawn(self, port: int, argv: list[str]) -> None:
        self.argv[port] = argv
        log = open(self.dir / f"{port}.log", "ab")  # noqa: SIM115 - owned by the process
        self.procs[port] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        wait_pong(port, password=self.password)

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return f"sentinel://{hosts}/{self.master}"

    def command(self, port: int, *args: str) -> str:
        """One command over a raw socket (inline protocol); the reply's first line."""
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            conn.sendall(f"AUTH {self.password}\r\n".encode())
            conn.recv(64)
            conn.sendall((" ".join(args) + "\r\n").encode())
            time.sleep(0.05)
            return conn.recv(65536).decode(errors="replace")

    def master_port(self) -> int:
        reply = self.command(self.sentinel_ports[0], "SENTINEL", "get-master-addr-by-name",
                             self.master)
        return int(reply.split("\r\n")[4])

    def wait_replicas_synced(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for port in self.data_ports:
                if port != self.data_ports[0] and port in self.procs and \
                        "master_link_status:up" not in self.command(port, "INFO", "replication"):
                    break
            else:
                return
            time.sleep(0.1)
        raise RuntimeError("replicas did not sync")

    def failover(self, timeout_s: float = 30.0) -> float:
        """Ask the sentinels for a failover; seconds until they name the new master."""
        before = self.master_port()
        started = time.monotonic()
        self.command(self.sentinel_ports[0], "SENTINEL", "FAILOVER", self.master)
        while time.monotonic() - started < timeout_s:
            try:
                if self.master_port() != before:
                    return time.monotonic() - started
            except (OSError, ValueError, IndexError):
                pass
            time.sleep(0.05)
        raise RuntimeError("no failover")

    def restart_master(self) -> None:
        """Stop the primary (SIGTERM: it flushes its append-only file) and start it again on
        the same port, quicker than the sentinels' down-after: no failover, same data."""
        port = self.master_port()
        self.procs[port].terminate()
        self.procs[port].wait(10)
        self._spawn(port, self.argv[port])

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
