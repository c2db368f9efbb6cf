package redisstream

import "github.com/redis/go-redis/v9"

// moveDueScript moves up to ARGV[2] delayed copies due at ARGV[1] (wall-clock ms) from the
// delay zset KEYS[1] back onto the stream KEYS[2]. One script, so two workers never move one
// copy twice. A member that does not decode is moved back as a bare payload rather than lost
// or left blocking the head of the queue. Returns {moved, malformed, next due score or ""}.
var moveDueScript = redis.NewScript(`
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local bad = 0
for _, m in ipairs(due) do
  local ok, c = pcall(cjson.decode, m)
  if ok and type(c) == 'table' and type(c.f) == 'table' and #c.f >= 2 and #c.f % 2 == 0 then
    redis.call('XADD', KEYS[2], '*', unpack(c.f))
  else
    bad = bad + 1
    redis.call('XADD', KEYS[2], '*', 'payload', m)
  end
  redis.call('ZREM', KEYS[1], m)
end
local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {#due, bad, nxt[2] or ''}
`)

// keepAliveScript resets the idle time of entries this consumer still owns (SPEC §4): for each
// id in ARGV[3..], XPENDING tells the owner; only when it is ARGV[2] does XCLAIM … 0 JUSTID run,
// which resets idle without raising the delivery count. An id another worker has claimed is
// never taken back. Returns {kept ids, ids owned by another consumer}; ids in neither list are
// no longer pending (acknowledged, or deleted and dropped by Redis).
var keepAliveScript = redis.NewScript(`
local kept, other = {}, {}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if p[1] then
    if p[1][2] == ARGV[2] then
      redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
      kept[#kept + 1] = ARGV[i]
    else
      other[#other + 1] = ARGV[i]
    end
  end
end
return {kept, other}
`)

// settleScript writes copies and acknowledges their originals (see Source.scriptArgs for the
// layout). Per copy: if the entry is no longer pending, an earlier call settled it ("settled",
// nothing written again); else the copy is written and, only if that worked, the original is
// acknowledged ("ok"). A command that fails gives "command<TAB>Redis's error" and leaves that
// entry pending, while the other copies go on.
var settleScript = redis.NewScript(`
local stream, group = KEYS[1], ARGV[1]
local res = {}
local i = 2
local function failed(r) return type(r) == 'table' and r.err end
while i <= #ARGV do
  local kind, id, key, n = ARGV[i], ARGV[i+1], KEYS[tonumber(ARGV[i+2])], tonumber(ARGV[i+3])
  local out
  local p = redis.pcall('XPENDING', stream, group, id, id, 1)
  if failed(p) then
    out = 'xpending\t' .. p.err
  elseif #p == 0 then
    out = 'settled'
  else
    local w
    if kind == 'z' then
      w = redis.pcall('ZADD', key, ARGV[i+4], ARGV[i+5])
    else
      w = redis.pcall('XADD', key, '*', unpack(ARGV, i+4, i+3+n))
    end
    if failed(w) then
      out = (kind == 'z' and 'zadd' or 'xadd') .. '\t' .. w.err
    else
      local a = redis.pcall('XACK', stream, group, id)
      if failed(a) then out = 'xack\t' .. a.err else out = 'ok' end
    end
  end
  res[#res+1] = out
  i = i + 4 + n
end
return res
`)
