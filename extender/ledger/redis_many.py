"""The Redis side of ``reserve_many``: one Lua script drops the released bookings and books
every reservation, or changes nothing. Same keys, amounts and change log as a single reserve
(``extender.ledger.redis``), so replicas following the log see a gang as N ordinary changes.

It shares ``changed``, ``drop``, ``conflict`` and ``book`` with the single-booking scripts
(``extender.ledger.scripts``: the same six KEYS, ARGV[1] the epoch base). Then: the number of
released UIDs and the UIDs; the number of reservations, then per reservation
``uid, doc, deadline, n`` and ``n`` times ``gpu, mem, milli, cap_mem, cap_milli``.
-> {'ok', version} | {'exists', uid} | {'conflict', gpu, unit, free}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from extender.ledger.rules import GpuCapacity, Reservation, to_json
from extender.ledger.scripts import ALLOCATION, CHANGED, DROP

RESERVE_MANY = CHANGED + DROP + ALLOCATION + """
local res, mem, milli, exp = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local p = 2
local released = {}
for i = 1, tonumber(ARGV[p]) do released[i] = ARGV[p + i] end
p = p + #released + 1
-- pending amounts per GPU: minus what the released bookings hold, plus what is booked here
local d_mem, d_milli = {}, {}
for _, uid in ipairs(released) do
  local doc = redis.call('HGET', res, uid)
  if doc then
    for _, a in ipairs(cjson.decode(doc)['allocations']) do
      d_mem[a['gpu']] = (d_mem[a['gpu']] or 0) - a['mem_mib']
      d_milli[a['gpu']] = (d_milli[a['gpu']] or 0) - a['milli']
    end
  end
end
local nres = tonumber(ARGV[p])
p = p + 1
local first = p
for i = 1, nres do
  if redis.call('HEXISTS', res, ARGV[p]) == 1 then return {'exists', ARGV[p]} end
  local n = tonumber(ARGV[p + 3])
  for j = 0, n - 1 do
    local b = p + 4 + j * 5
    local gpu = ARGV[b]
    local found = conflict(b, tonumber(redis.call('HGET', mem, gpu) or '0') + (d_mem[gpu] or 0),
                           tonumber(redis.call('HGET', milli, gpu) or '0') + (d_milli[gpu] or 0))
    if found then return found end
    d_mem[gpu] = (d_mem[gpu] or 0) + tonumber(ARGV[b + 1])
    d_milli[gpu] = (d_milli[gpu] or 0) + tonumber(ARGV[b + 2])
  end
  p = p + 4 + n * 5
end
for _, uid in ipairs(released) do
  if drop(uid) then changed(uid, '') end
end
p = first
local v = nil
for i = 1, nres do
  local uid, doc, deadline, n = ARGV[p], ARGV[p + 1], ARGV[p + 2], tonumber(ARGV[p + 3])
  for j = 0, n - 1 do book(p + 4 + j * 5) end
  redis.call('HSET', res, uid, doc)
  if deadline ~= '' then redis.call('ZADD', exp, deadline, uid) end
  v = changed(uid, doc)
  p = p + 4 + n * 5
end
return {'ok', v}  -- a number: tostring would print 1.7e+15 past an epoch base
"""


def script_args(reservations: Sequence[Reservation], release: Sequence[str],
                capacities: Mapping[str, GpuCapacity], epoch_base: int | None = None
                ) -> list[str | int | float]:
    args: list[str | int | float] = ["" if epoch_base is None else epoch_base,
                                     len(release), *release, len(reservations)]
    for r in reservations:
        per_gpu = r.per_gpu()
        args += [r.pod_uid, to_json(r).decode(),
                 "" if r.expires_at is None else r.expires_at, len(per_gpu)]
        for gpu, (mem, milli) in per_gpu.items():
            cap = capacities[gpu]
            args += [gpu, mem, milli, cap.mem_mib, cap.milli]
    return args
