"""The chart's Redis Sentinel start-up scripts, run by real redis-server / Sentinel processes.

The scripts come from ``helm template --set redis.sentinel.enabled=true`` (ConfigMap
``sparse-redis-scripts``) and run unchanged under ``sh``. Only what a pod network gives them is
simulated: small shims in front of redis-server, redis-sentinel and redis-cli map the pods' DNS
names (``r-<i>.h.n.svc``) to 127.0.0.1 and the fixed ports 6379/26379 to free ports per pod.

Shown: pod 0 starts as primary, pod 1 as its replica (found through pod 0's sentinel), both
require the password; the primary is killed and restarted at once, while the sentinels still call
it primary: it waits instead of coming back as an empty primary, the sentinels promote pod 1, and
pod 0 rejoins as pod 1's replica with the data intact.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from cluster import free_ports
from tooling import helm_path, versions

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "s3cretPassw0rd"
SHIM = r'''#!PYTHON
"""Maps pod names/ports to 127.0.0.1 and per-pod ports, then runs the real binary."""
import json, os, re, subprocess, sys
cfg = json.loads(os.environ["SHIM"])
name = os.path.basename(sys.argv[0])
pat = re.compile(r"^r-(\d+)\.h\.n\.svc$")
me = os.environ.get("HOSTNAME", "r-0").rsplit("-", 1)[1]

def idx(host):
    m = pat.match(host)
    return m.group(1) if m else None

if name == "redis-server":
    out, args = [], sys.argv[1:]
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--port":
            out += [a, str(cfg["redis"][me])]; i += 2; continue
        if a == "--replicaof":
            out += [a, "127.0.0.1", str(cfg["redis"][idx(args[i + 1])])]; i += 3; continue
        out.append("127.0.0.1" if idx(a) is not None else a); i += 1
    os.execv(cfg["real"], [cfg["real"], *out, "--bind", "127.0.0.1"])
elif name == "redis-sentinel":
    conf = sys.argv[1]
    lines = []
    for line in open(conf).read().splitlines():
        w = line.split()
        if w[:1] == ["port"]:
            line = f"port {cfg['sentinel'][me]}"
        elif w[:2] == ["sentinel", "announce-ip"]:
            line = "sentinel announce-ip 127.0.0.1"
        elif w[:2] == ["sentinel", "announce-port"]:
            line = f"sentinel announce-port {cfg['sentinel'][me]}"
        elif w[:2] == ["sentinel", "monitor"]:
            line = f"sentinel monitor {w[2]} 127.0.0.1 {cfg['redis'][idx(w[3])]} {w[5]}"
        lines.append(line)
    open(conf, "w").write("\n".join(lines + ["bind 127.0.0.1"]) + "\n")
    os.execv(cfg["real"], [cfg["real"], conf, "--sentinel"])
else:  # redis-cli
    args = sys.argv[1:]
    if "-h" in args:
        j = idx(args[args.index("-h") + 1])
        args[args.index("-h") + 1] = "127.0.0.1"
        if "-p" in args and j is not None:
            kind = "sentinel" if args[args.index("-p") + 1] == "26379" else "redis"
            args[args.index("-p") + 1] = str(cfg[kind][j])
    res = subprocess.run([cfg["cli"], *args], capture_output=True, text=True)
    out = res.stdout.splitlines()
    if len(out) == 2 and out[0] == "127.0.0.1":  # get-master-addr-by-name: back to pod names
        back = {str(p): i for i, p in cfg["redis"].items()}
        out = [f"r-{back[out[1]]}.h.n.svc", "6379"]
    sys.stdout.write("\n".join(out) + ("\n" if out else ""))
    sys.stderr.write(res.stderr)
    sys.exit(res.returncode)
'''


def _scripts() -> dict[str, str]:
    helm = helm_path()
    if not os.access(helm, os.X_OK):
        if os.environ.get("SPARSE_E2E_REQUIRE", "") not in ("", "0"):
            pytest.fail("helm not built: run hack/build-helm.sh")
        pytest.skip("helm not built (hack/build-helm.sh)")
    out = subprocess.run(
        [str(helm), "template", "sparse", str(ROOT / "charts" / "sparse"), "--namespace", "n",
         "--kube-version", versions()["K8S_VERSION"], "--set", "redis.sentinel.enabled=true"],
        capture_output=True, text=True, check=True, timeout=60).stdout
    cm = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "ConfigMap"
              and d["metadata"]["name"] == "sparse-redis-scripts")
    return cm["data"]


class Pods:
    def __init__(self, tmp: Path, n: int) -> None:
        self.tmp, self.n = tmp, n
        ports = free_ports(2 * n)
        self.redis_ports = {str(i): ports[i] for i in range(n)}
        self.sentinel_ports = {str(i): ports[n + i] for i in range(n)}
        shims = tmp / "bin"
        shims.mkdir()
        shim = shims / "shim.py"
        shim.write_text(SHIM.replace("PYTHON", sys.executable))
        shim.chmod(0o755)
        for name in ("redis-server", "redis-sentinel", "redis-cli"):
            (shims / name).symlink_to(shim)
        self.scripts = tmp / "scripts"
        self.scripts.mkdir()
        for name, text in _scripts().items():
            (self.scripts / name).write_text(text)
        self.env = {
            "PATH": f"{shims}:{os.environ['PATH']}", "REDIS_PASSWORD": PASSWORD,
            "REDISCLI_AUTH": PASSWORD, "STATEFULSET": "r", "HEADLESS": "h", "NAMESPACE": "n",
            "REPLICAS": str(n), "MASTER_NAME": "m", "QUORUM": "1",
            # 1 s let a loaded machine's slow ping mark a just-promoted primary down and fail
            # back at once; 3 s keeps the test quick without that false alarm.
            "DOWN_AFTER_MS": "3000", "FAILOVER_TIMEOUT_MS": "10000",
            "SHIM": json.dumps({"redis": self.redis_ports, "sentinel": self.sentinel_ports,
                                "real": shutil.which("redis-server"),
                                "cli": shutil.which("redis-cli")}),
        }
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, pod: int, what: str) -> None:
        data = self.tmp / f"{what}-{pod}"
        data.mkdir(exist_ok=True)
        log = (self.tmp / f"{what}-{pod}.log").open("ab")
        self.procs[f"{what}-{pod}"] = subprocess.Popen(
            ["sh", str(self.scripts / f"{what}.sh")], stdout=log, stderr=subprocess.STDOUT,
            env={**self.env, "HOSTNAME": f"r-{pod}", "DATA_DIR": str(data)})

    def log(self, pod: int, what: str) -> str:
        path = self.tmp / f"{what}-{pod}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def cli(self, port: int, *args: str, auth: bool = True) -> str:
        env = {"REDISCLI_AUTH": PASSWORD} if auth else {}
        res = subprocess.run([shutil.which("redis-cli") or "redis-cli", "-p", str(port), *args],
                             capture_output=True, text=True, timeout=10,
                             env={**os.environ, **env})
        return res.stdout.strip()

    def role(self, pod: int) -> str:
        info = self.cli(self.redis_ports[str(pod)], "info", "replication")
        fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
        if fields.get("role") == "slave" and fields.get("master_link_status") == "up":
            return f"replica-of:{fields['master_port']}"
        return fields.get("role", "down")

    def master_port(self, pod: int) -> str:
        out = self.cli(self.sentinel_ports[str(pod)], "sentinel", "get-master-addr-by-name", "m")
        return out.splitlines()[-1] if out else ""

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)


def _until(what: str, check, pods: Pods, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {k}\n{pods.log(int(k[-1]), k[:-2])[-2000:]}"
                             for k in pods.procs)
            raise AssertionError(f"timed out waiting for {what}\n{logs}")
        time.sleep(0.2)


def _switched(pods: Pods, old: int, new: int) -> bool:
    line = f"+switch-master m 127.0.0.1 {old} 127.0.0.1 {new}"
    return any(line in pods.log(pod, "sentinel") for pod in (0, 1))


def _settled(pods: Pods) -> bool:
    primary = pods.master_port(0)
    if not primary or pods.master_port(1) != primary:
        return False
    roles = {str(pods.redis_ports[str(pod)]): pods.role(pod) for pod in (0, 1)}
    return primary in roles and all(
        role == ("master" if port == primary else f"replica-of:{primary}")
        for port, role in roles.items())


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")
def test_sentinel_scripts_elect_replicate_and_fail_over(tmp_path: Path) -> None:
    pods = Pods(tmp_path, 2)
    r0, r1 = (int(pods.redis_ports[k]) for k in ("0", "1"))
    try:
        pods.start(0, "redis")
        _until("pod 0 primary", lambda: pods.role(0) == "master", pods)
        pods.start(0, "sentinel")
        _until("sentinel 0", lambda: pods.master_port(0) == str(r0), pods)
        pods.start(1, "redis")
        pods.start(1, "sentinel")
        _until("pod 1 replicates pod 0", lambda: pods.role(1) == f"replica-of:{r0}", pods)
        _until("sentinel 1 follows pod 0", lambda: pods.master_port(1) == str(r0), pods)
        # Sentinels learn replicas from the primary's INFO (every 10 s): a primary lost before
        # that has no replica to promote.
        for pod in (0, 1):
            port = pods.sentinel_ports[str(pod)]
            _until(f"sentinel {pod} knows the replica",
                   lambda port=port: str(r1) in pods.cli(port, "sentinel", "replicas", "m"), pods)
        assert "starting as primary" in pods.log(0, "redis")
        assert "replica of r-0.h.n.svc" in pods.log(1, "redis")
        # Password everywhere: Redis and the sentinels.
        assert "NOAUTH" in pods.cli(r0, "ping", auth=False)
        assert "NOAUTH" in pods.cli(int(pods.sentinel_ports["0"]), "ping", auth=False)
        assert pods.cli(r0, "set", "booking", "gpu-7") == "OK"
        assert pods.cli(r0, "wait", "1", "5000") == "1"  # replicated before the crash

        # The primary crashes and comes back at once, empty, still "primary" to the sentinels.
        # (sh execs the shim, which execs redis-server: one PID all along.)
        pods.procs["redis-0"].send_signal(signal.SIGKILL)
        pods.procs["redis-0"].wait(10)
        pods.start(0, "redis")
        _until("pod 1 promoted", lambda: _switched(pods, r0, r1), pods)
        _until("pod 0 restarts as pod 1's replica",
               lambda: "replica of r-1.h.n.svc" in pods.log(0, "redis"), pods)
        # Then the pair settles: both sentinels name one primary, the other pod replicates it and
        # holds the booking. (On a loaded machine the sentinels may fail over once more, back to
        # pod 0 after it has synced from pod 1; the data survives either way.)
        _until("one primary, one replica, sentinels agree", lambda: _settled(pods), pods)
        for port in (r0, r1):
            assert pods.cli(port, "get", "booking") == "gpu-7"
    finally:
        pods.stop()
