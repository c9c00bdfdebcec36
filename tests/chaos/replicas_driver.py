"""Chaos driver: binds through three extender replicas (real processes) sharing Redis behind
real sentinels, with a replica kill -9, a Redis restart and a Sentinel failover in the middle.

Every pod goes filter -> bind on a random live replica, retried like the scheduler retries (a
new filter and bind after an ``Error``), and is deleted a little later (the driver releases it
as the kube watch would). Printed at the end: HTTP 5xx, over-commits (acknowledged bookings
that together exceed a GPU, and any GPU over capacity in the store), replica views that differ
from the store at quiescence, bookings left by binds that answered an error, acknowledged
binds whose booking vanished, and recovery times.

Short form (the normal test run): ``tests/chaos/test_replicas_chaos.py``. Long form::

    python tests/chaos/replicas_driver.py --binds 20000 --in-flight 1000   # make chaos-replicas
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

_TESTS = Path(__file__).resolve().parents[1]
if str(_TESTS) not in sys.path:
    sys.path.insert(0, str(_TESTS))
if str(_TESTS.parent) not in sys.path:
    sys.path.insert(0, str(_TESTS.parent))

from builders import free_port, pod  # noqa: E402

from bench.redis_server import SentinelGroup  # noqa: E402
from extender.ledger.connect import RedisOptions  # noqa: E402
from extender.ledger.health import raise_if_cancelling  # noqa: E402
from extender.ledger.redis import NotReplicated, RedisLedger  # noqa: E402
from extender.ledger.rules import from_json  # noqa: E402

GPU_MIB = 32768
TTL_S = 3.0
BIND_TIMEOUT_S = 1.0
EXPIRE_INTERVAL_S = 0.5
RETRY_FOR_S = 30.0  # how long a pod is retried before the driver gives up on it


@dataclass
class Figures:
    binds: int = 0  # bind requests answered
    bound: int = 0  # pods whose bind succeeded
    gave_up: int = 0  # pods never bound (every retry answered Error or did not fit)
    status: dict[int, int] = field(default_factory=dict)
    connection_errors: int = 0  # requests to a replica as it was killed
    over_commits: int = 0
    lost_acks: int = 0
    recoveries: dict[str, float] = field(default_factory=dict)
    views_differing: int = 0
    left_by_errors: int = 0
    store_over_capacity: int = 0
    seconds: float = 0.0

    @property
    def server_errors(self) -> int:
        return sum(n for code, n in self.status.items() if code >= 500)

    def lines(self) -> list[str]:
        rec = ", ".join(f"{k} {v:.2f} s" for k, v in self.recoveries.items()) or "none"
        return [
            f"binds answered            {self.binds} ({self.bound} pods bound, "
            f"{self.gave_up} gave up) in {self.seconds:.1f} s",
            f"HTTP status counts        {dict(sorted(self.status.items()))}",
            f"5xx                       {self.server_errors}",
            f"connection errors         {self.connection_errors} (requests on a killed replica)",
            f"over-commits              {self.over_commits} acknowledged,"
            f" {self.store_over_capacity} GPUs over capacity in the store",
            f"acknowledged, then lost   {self.lost_acks}",
            f"views != store            {self.views_differing} of 3 replicas at quiescence",
            f"left by error answers     {self.left_by_errors} bookings",
            f"recovery                  {rec}",
        ]


def node_conf(nodes: int, gpus: int) -> str:
    lines = ["nodes:"]
    for n in range(nodes):
        uuids = ", ".join(f"GPU-c{n}-{g}" for g in range(gpus))
        lines.append(f"  - {{name: c{n}, gpu: {gpus}, gpu-mem: 32, model: V100M32,"
                     f" uuids: [{uuids}]}}")
    return "\n".join(lines) + "\n"


class Replica:
    def __init__(self, workdir: Path, store: str, conf: Path, password: str, i: int) -> None:
        self.workdir, self.store, self.conf, self.password, self.i = (workdir, store, conf,
                                                                      password, i)
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.alive = False
        self.runs = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.runs += 1
        log = open(self.workdir / f"replica-{self.i}-{self.runs}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "extender", "serve", "--port", str(self.port),
             "--nodes", str(self.conf), "--store", self.store, "--log-format", "text",
             "--log-level", "warning", "--reservation-ttl", str(TTL_S),
             "--bind-timeout", str(BIND_TIMEOUT_S), "--expire-interval",
             str(EXPIRE_INTERVAL_S), "--redis-min-replicas", "1"],
            stdout=log, stderr=subprocess.STDOUT, cwd=_TESTS.parent,
            env={**os.environ, "SPARSE_REDIS_PASSWORD": self.password,
                 "PYTHONUNBUFFERED": "1"})

    def kill9(self) -> None:
        self.alive = False
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        self.alive = False
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    async def wait_ready(self, session: aiohttp.ClientSession, timeout_s: float = 60) -> float:
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            try:
                async with session.get(f"{self.url}/readyz") as r:
                    if r.status == 200:
                        self.alive = True
                        return time.monotonic() - started
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
        raise RuntimeError(f"replica {self.i} not ready; see {self.workdir}")


class Driver:
    def __init__(self, workdir: Path, binds: int, in_flight: int, nodes: int, gpus: int,
                 seed: int) -> None:
        self.workdir = workdir
        self.target = binds
        self.in_flight = in_flight
        self.nodes = [f"c{n}" for n in range(nodes)]
        self.capacity = {f"GPU-c{n}-{g}": (GPU_MIB, 1000) for n in range(nodes)
                         for g in range(gpus)}
        self.rng = random.Random(seed)
        self.fig = Figures()
        # One replica and --redis-min-replicas 1: a master cut off from it (the old one, just
        # after a failover) cannot acknowledge a booking.
        self.redis = SentinelGroup(replicas=1, sentinels=3, down_after_ms=2000,
                                   appendonly=True)
        conf = workdir / "nodes.yaml"
        conf.write_text(node_conf(nodes, gpus))
        self.replicas = [Replica(workdir, self.redis.url, conf, self.redis.password, i)
                         for i in range(3)]
        self.ledger = RedisLedger.from_url(self.redis.url,
                                           options=RedisOptions(password=self.redis.password,
                                                                socket_timeout_s=2.0,
                                                                min_replicas=1))
        self.used: dict[str, list[int]] = {}  # acknowledged live bookings per GPU
        self.live: dict[str, set[str]] = {}  # acknowledged live pods per GPU
        self.errored: set[str] = set()  # pods whose last bind answered an error
        self.acked: set[str] = set()
        self.released: set[str] = set()
        self.started = 0
        self.tasks: set[asyncio.Task[None]] = set()
        self.t0 = time.monotonic()

    # --- one pod --------------------------------------------------------------------------

    async def post(self, session: aiohttp.ClientSession, verb: str, body: dict) -> dict | None:
        live = [r for r in self.replicas if r.alive]
        replica = self.rng.choice(live or self.replicas)
        try:
            async with session.post(f"{replica.url}/scheduler/{verb}",
                                    data=json.dumps(body)) as r:
                self.fig.status[r.status] = self.fig.status.get(r.status, 0) + 1
                if verb == "bind":
                    self.fig.binds += 1
                return await r.json() if r.status == 200 else None
        except (TimeoutError, aiohttp.ClientError):
            self.fig.connection_errors += 1
            return None

    async def one_pod(self, session: aiohttp.ClientSession) -> None:
        shape = self.rng.random()
        if shape < 0.1:
            p = pod(gpus=1)
        else:
            p = pod(mem=self.rng.choice([2000, 4000, 8000]),
                    milli=self.rng.choice([100, 200, 300]))
        uid = p["metadata"]["uid"]
        started = time.monotonic()
        for attempt in range(1000):  # the scheduler retries, backing off, for a while
            if time.monotonic() - started > RETRY_FOR_S:
                break
            if attempt:
                await asyncio.sleep(min(1.0, 0.05 * 2 ** attempt))
            nodes = self.rng.sample(self.nodes, min(8, len(self.nodes)))
            out = await self.post(session, "filter", {"Pod": p, "NodeNames": nodes})
            if not out or out.get("Error") or not out.get("NodeNames"):
                continue
            node = out["NodeNames"][0]
            out = await self.post(session, "bind", {
                "PodName": p["metadata"]["name"], "PodNamespace": "ml", "PodUID": uid,
                "Node": node})
            if out is not None and (out.get("Error") == "" or "already bound" in out["Error"]):
                # (already bound: an earlier attempt succeeded, its answer was lost with a
                # killed replica)
                self.errored.discard(uid)
                await self.acknowledged(uid)
                return
            if out is not None:
                self.errored.add(uid)  # answered an error: it must leave nothing booked
        self.fig.gave_up += 1

    async def acknowledged(self, uid: str) -> None:
        self.fig.bound += 1
        self.acked.add(uid)
        booking = None
        for _ in range(100):
            try:
                booking = await self.ledger.get(uid)
                break
            except Exception:  # noqa: BLE001 - the store is failing over: ask again
                await asyncio.sleep(0.1)
        if booking is None:
            self.fig.lost_acks += 1
            self.note(f"acknowledged booking of {uid} not in the store")
            return
        for gpu, (mem, milli) in booking.per_gpu().items():
            self.live.setdefault(gpu, set()).add(uid)
            acc = self.used.setdefault(gpu, [0, 0])
            acc[0] += mem
            acc[1] += milli
            cap = self.capacity[gpu]
            if acc[0] > cap[0] or acc[1] > cap[1]:
                self.fig.over_commits += 1
                self.note(f"over-commit on {gpu} by {uid} ({booking.state}, node"
                          f" {booking.node}): {acc} of {cap}; live there:"
                          f" {sorted(self.live.get(gpu, ()))}")
        await asyncio.sleep(self.rng.uniform(0.2, 2.0))  # the pod runs, then is deleted
        dropped = None
        for _ in range(100):
            try:
                dropped = await self.ledger.release(uid)
                break
            except NotReplicated as exc:  # dropped on the master, copied late: done
                dropped = from_json(exc.reply[0]) if exc.reply else None
                break
            except Exception:  # noqa: BLE001
                await asyncio.sleep(0.1)
        if dropped is None:
            self.fig.lost_acks += 1  # its booking vanished while the pod was live
            self.note(f"booking of live pod {uid} vanished from the store")
        elif dropped.per_gpu() != booking.per_gpu():
            self.note(f"booking of {uid} read at its ack {booking.per_gpu()} differs from the"
                      f" one released {dropped.per_gpu()}")
        self.released.add(uid)
        for gpu, (mem, milli) in booking.per_gpu().items():
            self.live[gpu].discard(uid)
            self.used[gpu][0] -= mem
            self.used[gpu][1] -= milli

    def note(self, what: str) -> None:
        print(f"[chaos {time.monotonic() - self.t0:7.2f} s] {what}", file=sys.stderr)

    # --- chaos ----------------------------------------------------------------------------

    async def until_binds_work(self, session: aiohttp.ClientSession, started: float) -> float:
        """Seconds from ``started`` until a fresh pod binds again through a live replica."""
        while True:
            before = self.fig.bound
            await self.one_pod_probe(session)
            if self.fig.bound > before:
                return time.monotonic() - started
            await asyncio.sleep(0.05)

    async def one_pod_probe(self, session: aiohttp.ClientSession) -> None:
        p = pod(mem=1000, milli=10)
        out = await self.post(session, "filter", {"Pod": p, "NodeNames": self.nodes})
        if not out or out.get("Error") or not out.get("NodeNames"):
            return
        out = await self.post(session, "bind", {
            "PodName": p["metadata"]["name"], "PodNamespace": "ml",
            "PodUID": p["metadata"]["uid"], "Node": out["NodeNames"][0]})
        if out is not None and out.get("Error") == "":
            self.fig.bound += 1
            self.acked.add(p["metadata"]["uid"])
            await self.ledger.release(p["metadata"]["uid"])
            self.released.add(p["metadata"]["uid"])
        else:
            self.errored.add(p["metadata"]["uid"])

    async def kill_replica(self, session: aiohttp.ClientSession) -> None:
        victim = self.replicas[0]
        self.note("kill -9 replica 0")
        victim.kill9()
        started = time.monotonic()
        victim.start()
        await victim.wait_ready(session)
        self.fig.recoveries["replica kill -9 -> ready"] = time.monotonic() - started

    async def restart_redis(self, session: aiohttp.ClientSession) -> None:
        started = time.monotonic()
        self.note("restart the Redis master")
        await asyncio.to_thread(self.redis.restart_master)
        self.note("Redis master restarted")
        self.fig.recoveries["redis restart -> binding"] = await self.until_binds_work(
            session, started)

    async def failover(self, session: aiohttp.ClientSession) -> None:
        started = time.monotonic()
        await asyncio.to_thread(self.redis.wait_replicas_synced)
        self.note("sentinel failover")
        await asyncio.to_thread(self.redis.failover)
        self.note("failover done")
        self.fig.recoveries["sentinel failover -> binding"] = await self.until_binds_work(
            session, started)

    # --- the run --------------------------------------------------------------------------

    async def run(self, progress: Any = None) -> Figures:
        begun = time.monotonic()
        connector = aiohttp.TCPConnector(limit=self.in_flight + 50)
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            for r in self.replicas:
                r.start()
            for r in self.replicas:
                await r.wait_ready(session)
            events = {self.target // 4: self.kill_replica, self.target // 2: self.restart_redis,
                      3 * self.target // 4: self.failover}
            gate = asyncio.Semaphore(self.in_flight)
            follower = asyncio.create_task(self.follow_master())
            chaos: list[asyncio.Task[None]] = []

            async def limited() -> None:
                try:
                    await self.one_pod(session)
                finally:
                    gate.release()

            for n in range(self.target):
                await gate.acquire()
                if n in events:
                    chaos.append(asyncio.create_task(events[n](session)))
                task = asyncio.create_task(limited())
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
                if progress is not None and n % 500 == 0:
                    progress(n, self.target, self.fig)
            await asyncio.gather(*self.tasks)
            await asyncio.gather(*chaos)
            self.fig.seconds = time.monotonic() - begun
            await self.quiesce(session)
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
        return self.fig

    async def follow_master(self) -> None:
        """Like the extenders' health ping: keep the driver's own client on the master."""
        while True:
            with contextlib.suppress(Exception):  # failing over: next round
                await self.ledger.ping()
            # The Redis client can turn a cancellation into a timeout, which the line above
            # swallows: the loop would then outlive the run and hold up the loop's shutdown.
            raise_if_cancelling()
            await asyncio.sleep(0.5)

    async def quiesce(self, session: aiohttp.ClientSession) -> None:
        """Past every deadline and upkeep round, every replica's view against the store."""
        await asyncio.sleep(TTL_S + BIND_TIMEOUT_S + 3 * EXPIRE_INTERVAL_S)
        await self.ledger.ping()
        _, held = await self.ledger.snapshot()
        self.fig.left_by_errors = len([u for u in held if u in self.errored
                                       and u not in self.acked])
        per_gpu: dict[str, list[int]] = {}
        for r in held.values():
            for gpu, (mem, milli) in r.per_gpu().items():
                acc = per_gpu.setdefault(gpu, [0, 0])
                acc[0] += mem
                acc[1] += milli
        self.fig.store_over_capacity = sum(
            1 for gpu, (mem, milli) in per_gpu.items()
            if mem > self.capacity[gpu][0] or milli > self.capacity[gpu][1])
        want = {(uid, a.gpu, a.mem_mib, a.milli) for uid, r in held.items()
                for a in r.allocations}
        for replica in self.replicas:
            async with session.get(f"{replica.url}/scheduler/inspect") as resp:
                view = await resp.json()
            seen = {(p["uid"], g["uuid"], p["memory_mib"], p["milli"])
                    for n in view["nodes"] for g in n["gpus"] for p in g["pods"]}
            if seen != want:
                self.fig.views_differing += 1
                print(f"replica {replica.i}: view has {len(seen - want)} allocations the store"
                      f" lacks, lacks {len(want - seen)}; e.g. {sorted(seen ^ want)[:3]}",
                      file=sys.stderr)

    async def close(self) -> None:
        for r in self.replicas:
            r.stop()
        await self.ledger.close()
        self.redis.stop()


async def run_chaos(workdir: Path, binds: int, in_flight: int, nodes: int = 40, gpus: int = 8,
                    seed: int = 1, progress: Any = None) -> Figures:
    driver = Driver(workdir, binds, in_flight, nodes, gpus, seed)
    try:
        return await driver.run(progress)
    finally:
        await driver.close()


def main() -> None:
    import tempfile

    from rich.console import Console

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binds", type=int, default=20_000)
    parser.add_argument("--in-flight", type=int, default=1_000)
    parser.add_argument("--nodes", type=int, default=40)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("results/chaos"))
    args = parser.parse_args()
    console = Console(stderr=True)
    workdir = Path(tempfile.mkdtemp(prefix="sparse-chaos-"))

    def progress(n: int, total: int, fig: Figures) -> None:
        console.print(f"[dim]{n}/{total} pods started, {fig.bound} bound, "
                      f"{fig.server_errors} 5xx[/dim]")

    fig = asyncio.run(run_chaos(workdir, args.binds, args.in_flight, args.nodes, args.gpus,
                                args.seed, progress))
    args.out.mkdir(parents=True, exist_ok=True)
    report = "\n".join(fig.lines())
    (args.out / "replicas.txt").write_text(report + "\n")
    print(report)
    print(f"(replica logs under {workdir}; figures in {args.out / 'replicas.txt'})")
    failed = (fig.server_errors or fig.over_commits or fig.store_over_capacity
              or fig.views_differing or fig.left_by_errors)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
