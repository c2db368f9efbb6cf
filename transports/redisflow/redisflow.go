// Package redisflow keeps per-key flow-control state in Redis (SPEC §13), shared by every
// flowrun process that runs a pipeline against the same Redis. Each engine round (releases,
// lease renewals, admissions of many deliveries) is one pipeline: one round trip per batch, one
// atomic command per delivery and decision. Every key lives under `flowrun:{<pipeline>}:`, one
// Cluster slot per pipeline, and carries an expiry.
package redisflow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/redisconn"
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

// An engine round (releases, renewals, admissions) goes to Redis as one pipeline: one round
// trip for a whole batch, and one command per delivery and decision, so flow control costs a
// constant, small amount of Redis work per message. The keys:
//
//	c:<value>  concurrency key: a sorted set of lease tokens scored by expiry (ms)
//	t:<value>  throttle key (t without a key): a sorted set of start tokens scored by start
//	           time, a sliding window of one period
//	d:<value>  dedupe key: "run:<token>" while its handler runs (expiring with the lease),
//	           "done" for the window after an ack or drop
//
// The clock is Redis's own (TIME), so processes whose clocks disagree still agree on leases and
// windows. Per key, admissions are in the order the engine sends them: it sends no more of one
// key in a round than could be admitted (engine/flow.go), and Redis runs a pipeline in order.

// admitScript decides one admission atomically over its keys (any of dedupe, concurrency,
// throttle, in that order of KEYS as flagged by ARGV[2]): the dedupe claim first (a duplicate is
// known as one without waiting for its other keys), then each limit; on a wait, nothing is
// kept. ARGV: token, which keys ("dct" letters), lease ms, concurrency limit, throttle limit,
// throttle period ms. Returns -1 admitted, -2 duplicate, or the ms after which trying again
// may succeed (0: unknown).
var admitScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tok, which, lease = ARGV[1], ARGV[2], tonumber(ARGV[3])
local i, d, c, th = 1, nil, nil, nil
if string.find(which, 'd', 1, true) then d = KEYS[i]; i = i + 1 end
if string.find(which, 'c', 1, true) then c = KEYS[i]; i = i + 1 end
if string.find(which, 't', 1, true) then th = KEYS[i] end
-- A sorted set is full when it holds limit members scored above floor; older ones are purged
-- only when it looks full, so the common case is one ZCARD.
local function full(k, limit, floor)
  if redis.call('ZCARD', k) < limit then return false end
  redis.call('ZREMRANGEBYSCORE', k, '-inf', floor)
  return redis.call('ZCARD', k) >= limit
end
local function first(k)
  return tonumber(redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')[2])
end
local v = -1
-- A round sent again after a lost reply finds its own claim and lease: admitted already.
if d then
  local cur = redis.call('SET', d, 'run:' .. tok, 'NX', 'GET', 'PX', lease)
  if cur == 'done' then return -2 end
  if cur and cur ~= 'run:' .. tok then return math.max(redis.call('PTTL', d), 0) end
end
if c and not redis.call('ZSCORE', c, tok) and full(c, tonumber(ARGV[4]), now) then
  v = math.max(first(c) - now, 0)
end
local tp = tonumber(ARGV[6])
if v == -1 and th and full(th, tonumber(ARGV[5]), now - tp) then
  v = math.max(first(th) + tp - now, 0)
end
if v >= 0 then
  if d then redis.call('DEL', d) end
  return v
end
if c then
  redis.call('ZADD', c, now + lease, tok)
  redis.call('PEXPIRE', c, lease)
end
if th then
  redis.call('ZADD', th, now, tok)
  redis.call('PEXPIRE', th, tp)
end
return -1
`)

// renewScript keeps one running delivery's lease and claim alive. KEYS: the concurrency key
// and/or the dedupe key as ARGV[2] flags ("c", "d"); ARGV: token, flags, lease ms. Returns 0
// when one of them was gone (it expired and may have been taken over), else 1.
var renewScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tok, which, lease = ARGV[1], ARGV[2], tonumber(ARGV[3])
local i, ok = 1, 1
if string.find(which, 'c', 1, true) then
  if redis.call('ZSCORE', KEYS[i], tok) then
    redis.call('ZADD', KEYS[i], now + lease, tok)
    redis.call('PEXPIRE', KEYS[i], lease)
  else
    ok = 0
  end
  i = i + 1
end
if string.find(which, 'd', 1, true) then
  if redis.call('GET', KEYS[i]) == 'run:' .. tok then
    redis.call('PEXPIRE', KEYS[i], lease)
  else
    ok = 0
  end
end
return ok
`)

// dropClaimScript deletes a dedupe claim if it is still this delivery's (a retry or dead
// letter releases its key; a claim another process took over after an expiry stays).
var dropClaimScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == 'run:' .. ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// Round implements engine.FlowStore: one pipeline. Admissions beyond r.Max wait unsent.
func (s *Store) Round(ctx context.Context, r *engine.FlowRound) error {
	if len(r.Releases)+len(r.Renews)+len(r.Admits) == 0 {
		return nil
	}
	if err := s.round(ctx, r); err != nil {
		if !errors.Is(err, errNoScript) {
			return err
		}
		// A pipeline cannot fall back from EVALSHA to EVAL per command: load the scripts
		// (a restarted or failed-over server has none) and send the round again. Every
		// command of a round may be sent twice: releases and renewals are idempotent, and an
		// admission finds its own claim or lease and counts as made.
		for _, sc := range []*redis.Script{admitScript, renewScript, dropClaimScript} {
			if err := loadScript(ctx, s.c, sc); err != nil {
				return fmt.Errorf("redisflow: load script: %w", err)
			}
		}
		return s.round(ctx, r)
	}
	return nil
}

func (s *Store) round(ctx context.Context, r *engine.FlowRound) error {
	lease := ms(r.Lease)
	p := s.c.Pipeline()
	for _, x := range r.Releases {
		if x.Conc != "" {
			p.ZRem(ctx, s.prefix+x.Conc, x.Token)
		}
		switch {
		case x.Dedupe == "":
		case x.Window > 0:
			// Written whoever holds the claim by now: the message succeeded, so any copy is a
			// duplicate.
			p.Set(ctx, s.prefix+x.Dedupe, "done", x.Window)
		default:
			dropClaimScript.EvalSha(ctx, p, []string{s.prefix + x.Dedupe}, x.Token)
		}
	}
	renews := make([]*redis.Cmd, len(r.Renews))
	for i, x := range r.Renews {
		keys, which := make([]string, 0, 2), ""
		if x.Conc != "" {
			keys, which = append(keys, s.prefix+x.Conc), which+"c"
		}
		if x.Dedupe != "" {
			keys, which = append(keys, s.prefix+x.Dedupe), which+"d"
		}
		renews[i] = renewScript.EvalSha(ctx, p, keys, x.Token, which, lease)
	}
	n := min(len(r.Admits), max(r.Max, 0))
	admits := make([]redis.Cmder, n)
	for i, a := range r.Admits[:n] {
		if a.Conc == "" && a.Throttle == "" {
			// Dedupe alone needs no script: SET NX GET claims the key and says what held it.
			admits[i] = p.SetArgs(ctx, s.prefix+a.Dedupe, "run:"+a.Token, redis.SetArgs{Mode: "NX", Get: true, TTL: r.Lease})
			continue
		}
		keys, which := make([]string, 0, 3), ""
		if a.Dedupe != "" {
			keys, which = append(keys, s.prefix+a.Dedupe), which+"d"
		}
		if a.Conc != "" {
			keys, which = append(keys, s.prefix+a.Conc), which+"c"
		}
		if a.Throttle != "" {
			keys, which = append(keys, s.prefix+a.Throttle), which+"t"
		}
		admits[i] = admitScript.EvalSha(ctx, p, keys, a.Token, which, lease, a.ConcLimit, a.ThrottleLimit, ms(a.Period))
	}
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		if redisconn.IsNoScript(err) {
			return errNoScript
		}
		return fmt.Errorf("redisflow: round on %s: %w", s.prefix, err)
	}
	r.Lost = r.Lost[:0]
	for i, c := range renews {
		if v, _ := c.Int64(); v == 0 {
			r.Lost = append(r.Lost, i)
		}
	}
	r.Verdicts = r.Verdicts[:0]
	for i, a := range r.Admits {
		if i >= n {
			r.Verdicts = append(r.Verdicts, engine.FlowVerdict{Kind: engine.FlowWait})
			continue
		}
		var v int64
		switch c := admits[i].(type) {
		case *redis.StatusCmd: // SET NX GET: the old value, or nil when it claimed the key
			old, err := c.Result()
			switch {
			case errors.Is(err, redis.Nil):
				v = -1
			case err != nil:
				return fmt.Errorf("redisflow: claim %s: %w", a.Dedupe, err)
			case old == "done":
				v = -2
			case old == "run:"+a.Token:
				v = -1 // a round sent again: the claim is its own
			default:
				v = 0 // another delivery runs it; poll
			}
		case *redis.Cmd:
			var err error
			if v, err = c.Int64(); err != nil {
				return fmt.Errorf("redisflow: admit: %w", err)
			}
		}
		switch {
		case v == -1:
			r.Verdicts = append(r.Verdicts, engine.FlowVerdict{Kind: engine.FlowAdmitted})
		case v == -2:
			r.Verdicts = append(r.Verdicts, engine.FlowVerdict{Kind: engine.FlowDuplicate})
		default:
			r.Verdicts = append(r.Verdicts, engine.FlowVerdict{Kind: engine.FlowWait, RetryIn: time.Duration(v) * time.Millisecond})
		}
	}
	return nil
}

// errNoScript is a round that met a server without the scripts loaded.
var errNoScript = errors.New("redisflow: NOSCRIPT")

func loadScript(ctx context.Context, c redis.UniversalClient, sc *redis.Script) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
			return sc.Load(ctx, n).Err()
		})
	}
	return sc.Load(ctx, c).Err()
}

func ms(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return max(d.Milliseconds(), 1)
}
