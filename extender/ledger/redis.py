"""Redis ledger: several extender replicas share one Redis and can never over-commit a GPU.

Every change runs as one Lua script (``extender.ledger.scripts``), so the capacity check, the
booking and the version number of the change are one atomic step on the server. Keys (prefix
``sparse:ledger:``): ``res`` hash pod UID -> reservation JSON, ``mem`` and ``milli`` hashes GPU
UUID -> booked amount, ``exp`` sorted set of reserved-but-unbound pods by deadline, ``ver`` a
counter bumped on every change, ``log`` a stream of the last ``LOG_MAX`` changes with entry ID
``<ver>-0`` (fields ``uid`` and ``doc``, empty when dropped) so replicas follow each other.

Any connection problem (refused, timed out, a read-only replica after a failover) raises
``LedgerUnavailable`` within the client's timeouts and counts a *disruption*: readers then
rebuild their view from a full snapshot, since what they cached may no longer be what Redis
holds (a restart without persistence, a failover that lost asynchronous writes).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis import exceptions as rex

from extender.errors import LedgerBusy, LedgerUnavailable, ReservationConflict
from extender.ledger import many, redis_many, rules, scripts
from extender.ledger.connect import RedisOptions, close_client, make_client
from extender.ledger.follow import ChangeFollower
from extender.ledger.rules import STATE_RESERVED, GpuCapacity, Reservation
from extender.ledger.scripts import LOG_MAX
from extender.ledger.store import Applied, Change

__all__ = ["LOG_MAX", "RedisLedger"]

LOG_CATCH_UP = 2_000  # further behind than this, a snapshot is the cheaper read
CONFIRM_ATTEMPTS = 16
POOL_EXHAUSTED = "No connection available"  # redis-py's BlockingConnectionPool, after its wait
ON_A_REPLICA = ("READONLY", "WAIT cannot be used with replica")  # our server was demoted

T = TypeVar("T")

_UNAVAILABLE = (rex.ConnectionError, rex.TimeoutError, rex.ReadOnlyError, OSError,
                TimeoutError)


class NotReplicated(LedgerUnavailable):
    """The change was made on the master but not copied to enough replicas in time: not
    acknowledged (it may yet be lost in a failover). ``reply`` is what the script answered."""

    def __init__(self, message: str, reply: Any) -> None:
        super().__init__(message)
        self.reply = reply


def _epoch_base() -> int:
    """First version number after a wipe: microseconds now, far above any earlier version."""
    return int(time.time() * 1_000_000)


class RedisLedger:
    def __init__(self, client: aioredis.Redis, prefix: str = "sparse:ledger:",
                 min_replicas: int = 0, replica_wait_ms: int = 500) -> None:
        self._r = client
        # Acknowledge a change only once this many replicas hold it (WAIT on the connection
        # that wrote it): a failover then cannot lose it, and a stale master cut off from its
        # replicas (split brain) cannot acknowledge anything.
        self.min_replicas = min_replicas
        self.replica_wait_ms = replica_wait_ms
        self._keys = [f"{prefix}{k}" for k in ("res", "mem", "milli", "exp", "ver", "log")]
        self._reserve = client.register_script(scripts.RESERVE)
        self._release = client.register_script(scripts.RELEASE)
        self._expire = client.register_script(scripts.EXPIRE)
        self._replace = client.register_script(scripts.REPLACE)
        self.disruptions = 0  # connection failures and master moves seen so far
        self._reserve_many = client.register_script(redis_many.RESERVE_MANY)
        # Reads the change log in the background once the app starts its task (run()).
        self.follower = ChangeFollower(self)

    @classmethod
    def from_url(cls, url: str, prefix: str = "sparse:ledger:",
                 options: RedisOptions | None = None) -> RedisLedger:
        holder: list[RedisLedger] = []
        options = options or RedisOptions()
        client = make_client(url, options,
                             on_master_change=lambda _: holder[0].disrupted())
        ledger = cls(client, prefix, options.min_replicas, options.replica_wait_ms)
        holder.append(ledger)
        return ledger

    def disrupted(self) -> None:
        self.disruptions += 1

    async def _call(self, what: str, fn: Callable[[], Awaitable[T]]) -> T:
        try:
            return await fn()
        except _UNAVAILABLE as exc:
            if isinstance(exc, rex.ConnectionError) and POOL_EXHAUSTED in str(exc):
                raise LedgerBusy(f"GPU ledger busy during {what}: no Redis connection free"
                                 " in time") from exc
            self.disruptions += 1
            raise LedgerUnavailable(f"GPU ledger (Redis) unavailable during {what}: "
                                    f"{type(exc).__name__}: {exc}") from exc
        except rex.ResponseError as exc:
            if not any(m in str(exc) for m in ON_A_REPLICA):
                raise
            self.disruptions += 1  # a master demoted under us (failover): re-read all
            raise LedgerUnavailable(f"GPU ledger (Redis) unavailable during {what}: the"
                                    " server is a replica now (failover)") from exc

    async def _script(self, script: Any, what: str, args: list[Any],
                      replicated: bool = True) -> Any:
        args = [_epoch_base(), *args]
        if not replicated or self.min_replicas <= 0:
            return await self._call(what, lambda: script(keys=self._keys, args=args))

        async def run_and_wait() -> tuple[Any, int]:
            async with self._r.pipeline(transaction=False) as pipe:
                await script(keys=self._keys, args=args, client=pipe)
                pipe.execute_command("WAIT", self.min_replicas, self.replica_wait_ms)
                reply, copies = await pipe.execute()
            return reply, int(copies)

        reply, copies = await self._call(what, run_and_wait)
        if copies < self.min_replicas:
            self.disruptions += 1  # maybe a master cut off from the others: re-read all
            raise NotReplicated(f"GPU ledger: {what} reached {copies} of"
                                f" {self.min_replicas} Redis replicas in time", reply)
        return reply

    # --- changes ---------------------------------------------------------------------------

    async def reserve_change(
        self, reservation: Reservation, capacities: Mapping[str, GpuCapacity]
    ) -> Applied:
        rules.validate(reservation, capacities)
        args: list[str | int | float] = [
            reservation.pod_uid,
            rules.to_json(reservation).decode(),
            "" if reservation.expires_at is None else reservation.expires_at,
        ]
        per_gpu = reservation.per_gpu()
        args.append(len(per_gpu))
        for gpu, (mem, milli) in per_gpu.items():
            cap = capacities[gpu]
            args += [gpu, mem, milli, cap.mem_mib, cap.milli]
        reply = await self._script(self._reserve, "reserve", args)
        status = reply[0].decode()
        if status == "ok":
            return Applied(int(reply[1]), reservation)
        if status == "exists":
            existing = rules.from_json(reply[1])
            if existing.same_booking(reservation):
                return Applied(0, existing)
            raise ReservationConflict(
                f"pod {reservation.pod_uid} already holds GPUs on {existing.node}"
            )
        gpu, unit, free = (x.decode() for x in reply[1:4])
        raise ReservationConflict(f"GPU {gpu}: not enough {unit} left ({free} free)", gpu)

    async def reserve_many(
        self, reservations: Sequence[Reservation], capacities: Mapping[str, GpuCapacity],
        release: Iterable[str] = (),
    ) -> int:
        release = list(release)
        many.validate_many(reservations, release, capacities)
        args = redis_many.script_args(reservations, release, capacities)
        reply = await self._script(self._reserve_many, "reserve_many", args[1:])
        status = reply[0].decode()
        if status == "ok":
            return int(reply[1])
        if status == "exists":
            docs = await self._call("reserve_many", lambda: self._r.hmget(
                self._keys[0], [r.pod_uid for r in reservations]))
            held = {r.pod_uid: rules.from_json(d) if d else None
                    for r, d in zip(reservations, docs, strict=True)}
            if many.already_booked(held, reservations):
                return await self.version()
            raise ReservationConflict("reservations changed concurrently; retry")
        gpu, unit, free = (x.decode() for x in reply[1:4])
        raise ReservationConflict(f"GPU {gpu}: not enough {unit} left ({free} free)", gpu)

    async def reserve(
        self, reservation: Reservation, capacities: Mapping[str, GpuCapacity]
    ) -> int:
        applied = await self.reserve_change(reservation, capacities)
        return applied.version or await self.version()

    async def confirm_change(self, pod_uid: str, booked: Reservation | None = None) -> Applied:
        if booked is not None and booked.pod_uid == pod_uid:  # what reserve stored: no read
            raw = rules.to_json(booked)
        else:
            raw = await self._call("confirm", lambda: self._r.hget(self._keys[0], pod_uid))
        for _ in range(CONFIRM_ATTEMPTS):
            if not raw:
                return Applied(0, None)
            current = rules.from_json(raw)
            if current.state != STATE_RESERVED:
                return Applied(0, current)
            bound = current.bound()
            reply = await self._script(self._replace, "confirm",
                                       [pod_uid, raw, rules.to_json(bound).decode()])
            if reply[0] == b"ok":
                return Applied(int(reply[1]), bound)
            raw = reply[1] if len(reply) > 1 else None
        raise ReservationConflict(f"pod {pod_uid}: reservation kept changing during confirm")

    async def confirm(self, pod_uid: str) -> Reservation | None:
        return (await self.confirm_change(pod_uid)).reservation

    async def release_change(self, pod_uid: str, only_if: Reservation | None = None) -> Applied:
        expected = "" if only_if is None else rules.to_json(only_if).decode()
        reply = await self._script(self._release, "release", [pod_uid, expected])
        if not reply:
            return Applied(0, None)
        return Applied(int(reply[1]), rules.from_json(reply[0]))

    async def release(self, pod_uid: str) -> Reservation | None:
        return (await self.release_change(pod_uid)).reservation

    async def expire(self, now: float) -> list[Reservation]:
        dropped = await self._script(self._expire, "expire", [now], replicated=False)
        return [rules.from_json(d) for d in dropped]

    # --- reads -----------------------------------------------------------------------------

    async def get(self, pod_uid: str) -> Reservation | None:
        raw = await self._call("get", lambda: self._r.hget(self._keys[0], pod_uid))
        return rules.from_json(raw) if raw else None

    async def snapshot(self) -> tuple[int, dict[str, Reservation]]:
        async def read() -> list[Any]:
            async with self._r.pipeline(transaction=True) as pipe:
                pipe.get(self._keys[4])
                pipe.hgetall(self._keys[0])
                return await pipe.execute()

        version, docs = await self._call("snapshot", read)
        reservations = {k.decode(): rules.from_json(v) for k, v in docs.items()}
        return int(version or 0), reservations

    async def version(self) -> int:
        return int(await self._call("version", lambda: self._r.get(self._keys[4])) or 0)

    async def changes(self, since: int) -> tuple[int, list[Change]] | None:
        async def read() -> list[Any]:
            async with self._r.pipeline(transaction=True) as pipe:
                pipe.get(self._keys[4])
                pipe.xrange(self._keys[5], min=f"{since + 1}-0", max="+",
                            count=LOG_CATCH_UP + 1)
                return await pipe.execute()

        if since < 0:
            return None
        raw_version, entries = await self._call("changes", read)
        version = int(raw_version or 0)
        if since == version:
            return version, []
        if since > version or version - since > LOG_CATCH_UP or len(entries) != version - since:
            return None  # trimmed, a gap, or the ledger was reset: read a snapshot
        out: list[Change] = []
        for expected, (entry_id, fields) in enumerate(entries, start=since + 1):
            if entry_id != f"{expected}-0".encode():
                return None
            out.append(scripts.log_change(fields))
        return version, out

    async def read_log(self, after: int, block_ms: int | None, count: int
                       ) -> tuple[list[tuple[bytes, dict[bytes, bytes]]], int]:
        """Log entries after version ``after`` (waiting up to ``block_ms`` for the first), and
        the version counter read right after them (a hole or a wipe shows against it)."""
        async def read() -> list[Any]:
            async with self._r.pipeline(transaction=False) as pipe:
                pipe.xread({self._keys[5]: f"{after}-0"}, count=count, block=block_ms)
                pipe.get(self._keys[4])
                return await pipe.execute()

        streams, raw_version = await self._call("change log", read)
        entries = streams[0][1] if streams else []
        return entries, int(raw_version or 0)

    async def ping(self) -> None:
        """Reachable? Behind Sentinel also: is the master still the one we write to? (A
        planned failover leaves our idle connections on the old master, now a replica.)"""
        find_master = getattr(self._r.connection_pool, "get_master_address", None)
        if find_master is not None:
            await self._call("master discovery", find_master)
        await self._call("ping", self._r.ping)

    async def close(self) -> None:
        await close_client(self._r)
