"""The Redis ledger's Lua scripts, one constant each (each runs atomically on the server).

KEYS (always the same six): res, mem, milli, exp, ver, log. ARGV[1] of every script that may
change something is the *epoch base*: when ``ver`` does not exist (a fresh or wiped Redis) the
first change starts numbering at that base (the client's clock in microseconds; below
2^53, so exact in Lua's numbers), so versions
never repeat across a wipe and a replica's cached version can never be mistaken for a current
one. Every change returns its own version, read in the same atomic step: a replica applies its
own change to its cached view only when that number is exactly its cached version + 1.
"""

from __future__ import annotations

from extender.ledger import rules
from extender.ledger.store import Change

LOG_MAX = 10_000


def log_change(fields: dict[bytes, bytes]) -> Change:
    """A change-log entry as ``changed`` below writes it: the pod and its booking (None: the
    booking was dropped)."""
    doc = fields.get(b"doc", b"")
    return fields[b"uid"].decode(), rules.from_json(doc) if doc else None

# Bump the version and record the change in the log stream (entry ID <ver>-0). The log write
# is protected: a failure there only leaves a gap that readers answer with a snapshot.
CHANGED = f"""
local function changed(uid, doc)
  if redis.call('EXISTS', KEYS[5]) == 0 then redis.call('SET', KEYS[5], ARGV[1]) end
  local v = redis.call('INCR', KEYS[5])
  pcall(redis.call, 'XADD', KEYS[6], 'MAXLEN', '~', {LOG_MAX}, string.format('%d-0', v),
        'uid', uid, 'doc', doc)
  return v
end
"""

# One allocation at ARGV[b .. b + 4] (gpu, mem, milli, cap_mem, cap_milli): ``conflict`` is
# the answer when the GPU's used amounts plus it exceed a capacity (else nil); ``book`` adds it.
ALLOCATION = """
local function conflict(b, used_mem, used_milli)
  local gpu = ARGV[b]
  if used_mem + tonumber(ARGV[b + 1]) > tonumber(ARGV[b + 3]) then
    return {'conflict', gpu, 'MiB', tostring(tonumber(ARGV[b + 3]) - used_mem)}
  end
  if used_milli + tonumber(ARGV[b + 2]) > tonumber(ARGV[b + 4]) then
    return {'conflict', gpu, 'milli', tostring(tonumber(ARGV[b + 4]) - used_milli)}
  end
  return nil
end
local function book(b)
  redis.call('HINCRBY', KEYS[2], ARGV[b], ARGV[b + 1])
  redis.call('HINCRBY', KEYS[3], ARGV[b], ARGV[b + 2])
end
"""

# ARGV: base, uid, doc, deadline ('' = none), n, then n x (gpu, mem, milli, cap_mem, cap_milli).
# -> {'ok', version} | {'exists', doc} | {'conflict', gpu, unit, free}
RESERVE = CHANGED + ALLOCATION + """
local res, mem, milli, exp = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local uid, doc, deadline, n = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local existing = redis.call('HGET', res, uid)
if existing then return {'exists', existing} end
for i = 0, n - 1 do
  local b = 6 + i * 5
  local found = conflict(b, tonumber(redis.call('HGET', mem, ARGV[b]) or '0'),
                         tonumber(redis.call('HGET', milli, ARGV[b]) or '0'))
  if found then return found end
end
for i = 0, n - 1 do book(6 + i * 5) end
redis.call('HSET', res, uid, doc)
if deadline ~= '' then redis.call('ZADD', exp, deadline, uid) end
return {'ok', changed(uid, doc)}
"""

# Drop one reservation and give its amounts back (release and expire share it).
DROP = """
local function drop(uid)
  local res, mem, milli, exp = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
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

# ARGV: base, uid, only_if ('' = whatever is there). -> {doc, version} | {}
RELEASE = CHANGED + DROP + """
local current = redis.call('HGET', KEYS[1], ARGV[2])
if not current or (ARGV[3] ~= '' and current ~= ARGV[3]) then return {} end
local doc = drop(ARGV[2])
return {doc, changed(ARGV[2], '')}
"""

# ARGV: base, now. -> the dropped documents (at most 500 a call)
EXPIRE = CHANGED + DROP + """
local due = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', ARGV[2], 'LIMIT', 0, 500)
local dropped = {}
for _, uid in ipairs(due) do
  local doc = drop(uid)
  if doc then
    table.insert(dropped, doc)
    changed(uid, '')
  end
end
return dropped
"""

# Compare-and-set of one reservation document (confirm). ARGV: base, uid, expected, new.
# -> {'ok', version} | {'changed', current or false}
REPLACE = CHANGED + """
local current = redis.call('HGET', KEYS[1], ARGV[2])
if current ~= ARGV[3] then return {'changed', current or false} end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[4])
redis.call('ZREM', KEYS[4], ARGV[2])
return {'ok', changed(ARGV[2], ARGV[4])}
"""
