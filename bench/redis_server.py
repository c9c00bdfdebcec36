"""Real redis-server and Sentinel processes on free loopback ports, for the tests and the
benchmarks: one launcher with the options they need (a TCP port and optionally a Unix socket,
``maxmemory`` and its policy, replica-of, a password, persistence off or an append-only file,
Sentinel), a bounded wait until the server answers, freeze/thaw, restart and a clean stop.

Stdlib only, so both the test suite and ``bench/`` can import it; the product packages never do.
Loopback addresses only.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

HOST = "127.0.0.1"


class RedisNotInstalled(RuntimeError):
    """No ``redis-server`` on PATH."""


def redis_binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        raise RedisNotInstalled("redis-server is not installed (`make system-deps` or "
                                "apt-get install redis-server)")
    return binary


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class ReplyError(RuntimeError):
    """An error reply (``-ERR ...``) from the server."""


def _read_reply(stream) -> object:  # noqa: ANN001 - a socket's binary file
    """One RESP reply: str for simple strings and bulk strings, int, list, or None."""
    line = stream.readline()
    if not line.endswith(b"\r\n"):
        raise ConnectionError("connection closed mid-reply")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise ReplyError(rest.decode(errors="replace"))
    if kind == b":":
        return int(rest)
    if kind == b"$":
        size = int(rest)
        return None if size < 0 else stream.read(size + 2)[:-2].decode(errors="replace")
    if kind == b"*":
        size = int(rest)
        return None if size < 0 else [_read_reply(stream) for _ in range(size)]
    raise ConnectionError(f"not a RESP reply: {line[:40]!r}")


def command(port: int, *args: str, password: str | None = None, timeout_s: float = 5.0) -> object:
    """One command on a fresh connection (AUTH first when ``password``); its decoded reply."""
    with socket.create_connection((HOST, port), timeout=timeout_s) as conn:
        stream = conn.makefile("rb")
        for cmd in ((("AUTH", password),) if password else ()) + (args,):
            conn.sendall(f"*{len(cmd)}\r\n".encode() + b"".join(
                f"${len(a.encode())}\r\n{a}\r\n".encode() for a in cmd))
            reply = _read_reply(stream)
        return reply


def wait_pong(port: int, *, password: str | None = None, timeout_s: float = 20.0,
              proc: subprocess.Popen[bytes] | None = None) -> None:
    """Retry PING until it answers PONG; RuntimeError after ``timeout_s`` or when ``proc``
    exits first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"redis-server on port {port} exited with {proc.returncode}")
        try:
            if command(port, "PING", password=password, timeout_s=0.5) == "PONG":
                return
        except (OSError, ReplyError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"redis on port {port} did not answer within {timeout_s:.0f} s")


class RedisServer:
    """One ``redis-server`` on a loopback port (free unless ``port``), started on construction.

    ``unixsocket``: also listen on ``<dir>/redis.sock`` (``unix_url``). ``maxmemory`` /
    ``maxmemory_policy``: the eviction bound (``"64mb"``, ``"allkeys-lfu"``). ``replica_of``:
    the primary's port. ``password``: ``requirepass`` and ``masterauth``. ``appendonly``: an
    append-only file synced on every write (survives ``restart``); off, nothing is persisted.
    ``dir``: the working directory; by default a fresh temporary one that ``stop`` removes.
    ``log``: a file for the server's output (default: discarded). ``extra``: more arguments.
    """

    def __init__(self, *, port: int | None = None, unixsocket: bool = False,
                 maxmemory: str | None = None, maxmemory_policy: str | None = None,
                 replica_of: int | None = None, password: str | None = None,
                 appendonly: bool = False, dir: str | Path | None = None,
                 log: str | Path | None = None, extra: Sequence[str] = (),
                 ready_timeout_s: float = 20.0) -> None:
        self._owns_dir = dir is None
        self.dir = str(dir) if dir is not None else tempfile.mkdtemp(prefix="sparse-redis-")
        self.port = port if port is not None else free_port()
        self.socket = os.path.join(self.dir, "redis.sock") if unixsocket else None
        self.password = password
        self.log = log
        self.ready_timeout_s = ready_timeout_s
        args = ["--port", str(self.port), "--bind", HOST, "--dir", self.dir, "--save", "",
                "--dbfilename", f"dump-{self.port}.rdb",
                "--appendonly", "yes" if appendonly else "no"]
        if appendonly:
            args += ["--appendfsync", "always", "--appendfilename", f"aof-{self.port}.aof"]
        if self.socket:
            args += ["--unixsocket", self.socket]
        if maxmemory is not None:
            args += ["--maxmemory", maxmemory]
        if maxmemory_policy is not None:
            args += ["--maxmemory-policy", maxmemory_policy]
        if password is not None:
            args += ["--requirepass", password, "--masterauth", password]
        if replica_of is not None:
            args += ["--replicaof", HOST, str(replica_of)]
        self.args = [*args, *extra]
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def argv(self) -> list[str]:
        return [redis_binary(), *self.args]

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    @property
    def unix_url(self) -> str:
        if self.socket is None:
            raise ValueError("started without unixsocket=True")
        return f"unix://{self.socket}"

    def start(self) -> None:
        """Start the process (again, after ``stop``) and wait until it answers PING."""
        argv = self.argv()
        os.makedirs(self.dir, exist_ok=True)
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL  # noqa: SIM115
        try:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        finally:
            if out is not subprocess.DEVNULL:
                out.close()  # the child holds its own descriptor
        try:
            wait_pong(self.port, password=self.password, timeout_s=self.ready_timeout_s,
                      proc=self.proc)
        except RuntimeError:
            self.stop()
            raise

    def halt(self) -> None:
        """Stop the process (SIGTERM: an append-only file is flushed), keep the directory."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        """Stop the process and remove the directory when it is this server's own."""
        self.halt()
        if self._owns_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def restart(self, keep_data: bool = True) -> None:
        """Stop and start again on the same port; without ``keep_data``, with no data."""
        self.halt()
        if not keep_data:
            if not self._owns_dir:
                raise ValueError("a shared directory is not wiped; pass keep_data=True")
            shutil.rmtree(self.dir, ignore_errors=True)
        self.start()

    def freeze(self) -> None:
        """SIGSTOP: the port stays open, nothing answers."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)

    def command(self, *args: str) -> object:
        return command(self.port, *args, password=self.password)

    def flush(self) -> None:
        self.command("FLUSHALL")


class Sentinel(RedisServer):
    """``redis-server <conf> --sentinel`` watching ``master`` at ``master_port``; ``password``
    both guards the sentinel and is what it authenticates to the data servers with."""

    def __init__(self, master: str, master_port: int, *, quorum: int = 2,
                 down_after_ms: int = 1000, failover_timeout_ms: int = 10000,
                 password: str | None = None, dir: str | Path | None = None,
                 log: str | Path | None = None, port: int | None = None) -> None:
        self.master = master
        self.monitor = [f"sentinel monitor {master} {HOST} {master_port} {quorum}",
                        f"sentinel down-after-milliseconds {master} {down_after_ms}",
                        f"sentinel failover-timeout {master} {failover_timeout_ms}",
                        f"sentinel parallel-syncs {master} 1"]
        if password is not None:
            self.monitor += [f"requirepass {password}", f"sentinel auth-pass {master} {password}"]
        super().__init__(port=port, password=password, dir=dir, log=log)

    def argv(self) -> list[str]:
        conf = Path(self.dir) / f"sentinel-{self.port}.conf"
        if not conf.exists():  # the sentinel rewrites its file; a restart keeps what it learnt
            conf.write_text("\n".join([f"port {self.port}", f"bind {HOST}", f"dir {self.dir}",
                                       *self.monitor, ""]))
        return [redis_binary(), str(conf), "--sentinel"]

    def master_port(self) -> int:
        try:
            reply = self.command("SENTINEL", "get-master-addr-by-name", self.master)
        except ReplyError as e:
            raise ValueError(f"no master address: {e}") from e
        if not isinstance(reply, list) or len(reply) != 2:
            raise ValueError(f"no master address: {reply!r}")
        return int(reply[1])


class SentinelGroup:
    """A primary, its replicas and real sentinels, all with one password, sharing one
    directory (each process logs to ``<port>.log`` there). ``url`` is what ``--store`` takes."""

    def __init__(self, replicas: int = 1, sentinels: int = 3, password: str = "s3cret",
                 master: str = "sparse", down_after_ms: int = 1000,
                 appendonly: bool = False) -> None:
        self.password = password
        self.master = master
        self.dir = Path(tempfile.mkdtemp(prefix="sparse-sentinel-"))
        self.servers: dict[int, RedisServer] = {}
        try:
            primary = self._add(lambda p: RedisServer(port=p, password=password,
                                                      appendonly=appendonly, dir=self.dir,
                                                      log=self.dir / f"{p}.log"))
            for _ in range(replicas):
                self._add(lambda p: RedisServer(port=p, password=password, replica_of=primary,
                                                appendonly=appendonly, dir=self.dir,
                                                log=self.dir / f"{p}.log"))
            self.data_ports = list(self.servers)
            self.sentinels = [
                Sentinel(master, primary, down_after_ms=down_after_ms, password=password,
                         dir=self.dir, log=self.dir / f"{p}.log", port=p)
                for p in (free_port() for _ in range(sentinels))]
            for s in self.sentinels:
                self.servers[s.port] = s
            self.sentinel_ports = [s.port for s in self.sentinels]
            self.wait_replicas_synced()
        except BaseException:
            self.stop()
            raise

    def _add(self, make) -> int:  # noqa: ANN001 - port -> RedisServer
        server = make(free_port())
        self.servers[server.port] = server
        return server.port

    @property
    def procs(self) -> dict[int, subprocess.Popen[bytes]]:
        return {port: s.proc for port, s in self.servers.items() if s.proc is not None}

    @property
    def url(self) -> str:
        hosts = ",".join(f"{HOST}:{p}" for p in self.sentinel_ports)
        return f"sentinel://{hosts}/{self.master}"

    def command(self, port: int, *args: str) -> object:
        return command(port, *args, password=self.password)

    def master_port(self) -> int:
        return self.sentinels[0].master_port()

    def wait_replicas_synced(self, timeout_s: float = 30.0) -> None:
        """Until every replica of the current master reports its link up (bounded)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            master = self.master_port()
            if all("master_link_status:up" in str(self.command(port, "INFO", "replication"))
                   for port in self.data_ports if port != master):
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
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        raise RuntimeError("no failover")

    def restart_master(self) -> None:
        """Stop the primary (SIGTERM: it flushes its append-only file) and start it again on
        the same port, quicker than the sentinels' down-after: no failover, same data."""
        self.servers[self.master_port()].restart(keep_data=True)

    def stop(self) -> None:
        for server in self.servers.values():
            if server.proc is not None and server.proc.poll() is None:
                server.proc.terminate()
        for server in self.servers.values():
            server.halt()
        shutil.rmtree(self.dir, ignore_errors=True)
