"""Redis ledger: several extender replicas share one Redis and can never over-commit a GPU.

Every change runs as one Lua script, so the capacity check and the booking are atomic on the
server. Keys (prefix ``sparse:ledger:``): ``res`` hash pod UID -> reservation JSON, ``mem`` and
``milli`` hashes GPU UUID -> booked amount, ``exp`` sorted set of reserved-but-unbound pods by
deadline, ``ver`` a counter bumped on every change (readers cache snapshots against it),
``log`` a stream of the last ``LOG_MAX`` changes with entry ID ``<ver>-0`` (fields ``uid`` and
``doc``, empty when dropped) so replicas follow each other's bookings incrementally. The log
write is protected (``pcall``): a failure there never fails a booking, it only leaves a gap
that readers detect and answer with a full snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import redis.asyncio as aioredis

from extender.errors import ReservationConflict
from extender.ledger import many, redis_many, rules
from extender.ledger.rules import STATE_RESERVED, GpuCapacity, Reservation
from extender.ledger.store import Change

LOG_MAX = 10_000
LOG_CATCH_UP = 2_000  # further behind than this, a snapshot is the cheaper read

# Bump the version and record the change; KEYS[5] = ver, KEYS[6] = log.
_LOG = f"""
local function changed(ver, log, uid, doc)
  local v = redis.call('INCR', ver)
  pcall(redis.call, 'XADD', log, 'MAXLEN', '~', {LOG_MAX}, v .. '-0', 'uid', uid, 'doc', doc)
  return v
end
"""

_RESERVE = _LOG + """
local res, mem, milli, exp, ver = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local uid, doc, deadline, n = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local existing = redis.call('HGET', res, uid)
if existing then return {'exists', existing} end
for i = 0, n - 1 do
  local b = 5 + i * 5
  local gpu = ARGV[b]
  local used_mem = tonumber(redis.call('HGET', mem, gpu) or '0')
  local used_milli = tonumber(redis.call('HGET', milli, gpu) or '0')
  if used_mem + tonumber(ARGV[b + 1]) > tonumber(ARGV[b + 3]) then
    return {'conflict', gpu, 'MiB', tostring(tonumber(ARGV[b + 3]) - used_mem)}
  end
  if used_milli + tonumber(ARGV[b + 2]) > tonumber(ARGV[b + 4]) then
    return {'conflict', gpu, 'milli', tostring(tonumber(ARGV[b + 4]) - used_milli)}
  end
end
for i = 0, n - 1 do
  local b = 5 + i * 5
  redis.call('HINCRBY', mem, ARGV[b], ARGV[b + 1])
  redis.call('HINCRBY', milli, ARGV[b], ARGV[b + 2])
end
redis.call('HSET', res, uid, doc)
if deadline ~= '' then redis.call('ZADD', exp, deadline, uid) end
return {'ok', tostring(changed(ver, KEYS[6], uid, doc))}
"""

# Shared by release and expire: drop one reservation and give its amounts back.
_DROP = """
local function drop(res, mem, milli, exp, uid)
  local doc = redis.call('HGET', res, uid)
  if not doc then return nil end
  local r = cjson.decode(doc)
  for _, a in ipairs(r['allocations']) do
    local m = redis.call('HINCRBY', mem, a['gpu'], string.format('%d', -a['mem_mib']))
    local c = redis.call('HINCRBY', milli, a['gpu'], string.format('%d', -a['milli']))
    if m == 0 and c == 0 then
      redis.call('HDEL', mem, a['gpu'])
      redis.call('HDEL', milli, a['gpu'])
    end
  end
  redis.call('HDEL', res, uid)
  redis.call('ZREM', exp, uid)
  return doc
end
"""

_RELEASE = (
    _LOG
    + _DROP
    + """
local doc = drop(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1])
if doc then changed(KEYS[5], KEYS[6], ARGV[1], '') end
return doc
"""
)

_EXPIRE = (
    _LOG
    + _DROP
    + """
local due = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', ARGV[1], 'LIMIT', 0, 500)
local dropped = {}
for _, uid in ipairs(due) do
  local doc = drop(KEYS[1], KEYS[2], KEYS[3], KEYS[4], uid)
  if doc then
    table.insert(dropped, doc)
    changed(KEYS[5], KEYS[6], uid, '')
  end
end
return dropped
"""
)

# Compare-and-set of one reservation document (confirm runs it).
_REPLACE = _LOG + """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current ~= ARGV[2] then return current or false end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('ZREM', KEYS[4], ARGV[1])
changed(KEYS[5], KEYS[6], ARGV[1], ARGV[3])
return 'ok'
"""


class RedisLedger:
    def __init__(self, client: aioredis.Redis, prefix: str = "sparse:ledger:") -> None:
        self._r = client
        self._keys = [f"{prefix}{k}" for k in ("res", "mem", "milli", "exp", "ver", "log")]
        self._reserve = client.register_script(_RESERVE)
        self._release = client.register_script(_RELEASE)
        self._expire = client.register_script(_EXPIRE)
        self._replace = client.register_script(_REPLACE)
        self._reserve_many = client.register_script(redis_many.RESERVE_MANY)

    @classmethod
    def from_url(cls, url: str, prefix: str = "sparse:ledger:") -> RedisLedger:
        return cls(aioredis.Redis.from_url(url), prefix)

    async def reserve(
        self, reservation: Reservation, capacities: Mapping[str, GpuCapacity]
    ) -> int:
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
        reply = await self._reserve(keys=self._keys, args=args)
        status = reply[0].decode()
        if status == "ok":
            return int(reply[1])
        if status == "exists":
            existing = rules.from_json(reply[1])
            if existing.same_booking(reservation):
                return await self.version()
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
        reply = await self._reserve_many(keys=self._keys, args=args)
        status = reply[0].decode()
        if status == "ok":
            return int(reply[1])
        if status == "exists":
            docs = await self._r.hmget(self._keys[0], [r.pod_uid for r in reservations])
            held = {r.pod_uid: rules.from_json(d) if d else None
                    for r, d in zip(reservations, docs, strict=True)}
            if many.already_booked(held, reservations):
                return await self.version()
            raise ReservationConflict("reservations changed concurrently; retry")
        gpu, unit, free = (x.decode() for x in reply[1:4])
        raise ReservationConflict(f"GPU {gpu}: not enough {unit} left ({free} free)", gpu)

    async def confirm(self, pod_uid: str) -> Reservation | None:
        for _ in range(16):
            raw = await self._r.hget(self._keys[0], pod_uid)
            if raw is None:
                return None
            current = rules.from_json(raw)
            if current.state != STATE_RESERVED:
                return current
            bound = current.bound()
            reply = await self._replace(
                keys=self._keys, args=[pod_uid, raw, rules.to_json(bound).decode()]
            )
            if reply == b"ok":
                return bound
        raise ReservationConflict(f"pod {pod_uid}: reservation kept changing during confirm")

    async def release(self, pod_uid: str) -> Reservation | None:
        raw = await self._release(keys=self._keys, args=[pod_uid])
        return rules.from_json(raw) if raw else None

    async def get(self, pod_uid: str) -> Reservation | None:
        raw = await self._r.hget(self._keys[0], pod_uid)
        return rules.from_json(raw) if raw else None

    async def snapshot(self) -> tuple[int, dict[str, Reservation]]:
        async with self._r.pipeline(transaction=True) as pipe:
            pipe.get(self._keys[4])
            pipe.hgetall(self._keys[0])
            version, docs = await pipe.execute()
        reservations = {k.decode(): rules.from_json(v) for k, v in docs.items()}
        return int(version or 0), reservations

    async def version(self) -> int:
        return int(await self._r.get(self._keys[4]) or 0)

    async def changes(self, since: int) -> tuple[int, list[Change]] | None:
        async with self._r.pipeline(transaction=True) as pipe:
            pipe.get(self._keys[4])
            pipe.xrange(self._keys[5], min=f"{since + 1}-0", max="+", count=LOG_CATCH_UP + 1)
            raw_version, entries = await pipe.execute()
        version = int(raw_version or 0)
        if since == version:
            return version, []
        if since > version or version - since > LOG_CATCH_UP or len(entries) != version - since:
            return None  # trimmed, a gap, or the ledger was reset: read a snapshot
        out: list[Change] = []
        for expected, (entry_id, fields) in enumerate(entries, start=since + 1):
            if entry_id != f"{expected}-0".encode():
                return None
            doc = fields.get(b"doc", b"")
            out.append((fields[b"uid"].decode(), rules.from_json(doc) if doc else None))
        return version, out

    async def expire(self, now: float) -> list[Reservation]:
        dropped = await self._expire(keys=self._keys, args=[now])
        return [rules.from_json(d) for d in dropped]

    async def close(self) -> None:
        await self._r.aclose()
