"""Fuzzing the four verbs over HTTP against a real extender process.

Hypothesis generates requests shaped like the scheduler's (pods with random and hostile
quantities, node lists, forged inventories, victims, binds of pods filtered before) and then
breaks them (truncated, garbage, nested thousands deep, wrong types, bad or bombed gzip,
unknown encodings, bodies over the limit). Every answer must be a protocol answer: 4xx with an
``error`` message, or 200 in the verb's shape; never a 5xx, never a connection closed without
an answer; and a rejected request must leave the ledger and the inventory as they were
(``/inspect`` before and after).

Long form (``make chaos-fuzz``)::

    PYTHONPATH=tests python -m chaos.fuzz_verbs --requests 50000

It also measures ``/healthz`` while 50 MB requests are in flight (full Node objects decoded in
the worker process) and prints every figure.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from bench.redis_server import free_port

REPO = Path(__file__).resolve().parents[2]
PREFIX = "/scheduler"
VERBS = ("filter", "prioritize", "bind", "preempt")
NODES = [f"fz-{i}" for i in range(4)] + ["fz-small"]
POD_POOL = 200  # binds name pods from the same pool as filters, so some bind for real

NODE_CONF = {
    "nodes": [
        *({"name": f"fz-{i}", "gpu": 4, "gpu-mem": 128, "model": "V100M32"} for i in range(4)),
        {"name": "fz-small", "gpu": 2, "gpu-mem": 32, "model": "V100M16"},
    ]
}


# --- the extender under test -------------------------------------------------------------


class ExtenderProcess:
    """``python -m extender serve`` on a free port with a small node-conf inventory."""

    def __init__(self, *extra: str) -> None:
        self.port = free_port()
        self.extra = extra
        self.dir = tempfile.mkdtemp(prefix="sparse-fuzz-")
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ExtenderProcess:
        conf = Path(self.dir) / "nodes.json"  # JSON is YAML
        conf.write_text(json.dumps(NODE_CONF))
        self.log = open(Path(self.dir) / "extender.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "extender", "serve", "--port", str(self.port), "--nodes",
             str(conf), "--reservation-ttl", "86400", "--log-level", "error",
             "--log-format", "text",
             # its own ledger file, not the user's default one (in use by a running extender)
             "--state-dir", str(Path(self.dir) / "state"), *self.extra],
            cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"extender exited: {self.tail()}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
                conn.request("GET", "/readyz")
                if conn.getresponse().status == 200:
                    conn.close()
                    return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"extender not ready: {self.tail()}")

    def tail(self) -> str:
        return (Path(self.dir) / "extender.log").read_text(errors="replace")[-2000:]

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class Dropped(Exception):
    """The server closed the connection without an answer."""


class Client:
    """One keep-alive connection, reopened only after the server said it would close it."""

    def __init__(self, port: int, timeout: float = 60) -> None:
        self.port = port
        self.timeout = timeout
        self.conn: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        try:
            self.conn.request(method, path, body=body, headers=headers or {})
            response = self.conn.getresponse()
            data = response.read()
        except (http.client.HTTPException, OSError) as exc:
            self.close()
            raise Dropped(repr(exc)) from exc
        if response.will_close:
            self.close()
        return response.status, data

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


# --- what to send ------------------------------------------------------------------------
#
# Hypothesis draws the shape of each request (verb, how it is broken, its encoding, how big)
# and a seed; the bulk of the payload is built from that seed with ``random``, picking from
# lists of known-nasty values. Drawing every nested field through hypothesis costs ~10 ms a
# request, which would make 50,000 requests take hours.

NASTY_STRINGS = ["", "a", "x" * 300, "\u0000", "é", "🚀", " ", "null", "../..", "%s%n",
                 "\ud800", "-1", "1e1000000", "NaN", "fz-0", "ghost", "A100|", "|", "\\",
                 "sparse.io/gpu-mem", "nvidia.com/gpu"]
NASTY_VALUES: list[Any] = [None, True, False, 0, -1, 2**63, -(2**63) - 1, 2**64, 10**30, 1.5,
                           float("nan"), float("inf"), -float("inf"), 1e308, [], {}, [[[]]],
                           {"a": {"b": {}}}, "", "x" * 300, [None] * 20, *NASTY_STRINGS]
QUANTITIES: list[Any] = [
    "1", "2", "0", "4", "1e1000000", "9e999999", "1e-1000000", "-1", "1.5", "1Ki", "1e30",
    "NaN", "inf", "", " 3 ", "1Mi", "100m", "8192", "300", "99999999999999999999", "1e3",
    "0x10", "1_000", "١", "8Gi", "1000", "16384", "40000", 1, 2, 100, 8192, -5, 2**70, 1.5,
    float("nan"), None, [], {}, True,
]
RESOURCES = ["nvidia.com/gpu", "sparse.io/gpu-mem", "sparse.io/gpu-milli", "cpu", "memory",
             *NASTY_STRINGS[:4]]
ANNOTATION_KEYS = ["sparse.io/gpu-model", "sparse.io/job-class", "note", *NASTY_STRINGS[:3]]
ANNOTATION_VALUES = ["V100M32", "V100M16|V100M32", "H100", "cnn", "recommendation", "x" * 70,
                     *NASTY_STRINGS]
NODE_NAMES = [*NODES, *NODES, *NODES, "ghost", "x" * 300, "", *NASTY_STRINGS[3:8]]


class Builder:
    """Payloads from one seed (so a failing request can be rebuilt from its note)."""

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)

    def pick(self, values: list[Any]) -> Any:
        return self.r.choice(values)

    def chance(self, p: float) -> bool:
        return self.r.random() < p

    def value(self, depth: int = 0) -> Any:
        if depth < 3 and self.chance(0.15):
            if self.chance(0.5):
                return [self.value(depth + 1) for _ in range(self.r.randint(0, 3))]
            return {self.pick(NASTY_STRINGS): self.value(depth + 1)
                    for _ in range(self.r.randint(0, 3))}
        return self.pick(NASTY_VALUES)

    def resources(self) -> dict[str, Any]:
        table: dict[str, Any] = {}
        for _ in range(self.r.randint(0, 3)):
            table[self.pick(RESOURCES)] = (self.pick(QUANTITIES) if self.chance(0.9)
                                           else self.value())
        return table

    def container(self) -> dict[str, Any]:
        c: dict[str, Any] = {"name": self.pick(["main", "side", *NASTY_STRINGS[:3]])}
        if self.chance(0.9):
            c["resources"] = {k: self.resources() for k in ("limits", "requests")
                              if self.chance(0.6)}
        return c

    def pod(self) -> dict[str, Any]:
        k = self.r.randrange(POD_POOL)
        meta: dict[str, Any] = {"name": f"fz-pod-{k}", "namespace": "ml", "uid": f"fz-uid-{k}"}
        if self.chance(0.1):
            meta = {key: self.pick(NASTY_STRINGS) for key in ("name", "uid", "namespace")
                    if self.chance(0.7)}
        meta["annotations"] = {self.pick(ANNOTATION_KEYS): self.pick(ANNOTATION_VALUES)
                               for _ in range(self.r.randint(0, 2))}
        if self.chance(0.5):  # a well-formed GPU pod, so that binds book for real
            limits = ({"sparse.io/gpu-mem": str(self.pick([512, 1024, 4096, 8192, 16000])),
                       "sparse.io/gpu-milli": str(self.pick([50, 100, 300, 700]))}
                      if self.chance(0.8) else {"nvidia.com/gpu": self.pick(["1", "2"])})
            spec: dict[str, Any] = {"containers": [{"name": "main",
                                                    "resources": {"limits": limits}}]}
        else:
            spec = {"containers": [self.container() for _ in range(self.r.randint(0, 3))]}
        if self.chance(0.2):
            spec["initContainers"] = [self.container()]
        return {"metadata": meta, "spec": spec}

    def inventory_annotation(self) -> str:
        gpus = [{"uuid": self.pick(["GPU-fz-0-0", "GPU-forged", *NASTY_STRINGS[:4]]),
                 "memory_mib": self.pick([16 * 1024 * 1024, 2**40, 32768, *NASTY_VALUES]),
                 "index": self.pick([0, 1, -1, 2**40, None, float("nan")]),
                 "model": self.pick(["H100", "V100M32", *NASTY_STRINGS[:3]])}
                for _ in range(self.r.randint(0, 3))]
        return json.dumps(gpus) if self.chance(0.8) else self.pick(NASTY_STRINGS)

    def node_object(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": self.pick(NODE_NAMES)}
        if self.chance(0.7):
            meta["annotations"] = {"sparse.io/gpu-inventory": self.inventory_annotation()}
        if self.chance(0.3):
            meta["labels"] = {self.pick(NASTY_STRINGS): self.pick(NASTY_STRINGS)}
        return {"metadata": meta}

    def extender_args(self) -> dict[str, Any]:
        lowercase = self.chance(0.1)
        keys = ("pod", "nodes", "nodenames") if lowercase else ("Pod", "Nodes", "NodeNames")
        args: dict[str, Any] = {keys[0]: self.pod()}
        if self.chance(0.2):
            args[keys[1]] = {"items": [self.node_object() for _ in range(self.r.randint(0, 6))]}
        else:
            args[keys[2]] = [self.pick(NODE_NAMES) for _ in range(self.r.randint(0, 12))]
        return args

    def binding_args(self) -> dict[str, Any]:
        k = self.r.randrange(POD_POOL)
        args: dict[str, Any] = {"PodName": f"fz-pod-{k}", "PodNamespace": "ml",
                                "PodUID": f"fz-uid-{k}", "Node": self.pick(NODE_NAMES)}
        if self.chance(0.2):
            args = {key: self.value() for key in [*args, "podName", "node"] if self.chance(0.5)}
        return args

    def preemption_args(self) -> dict[str, Any]:
        def victim() -> dict[str, Any]:
            if self.chance(0.8):
                return {"UID": self.pick([f"fz-uid-{k}" for k in range(5)] + NASTY_STRINGS)}
            return {"metadata": {"uid": self.pick(NASTY_STRINGS)}} if self.chance(0.5) else {}

        key = self.pick(["NodeNameToMetaVictims", "NodeNameToVictims", "nodeNameToMetaVictims"])
        victims = {self.pick(NODE_NAMES): {
            "Pods": [victim() for _ in range(self.r.randint(0, 3))],
            "NumPDBViolations": self.pick([0, 1, -1, 2**65, None, "x"])}
            for _ in range(self.r.randint(0, 4))}
        return {"Pod": self.pod(), key: victims}

    def args_for(self, verb: str) -> dict[str, Any]:
        if verb in ("filter", "prioritize"):
            return self.extender_args()
        return self.binding_args() if verb == "bind" else self.preemption_args()


MUTATIONS = ["none"] * 10 + ["truncate", "garbage", "deep", "wrong_type", "empty", "not_json",
                             "huge_number", "duplicate_keys", "other_verb"]
ENCODINGS = [None] * 12 + ["gzip", "gzip_corrupt", "gzip_truncated", "deflate", "br", "bomb",
                           "identity", "x-unknown"]


def _bomb() -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = b"\0" * (1 << 20)
    return b"".join(compressor.compress(zeros) for _ in range(16)) + compressor.flush()


BOMB = _bomb()  # 16 MiB of zeros once inflated: past the 8 MiB limit
OVERSIZE = 9 * 1024 * 1024


@dataclass
class FuzzRequest:
    verb: str
    body: bytes
    headers: dict[str, str]
    names: list[str] | None  # node names the request named, when it was left intact
    note: str


def _names_in(payload: dict[str, Any]) -> list[str] | None:
    listed = payload.get("NodeNames", payload.get("nodenames"))
    if listed is not None:
        return listed
    items = (payload.get("Nodes") or payload.get("nodes") or {}).get("items")
    return [n["metadata"]["name"] for n in items or []]


def build_request(verb: str, mutation: str, encoding: str | None, oversize: bool, seed: int,
                  other_verb: str = "filter") -> FuzzRequest:
    b = Builder(seed)
    payload = b.args_for(other_verb if mutation == "other_verb" else verb)
    body = json.dumps(payload).encode()  # NaN and Infinity are written as JS literals
    names = (_names_in(payload) if mutation == "none" and verb in ("filter", "prioritize")
             else None)
    if mutation == "truncate":
        body = body[: b.r.randrange(max(1, len(body)))]
    elif mutation == "garbage":
        at = b.r.randrange(len(body) + 1)
        body = body[:at] + b.r.randbytes(b.r.randint(1, 16)) + body[at:]
    elif mutation == "deep":
        depth = b.pick([500, 1100, 5000, 20000])
        opener, closer = b.pick([("[", "]"), ('{"a":', "}")])
        body = body[:-1] + b', "deep": ' + (opener * depth + "1" + closer * depth).encode() + b"}"
    elif mutation == "wrong_type":
        body = json.dumps(b.value()).encode()
    elif mutation == "empty":
        body = b""
    elif mutation == "not_json":
        body = b.r.randbytes(b.r.randint(0, 64))
    elif mutation == "huge_number":
        body = body[:-1] + b', "n": 1' + b"0" * b.r.randint(20, 5000) + b"}"
    elif mutation == "duplicate_keys":
        body = body[:-1] + b", " + body[1:]
    if oversize:
        body = b" " * OVERSIZE + body
    headers = {"Content-Type": "application/json"}
    if encoding is not None:
        headers["Content-Encoding"] = {"gzip_corrupt": "gzip", "gzip_truncated": "gzip",
                                       "bomb": "gzip"}.get(encoding, encoding)
        if encoding in ("gzip", "gzip_truncated"):  # gzip_corrupt: plain JSON announced as gzip
            body = gzip.compress(body)
            if encoding == "gzip_truncated":
                body = body[: max(0, len(body) - b.r.randint(1, 12))]
        elif encoding == "deflate":
            body = zlib.compress(body)
        elif encoding == "bomb":
            body = BOMB
    note = f"{mutation}/{encoding}/seed={seed}" + ("/oversize" if oversize else "")
    return FuzzRequest(verb, body, headers, names, note)


@st.composite
def fuzz_requests(draw: Any) -> FuzzRequest:
    return build_request(
        verb=draw(st.sampled_from(VERBS)),
        mutation=draw(st.sampled_from(MUTATIONS)),
        encoding=draw(st.sampled_from(ENCODINGS)),
        oversize=draw(st.integers(0, 999)) == 537,  # rare (hypothesis favours 0 and bounds)
        seed=draw(st.integers(0, 2**32 - 1)),
        other_verb=draw(st.sampled_from(VERBS)),
    )


# --- what must come back -----------------------------------------------------------------


def problem_with(request: FuzzRequest, status: int, data: bytes) -> tuple[str | None, bool]:
    """(what is wrong with the answer or None, whether the request was rejected)."""
    if status >= 500:
        return f"HTTP {status}: {data[:200]!r}", True
    try:
        answer = json.loads(data)
    except ValueError:
        return f"HTTP {status} with a body that is not JSON: {data[:200]!r}", True
    if 400 <= status < 500:
        ok = isinstance(answer, dict) and isinstance(answer.get("error"), str) and answer["error"]
        return (None if ok else f"HTTP {status} without an error message: {answer!r:.200}"), True
    if status != 200:
        return f"unexpected HTTP {status}", True
    verb = request.verb
    if verb == "prioritize":
        good = isinstance(answer, list) and all(
            isinstance(h, dict) and isinstance(h.get("Host"), str)
            and type(h.get("Score")) is int and 0 <= h["Score"] <= 10 for h in answer)
        if good and request.names is not None and answer and (
                not {h["Host"] for h in answer} <= set(request.names)):
            return "prioritize scored a node the request did not name", False
        return (None if good else f"prioritize answer malformed: {answer!r:.200}"), False
    if verb == "preempt":
        good = isinstance(answer, dict) and isinstance(answer.get("NodeNameToMetaVictims"), dict)
        return (None if good else f"preempt answer malformed: {answer!r:.200}"), not (
            good and answer["NodeNameToMetaVictims"])
    if not isinstance(answer, dict) or not isinstance(answer.get("Error"), str):
        return f"{verb} answer without Error: {answer!r:.200}", True
    rejected = bool(answer["Error"])
    if verb == "filter" and not rejected:
        passed = answer.get("NodeNames")
        if passed is None and isinstance(answer.get("Nodes"), dict):
            passed = [n["metadata"]["name"] for n in answer["Nodes"].get("items") or []]
        if passed is None:
            return "filter answered neither NodeNames nor Nodes", False
        if request.names is not None and not set(passed) <= set(request.names):
            return "filter passed a node the request did not name", False
        rejected = not passed
    return None, rejected


@dataclass
class FuzzStats:
    requests: int = 0
    status: Counter[int] = field(default_factory=Counter)
    by_verb: Counter[str] = field(default_factory=Counter)
    server_errors: int = 0
    dropped: int = 0
    rejected: int = 0
    ledger_checks: int = 0
    ledger_changed: int = 0
    binds_ok: int = 0
    overcommits: int = 0
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        if len(self.problems) < 50:
            self.problems.append(text)

    @property
    def clean(self) -> bool:
        return not (self.server_errors or self.dropped or self.ledger_changed
                    or self.overcommits or self.problems)


def inspect(client: Client) -> bytes:
    status, data = client.request("GET", f"{PREFIX}/inspect")
    if status != 200:
        raise RuntimeError(f"/inspect answered {status}")
    return data


def overcommits(view: bytes) -> int:
    gpus = [g for n in json.loads(view)["nodes"] for g in n["gpus"]]
    return sum(1 for g in gpus
               if g["memory_reserved_mib"] > g["memory_mib"] or g["milli_reserved"] > 1000)


def fuzz(port: int, count: int, stats: FuzzStats, progress: Any = None) -> FuzzStats:
    """Send ``count`` generated requests, one connection, checking each answer."""
    client, probe = Client(port), Client(port)
    state = {"view": inspect(probe)}

    @settings(max_examples=count, phases=[Phase.generate], deadline=None, database=None,
              suppress_health_check=list(HealthCheck), derandomize=False)
    @given(fuzz_requests())
    def one(request: FuzzRequest) -> None:
        stats.requests += 1
        stats.by_verb[request.verb] += 1
        if progress is not None:
            progress()
        try:
            status, data = client.request("POST", f"{PREFIX}/{request.verb}", request.body,
                                          request.headers)
        except Dropped as exc:
            stats.dropped += 1
            stats.problem(f"dropped connection on {request.verb} ({request.note}): {exc}")
            return
        stats.status[status] += 1
        if status >= 500:
            stats.server_errors += 1
        wrong, rejected = problem_with(request, status, data)
        if wrong is not None:
            stats.problem(f"{request.verb} ({request.note}): {wrong}")
        if request.verb == "bind" and status == 200 and not rejected:
            stats.binds_ok += 1
            state["view"] = inspect(probe)
            return
        stats.rejected += rejected
        stats.ledger_checks += 1
        after = inspect(probe)
        if after != state["view"]:
            stats.ledger_changed += 1
            stats.problem(f"{request.verb} ({request.note}) changed the ledger or inventory")
            state["view"] = after

    one()
    stats.overcommits = overcommits(inspect(probe))
    client.close()
    probe.close()
    return stats


# --- /healthz while 50 MB requests are in flight ----------------------------------------


def big_filter_body(megabytes: int = 50) -> bytes:
    """Full Node objects as kube-scheduler sends them with nodeCacheCapable: false."""
    node = {"metadata": {"name": "", "labels": {f"label-{i}": "x" * 40 for i in range(20)},
                         "annotations": {f"note-{i}": "y" * 300 for i in range(10)}},
            "status": {"images": [{"names": [f"registry.example/image-{i}:" + "z" * 60],
                                   "sizeBytes": 123456789} for i in range(40)]}}
    one = len(json.dumps(node))
    items = []
    for i in range(megabytes * 1024 * 1024 // one):
        node["metadata"]["name"] = NODES[i] if i < len(NODES) else f"big-{i}"
        items.append(json.loads(json.dumps(node)))
    pod = {"metadata": {"name": "big", "namespace": "ml", "uid": "big-uid"},
           "spec": {"containers": [{"name": "c", "resources": {
               "limits": {"sparse.io/gpu-mem": "1024", "sparse.io/gpu-milli": "100"}}}]}}
    return json.dumps({"Pod": pod, "Nodes": {"items": items}}).encode()


def healthz_during(port: int, bodies: list[tuple[bytes, dict[str, str]]]) -> tuple[list[float],
                                                                                list[int]]:
    """Latencies of /healthz (one keep-alive connection, every 5 ms) while each body is
    posted as a filter; and the big requests' status codes."""
    latencies: list[float] = []
    statuses: list[int] = []
    for body, headers in bodies:
        done = threading.Event()

        def post(body: bytes = body, headers: dict[str, str] = headers,
                 done: threading.Event = done) -> None:
            try:
                statuses.append(Client(port, timeout=120).request(
                    "POST", f"{PREFIX}/filter", body, headers)[0])
            except Dropped:
                statuses.append(-1)
            finally:
                done.set()

        probe = Client(port)
        probe.request("GET", "/healthz")
        sender = threading.Thread(target=post)
        sender.start()
        while not done.is_set():
            started = time.perf_counter()
            probe.request("GET", "/healthz")
            latencies.append(time.perf_counter() - started)
            time.sleep(0.005)
        sender.join()
        probe.close()
    return latencies, statuses


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


# --- the long form -----------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.progress import Progress

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=50_000)
    parser.add_argument("--big-requests", type=int, default=3,
                        help="50 MB requests during which /healthz is timed")
    args = parser.parse_args(argv)
    console = Console()
    stats = FuzzStats()
    started = time.monotonic()
    with ExtenderProcess() as extender, Progress(console=console) as bar:
        task = bar.add_task("fuzzing the four verbs", total=args.requests)
        fuzz(extender.port, args.requests, stats, lambda: bar.advance(task))
    fuzz_s = time.monotonic() - started
    console.print("building the 50 MB bodies ...")
    big = big_filter_body(50)
    bomb = zlib.compress(b"\0" * (50 * 1024 * 1024), 9)
    with ExtenderProcess("--no-node-cache-capable") as extender:
        bodies = [(big, {"Content-Type": "application/json"})] * args.big_requests
        bodies.append((bomb, {"Content-Type": "application/json", "Content-Encoding": "deflate"}))
        latencies, big_statuses = healthz_during(extender.port, bodies)
    with ExtenderProcess() as extender:  # the default mode turns 50 MB away at its limit
        names_latencies, names_statuses = healthz_during(
            extender.port, [(big, {"Content-Type": "application/json"})])

    console.print(f"\n[bold]fuzzed requests[/]: {stats.requests:,} in {fuzz_s:.0f} s"
                  f" ({', '.join(f'{v} {n:,}' for v, n in sorted(stats.by_verb.items()))})")
    console.print("status codes: " + ", ".join(f"{code}: {n:,}" for code, n in
                                               sorted(stats.status.items())))
    console.print(f"5xx: {stats.server_errors}   dropped connections: {stats.dropped}")
    console.print(f"rejected requests: {stats.rejected:,}; ledger checked after"
                  f" {stats.ledger_checks:,} requests, changed by {stats.ledger_changed}")
    console.print(f"binds booked: {stats.binds_ok:,}   over-committed GPUs: {stats.overcommits}")
    console.print(f"/healthz during {args.big_requests} x {len(big) / 1e6:.0f} MB full-Nodes"
                  f" filters and a {len(bomb) / 1e3:.0f} kB deflate bomb (answers"
                  f" {big_statuses}): n={len(latencies)}, p50"
                  f" {percentile(latencies, 0.5) * 1e3:.1f} ms, p99"
                  f" {percentile(latencies, 0.99) * 1e3:.1f} ms, max"
                  f" {max(latencies) * 1e3:.1f} ms")
    console.print(f"/healthz during a 50 MB request in names mode (answer {names_statuses}):"
                  f" p99 {percentile(names_latencies, 0.99) * 1e3:.1f} ms")
    for text in stats.problems:
        console.print(f"[red]problem[/]: {text}")
    ok = stats.clean and percentile(latencies, 0.99) <= 0.1 and all(
        s in (200, 400, 413) for s in big_statuses + names_statuses)
    console.print("[green]clean[/]" if ok else "[red]NOT clean[/]")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
