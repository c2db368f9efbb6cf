package redisrun

import "github.com/redis/go-redis/v9"

// applyScript is every transition of a run (create, a step's finish, a failure, a timeout, a
// cancel, a retry) as one atomic script, so a crash leaves a run where it was, never advanced
// twice. KEYS (always ten, all in the workflow's slot; an unused one is the run key):
//
//	1 run  2 out  3 hist  4 runs  5 active  6 timeouts  7 delayed  8 the entered step's stream
//	9 the settled delivery's stream  10 the dead letter
//
// ARGV, read in order (counts before lists): mode ("c" create, "a" apply, "r" apply to an
// ended run: a retry), run id, the run's
// expected visit (apply), started_at ms (create: the runs index score), group, the delivery id to
// acknowledge ("" none), the timeout member this transition ends ("" none); the dead letter's
// fields (count, fields); the entered step ("" none), its message's fields (count, fields), a
// delayed member and score ("" "0": none), a timeout member and score ("" "0": none); the run
// hash's fields (count, pairs); the output (step, "1"/"0", JSON); the history (count, events);
// done ("1"/"0") and the retention in ms.
//
// A stale apply (the run's visit is not the expected one, the run is gone, or it ended and
// this is not a retry) acknowledges the delivery and changes nothing: {0}. The ended check
// keeps a transition decided on the run before it ended (a cancel racing its last step) from
// applying, since ending a run enters no step and so leaves the visit as it was. Create of a run that exists: {0}. Else {1, started_at}.
// Writes that can fail on a key's contents (XADD) come first, so such a failure changes nothing.
var applyScript = redis.NewScript(`
local a = 1
local function nxt() local v = ARGV[a]; a = a + 1; return v end
local function list() local n = tonumber(nxt()); local s = a; a = a + n; return s, n end
local mode, id, visit, started, group, ackid, oldtimer = nxt(), nxt(), nxt(), nxt(), nxt(), nxt(), nxt()
local function ack() if ackid ~= '' then redis.call('XACK', KEYS[9], group, ackid) end end
local old
if mode == 'c' then
  if redis.call('EXISTS', KEYS[1]) == 1 then return {0} end
else
  old = redis.call('HMGET', KEYS[1], 'visit', 'step', 'status', 'started_at')
  local ended = old[3] ~= 'running' and old[3] ~= 'waiting' and old[3] ~= 'compensating'
  if old[1] ~= visit or (ended and mode ~= 'r') then ack(); return {0} end
  started = old[4] or '0'
end
local ds, dn = list()
if dn > 0 then redis.call('XADD', KEYS[10], '*', unpack(ARGV, ds, ds + dn - 1)) end
local enter = nxt()
local fs, fn = list()
local dmember, dscore, tmember, tscore = nxt(), nxt(), nxt(), nxt()
if enter ~= '' then
  if dmember ~= '' then
    redis.call('ZADD', KEYS[7], dscore, dmember)
  else
    redis.call('XADD', KEYS[8], '*', unpack(ARGV, fs, fs + fn - 1))
  end
  if tmember ~= '' then redis.call('ZADD', KEYS[6], tscore, tmember) end
end
local hs, hn = list()
redis.call('HSET', KEYS[1], unpack(ARGV, hs, hs + hn - 1))
local outstep, has, out = nxt(), nxt(), nxt()
if has == '1' then redis.call('HSET', KEYS[2], outstep, out) end
local es, en = list()
if en > 0 then redis.call('RPUSH', KEYS[3], unpack(ARGV, es, es + en - 1)) end
if mode == 'c' then redis.call('ZADD', KEYS[4], started, id) end
local done, retention = nxt(), nxt()
local ostep = old and old[2]
if ostep and ostep ~= '' and (enter ~= '' or done == '1') then redis.call('HINCRBY', KEYS[5], ostep, -1) end
if enter ~= '' then redis.call('HINCRBY', KEYS[5], enter, 1) end
if done == '1' then
  for k = 1, 3 do redis.call('PEXPIRE', KEYS[k], retention) end
elseif old and old[3] ~= 'running' and old[3] ~= 'waiting' and old[3] ~= 'compensating' then
  for k = 1, 3 do redis.call('PERSIST', KEYS[k]) end
end
if oldtimer ~= '' then redis.call('ZREM', KEYS[6], oldtimer) end
ack()
return {1, started}
`)

// copyScript writes a retry's copy of a step message and acknowledges the original, atomically,
// and only while the original is still pending (a resent settlement writes no second copy); the
// retry goes into the run's history while the visit is still the run's (and the run active). KEYS: the step stream,
// the delayed set, the run, its history; ARGV: group, id, the message's visit, the history
// event, then "x" and the XADD fields, or "z", score and member. Returns 1 written, 0 already
// settled.
var copyScript = redis.NewScript(`
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 0 then return 0 end
if ARGV[5] == 'z' then
  redis.call('ZADD', KEYS[2], ARGV[6], ARGV[7])
else
  redis.call('XADD', KEYS[1], '*', unpack(ARGV, 6))
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
local r = redis.call('HMGET', KEYS[3], 'visit', 'status')
if r[1] == ARGV[3] and (r[2] == 'running' or r[2] == 'waiting' or r[2] == 'compensating') then
  redis.call('RPUSH', KEYS[4], ARGV[4])
end
return 1
`)

// moveDueScript moves up to ARGV[2] delayed step messages due at ARGV[1] (ms) from KEYS[1] onto
// their steps' streams KEYS[2..], whose step names are ARGV[4..] in the same order. One script,
// so two processes never move one message twice. A member naming no known step (a step removed
// by a reload) or that does not decode is kept, rescored ARGV[3] ms later so it never blocks the
// head. Returns {moved, kept}.
var moveDueScript = redis.NewScript(`
local streams = {}
for i = 4, #ARGV do streams[ARGV[i]] = KEYS[i - 2] end
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local moved, kept = 0, 0
for _, m in ipairs(due) do
  local ok, c = pcall(cjson.decode, m)
  local key = ok and type(c) == 'table' and type(c.f) == 'table' and #c.f >= 2 and streams[c.step]
  if key then
    redis.call('XADD', key, '*', unpack(c.f))
    redis.call('ZREM', KEYS[1], m)
    moved = moved + 1
  else
    redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + tonumber(ARGV[3]), m)
    kept = kept + 1
  end
end
return {moved, kept}
`)

// keepAliveScript resets the idle time of step messages this consumer still owns, so a slow
// handler's entry is not taken over by another process while it runs (as SPEC §4's claiming
// keep-alive): for each id in ARGV[3..], only when XPENDING names ARGV[2] its owner, XCLAIM … 0
// JUSTID (idle reset, delivery count unchanged). Returns the ids another consumer owns now.
var keepAliveScript = redis.NewScript(`
local other = {}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if p[1] then
    if p[1][2] == ARGV[2] then
      redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
    else
      other[#other + 1] = ARGV[i]
    end
  end
end
return other
`)
