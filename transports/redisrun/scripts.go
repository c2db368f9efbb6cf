package redisrun

import "github.com/redis/go-redis/v9"

// applyScript is every transition of a run (create, a step's finish, a failure, a timeout, a
// cancel, a retry) as one atomic script, so a crash leaves a run where it was, never advanced
// twice. A call carries only the parts its transition has, so the common finish (acknowledge,
// enter the next step, record the output) is a short call: Redis's cost of a script grows with
// its arguments.
//
// KEYS: 1 run, 2 out, 3 hist, 4 active counts, then one key per part present, in the parts'
// order below. ARGV: mode ("c" create, "a" apply, "r" apply to an ended run: a retry), run id,
// the run's expected visit ("0" for a create), the parts present (letters, in this order), and
// each part's arguments:
//
//	s  create: started_at ms (the runs index score)            KEY the runs index
//	a  acknowledge a delivery: group, entry id                 KEY its stream
//	o  end the timeout of the visit: its member                KEY the timeouts
//	d  dead letter: count, fields                              KEY the dead letter
//	e  enter a step: its name, then either
//	l    delayed: the member, its score                        KEY the delayed set
//	     or: count, the step message's fields after run and visit   KEY the step's stream
//	t    with a timeout: its member, its score                 KEY the timeouts
//	u  the output: step, JSON
//	x  the run ends: retention in ms
//
// then the run hash's fields (count, pairs) and the history's events (the rest). The entered
// step's message is "run", id, "visit", the visit + 1 and the fields given (as stepFields lays it
// out); entering a step also sets the hash's visit to the visit + 1 (a create's fields carry it).
//
// A stale apply (the run's visit is not the expected one, the run is gone, or it ended and
// this is not a retry) acknowledges the delivery and changes nothing: 0. The ended check
// keeps a transition decided on the run before it ended (a cancel racing its last step) from
// applying, since ending a run enters no step and so leaves the visit as it was. Create of a run
// that exists: 0. Else 1, or {1, started_at} when the run ends (its duration). Writes that can
// fail on a key's contents (XADD) come first, so such a failure changes nothing. Every argument
// and every table costs Redis on each call (four calls a run): hence the integer replies and the
// visit the script works out itself.
var applyScript = redis.NewScript(`
local mode, id, visit, opts = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local a, k, p = 5, 5, 1
local byte = string.byte
local o = byte(opts, 1)
local started, runs, group, ackid, ackkey, oldtimer, oldtkey, ds, dn, deadkey
local enter, es, en, stepkey, dmember, dscore, delayed, tmember, tscore, tkey, outstep, out, retention
if o == 115 then started, runs = ARGV[a], KEYS[k]; a, k, p = a + 1, k + 1, p + 1; o = byte(opts, p) end
if o == 97 then group, ackid, ackkey = ARGV[a], ARGV[a + 1], KEYS[k]; a, k, p = a + 2, k + 1, p + 1; o = byte(opts, p) end
if o == 111 then oldtimer, oldtkey = ARGV[a], KEYS[k]; a, k, p = a + 1, k + 1, p + 1; o = byte(opts, p) end
if o == 100 then dn, ds, deadkey = tonumber(ARGV[a]), a + 1, KEYS[k]; a, k, p = a + 1 + dn, k + 1, p + 1; o = byte(opts, p) end
if o == 101 then
  enter = ARGV[a]; a, p = a + 1, p + 1; o = byte(opts, p)
  if o == 108 then
    dmember, dscore, delayed = ARGV[a], ARGV[a + 1], KEYS[k]; a, k, p = a + 2, k + 1, p + 1; o = byte(opts, p)
  else
    en, es, stepkey = tonumber(ARGV[a]), a + 1, KEYS[k]; a, k = a + 1 + en, k + 1
  end
  if o == 116 then tmember, tscore, tkey = ARGV[a], ARGV[a + 1], KEYS[k]; a, k, p = a + 2, k + 1, p + 1; o = byte(opts, p) end
end
if o == 117 then outstep, out = ARGV[a], ARGV[a + 1]; a, p = a + 2, p + 1; o = byte(opts, p) end
if o == 120 then retention = ARGV[a]; a = a + 1 end
local hn, hs = tonumber(ARGV[a]), a + 1
local vs = hs + hn
local old
if mode == 'c' then
  if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
else
  old = redis.call('HMGET', KEYS[1], 'visit', 'step', 'status', 'started_at')
  local ended = old[3] ~= 'running' and old[3] ~= 'waiting' and old[3] ~= 'compensating'
  if old[1] ~= visit or (ended and mode ~= 'r') then
    if ackid then redis.call('XACK', ackkey, group, ackid) end
    return 0
  end
  started = old[4] or '0'
end
local nv = enter and tostring(tonumber(visit) + 1)
if deadkey then redis.call('XADD', deadkey, '*', unpack(ARGV, ds, ds + dn - 1)) end
if enter then
  if delayed then
    redis.call('ZADD', delayed, dscore, dmember)
  else
    redis.call('XADD', stepkey, '*', 'run', id, 'visit', nv, unpack(ARGV, es, es + en - 1))
  end
  if tkey then redis.call('ZADD', tkey, tscore, tmember) end
end
if nv and old then
  redis.call('HSET', KEYS[1], 'visit', nv, unpack(ARGV, hs, hs + hn - 1))
else
  redis.call('HSET', KEYS[1], unpack(ARGV, hs, hs + hn - 1))
end
if outstep then redis.call('HSET', KEYS[2], outstep, out) end
if vs <= #ARGV then redis.call('RPUSH', KEYS[3], unpack(ARGV, vs)) end
if runs then redis.call('ZADD', runs, started, id) end
local ostep = old and old[2]
if ostep and ostep ~= '' and (enter or retention) then redis.call('HINCRBY', KEYS[4], ostep, -1) end
if enter then redis.call('HINCRBY', KEYS[4], enter, 1) end
if retention then
  for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], retention) end
elseif old and old[3] ~= 'running' and old[3] ~= 'waiting' and old[3] ~= 'compensating' then
  for i = 1, 3 do redis.call('PERSIST', KEYS[i]) end
end
if oldtimer then redis.call('ZREM', oldtkey, oldtimer) end
if ackid then redis.call('XACK', ackkey, group, ackid) end
if retention then return {1, started} end
return 1
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
