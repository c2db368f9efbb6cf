// Package redisflow keeps per-key flow-control state in Redis (SPEC §13), shared by every
// flowrun process that runs a pipeline against the same Redis. Each engine round (releases,
// lease renewals, admissions of many deliveries) is one Lua script, so one round trip decides
// a whole batch atomically. Every key lives under `flowrun:{<pipeline>}:`, one Cluster slot per
// pipeline, and carries an expiry.
package redisflow

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/engine"
)

// Store is a pipeline's flow-control state in Redis.
type Store struct {
	c      redis.UniversalClient
	prefix string
}

var _ engine.FlowStore = (*Store)(nil)

// New returns the store of pipeline on c. c is the caller's; Store never closes it.
func New(c redis.UniversalClient, pipeline string) *Store {
	return &Store{c: c, prefix: Prefix(pipeline)}
}

// Prefix is the namespace of a pipeline's flow-control keys: "flowrun:{<pipeline>}:".
func Prefix(pipeline string) string { return "flowrun:{" + pipeline + "}:" }

// roundScript runs one engine round. The clock is Redis's own (TIME), so processes on machines
// whose clocks disagree still agree on leases and throttle windows.
//
//	KEYS   every key the round touches, each once
//	ARGV   lease ms, #releases, #renewals, #admissions, max admitted, then
//	       per release:   token, concurrency key index, dedupe key index, window ms (0: delete)
//	       per renewal:   token, concurrency key index, dedupe key index
//	       per admission: token, dedupe index, concurrency index, its limit, throttle index,
//	                      its limit, its period ms
//
// Key index 0 means none. A concurrency key is a sorted set of lease tokens scored by expiry;
// a throttle key a sorted set of start tokens scored by start time (a sliding window); a dedupe
// key a string, "run:<token>" while its handler runs and "done" for the window after an ack or
// drop (written whoever holds the claim by then: the message succeeded, so any copy is a
// duplicate). Admissions are decided in order; once one waits, later ones that share any of its keys
// wait too, so a key's deliveries start in the order they were read.
//
// Returns {verdicts, lost}: per admission -1 admitted, -2 duplicate, or the ms after which
// trying again may succeed (0: unknown); lost lists the 1-based renewals whose lease was gone.
var roundScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
local nrel, nren, nadm, maxn = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local i = 6
for _ = 1, nrel do
  local tok, c, d, win = ARGV[i], tonumber(ARGV[i+1]), tonumber(ARGV[i+2]), tonumber(ARGV[i+3])
  i = i + 4
  if c > 0 then redis.call('ZREM', KEYS[c], tok) end
  -- done is written whoever holds the claim now: the message succeeded, so any copy is a
  -- duplicate; a release deletes only its own claim.
  if d > 0 and win > 0 then
    redis.call('SET', KEYS[d], 'done', 'PX', win)
  elseif d > 0 and redis.call('GET', KEYS[d]) == 'run:' .. tok then
    redis.call('DEL', KEYS[d])
  end
end
local lost = {}
for r = 1, nren do
  local tok, c, d = ARGV[i], tonumber(ARGV[i+1]), tonumber(ARGV[i+2])
  i = i + 3
  local ok = true
  if c > 0 then
    if redis.call('ZSCORE', KEYS[c], tok) then
      redis.call('ZADD', KEYS[c], now + lease, tok)
      redis.call('PEXPIRE', KEYS[c], lease)
    else
      ok = false
    end
  end
  if d > 0 then
    if redis.call('GET', KEYS[d]) == 'run:' .. tok then
      redis.call('PEXPIRE', KEYS[d], lease)
    else
      ok = false
    end
  end
  if not ok then lost[#lost + 1] = r end
end
local out, blocked, admitted = {}, {}, 0
-- A sorted set (leases by expiry, starts by time) is full when it holds limit members scored
-- above floor; what is older is purged only when it looks full, so the common case is one ZCARD.
local function full(k, limit, floor)
  if redis.call('ZCARD', k) < limit then return false end
  redis.call('ZREMRANGEBYSCORE', k, '-inf', floor)
  return redis.call('ZCARD', k) >= limit
end
local function first(k)
  return tonumber(redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')[2])
end
for r = 1, nadm do
  local tok, d, c, cl, th, tl, tp = ARGV[i], tonumber(ARGV[i+1]), tonumber(ARGV[i+2]), tonumber(ARGV[i+3]), tonumber(ARGV[i+4]), tonumber(ARGV[i+5]), tonumber(ARGV[i+6])
  i = i + 7
  local v = -1
  if admitted >= maxn or blocked[d] or blocked[c] or blocked[th] then
    v = 0
  else
    -- The dedupe claim first (taken back below if another block says wait), so a duplicate
    -- is known as one without waiting for its other keys.
    if d > 0 and not redis.call('SET', KEYS[d], 'run:' .. tok, 'NX', 'PX', lease) then
      if redis.call('GET', KEYS[d]) == 'done' then
        v = -2
      else
        v = math.max(redis.call('PTTL', KEYS[d]), 0)
      end
    end
    if v == -1 and c > 0 and full(KEYS[c], cl, now) then
      v = math.max(first(KEYS[c]) - now, 0)
    end
    if v == -1 and th > 0 and full(KEYS[th], tl, now - tp) then
      v = math.max(first(KEYS[th]) + tp - now, 0)
    end
    if v >= 0 and d > 0 and redis.call('GET', KEYS[d]) == 'run:' .. tok then
      redis.call('DEL', KEYS[d])
    end
  end
  if v == -1 then
    admitted = admitted + 1
    if c > 0 then
      redis.call('ZADD', KEYS[c], now + lease, tok)
      redis.call('PEXPIRE', KEYS[c], lease)
    end
    if th > 0 then
      redis.call('ZADD', KEYS[th], now, tok)
      redis.call('PEXPIRE', KEYS[th], tp)
    end
  elseif v >= 0 then
    if d > 0 then blocked[d] = true end
    if c > 0 then blocked[c] = true end
    if th > 0 then blocked[th] = true end
  end
  out[r] = v
end
return {out, lost}
`)

// Round implements engine.FlowStore.
func (s *Store) Round(ctx context.Context, r *engine.FlowRound) error {
	var keys []string
	index := map[string]int{}
	ix := func(k string) string {
		if k == "" {
			return "0"
		}
		i, ok := index[k]
		if !ok {
			keys = append(keys, s.prefix+k)
			i = len(keys)
			index[k] = i
		}
		return strconv.Itoa(i)
	}
	args := make([]any, 0, 5+4*len(r.Releases)+3*len(r.Renews)+7*len(r.Admits))
	args = append(args, ms(r.Lease), len(r.Releases), len(r.Renews), len(r.Admits), r.Max)
	for _, x := range r.Releases {
		args = append(args, x.Token, ix(x.Conc), ix(x.Dedupe), ms(x.Window))
	}
	for _, x := range r.Renews {
		args = append(args, x.Token, ix(x.Conc), ix(x.Dedupe))
	}
	for _, a := range r.Admits {
		args = append(args, a.Token, ix(a.Dedupe), ix(a.Conc), a.ConcLimit, ix(a.Throttle), a.ThrottleLimit, ms(a.Period))
	}
	if len(keys) == 0 {
		return nil
	}
	res, err := roundScript.Run(ctx, s.c, keys, args...).Slice()
	if err != nil {
		return fmt.Errorf("redisflow: round on %s: %w", s.prefix, err)
	}
	if len(res) != 2 {
		return fmt.Errorf("redisflow: round on %s: unexpected reply %v", s.prefix, res)
	}
	verdicts, _ := res[0].([]any)
	lost, _ := res[1].([]any)
	if len(verdicts) != len(r.Admits) {
		return fmt.Errorf("redisflow: round on %s: %d verdicts for %d admissions", s.prefix, len(verdicts), len(r.Admits))
	}
	r.Verdicts = r.Verdicts[:0]
	for _, v := range verdicts {
		n, _ := v.(int64)
		switch {
		case n == -1:
			r.Verdicts = append(r.Verdicts, engine.FlowVerdict{Kind: engine.FlowAdmitted})
		case n == -2:
			r.Verdicts = append(r.Verdicts, engine.FlowVerdict{Kind: engine.FlowDuplicate})
		default:
			r.Verdicts = append(r.Verdicts, engine.FlowVerdict{Kind: engine.FlowWait, RetryIn: time.Duration(n) * time.Millisecond})
		}
	}
	r.Lost = r.Lost[:0]
	for _, v := range lost {
		if n, ok := v.(int64); ok {
			r.Lost = append(r.Lost, int(n)-1)
		}
	}
	return nil
}

func ms(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return max(d.Milliseconds(), 1)
}
