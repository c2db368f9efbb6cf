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
	"strings"
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
//	t:<value>  throttle key (t without a key): a list of start times (ms), oldest first, at
//	           most limit of them: the sliding window of one period
//	d:<value>  dedupe key: "run:<token>" while its handler runs (expiring with the lease),
//	           "done" for the window after an ack or drop
//
// The clock is Redis's own (TIME), so processes whose clocks disagree still agree on leases and
// windows. Per key, admissions are in the order the engine sends them: it sends no more of one
// key in a round than could be admitted (engine/flowround.go), and Redis runs a pipeline in order.

// admitScript decides a round's admissions that have a concurrency key or a throttle, in
// order, each atomically over its keys: the dedupe claim first (a duplicate is known as one
// without waiting for its other keys), then each limit; on a wait nothing is kept. One script
// for the round rather than one per delivery: a script call costs Redis more than the few
// commands each admission runs. KEYS: every key of those admissions, once each (one slot).
// ARGV: lease ms, then two numbers per key, in KEYS order: a concurrency key's limit, a
// throttle key's limit and period ms (0 where unused), then per admission its token and its
// dedupe, concurrency and throttle key indexes (0: none); a key's numbers are sent, and parsed,
// once a round rather than once per admission. Returns per admission -1 admitted, -2
// duplicate, or the ms after which trying again may succeed (0: unknown).
var admitScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
-- Per concurrency key, the round counts members itself after one ZCARD; every key's expiry is
-- set once at the end of the round.
local count, expire = {}, {}
local function full(k, limit)
  if not count[k] then count[k] = redis.call('ZCARD', k) end
  if count[k] < limit then return false end
  redis.call('ZREMRANGEBYSCORE', k, '-inf', now)
  count[k] = redis.call('ZCARD', k)
  return count[k] >= limit
end
-- A throttle key is a list of start times, oldest first, holding at most limit of them. The
-- start is pushed first: the length RPUSH returns says whether the window can be full. When it
-- can, the start limit places back must be older than the period, else the push is undone.
-- Every 64th push drops the head's starts that have left the window, so a budget that never
-- fills keeps about one window of starts rather than limit.
local function throttle(k, limit, period)
  local n = redis.call('RPUSH', k, now)
  expire[k] = period
  if n > limit then
    if n > limit + 1 then redis.call('LTRIM', k, -(limit + 1), -1) end
    local h = tonumber(redis.call('LINDEX', k, 0))
    if h > now - period then
      redis.call('RPOP', k)
      return h + period - now
    end
    redis.call('LPOP', k)
  elseif n % 64 == 0 then
    local old = 0
    for _, h in ipairs(redis.call('LRANGE', k, 0, 63)) do
      if tonumber(h) > now - period then break end
      old = old + 1
    end
    if old > 0 then redis.call('LTRIM', k, old, -1) end
  end
  return -1
end
local function admit(tok, d, c, cl, th, tl, tp)
  -- A round sent again after a lost reply finds its own claim and lease: admitted already
  -- (its throttle start counts twice, which only makes the throttle stricter).
  if d then
    local cur = redis.call('SET', d, 'run:' .. tok, 'NX', 'GET', 'PX', lease)
    if cur == 'done' then return -2 end
    if cur and string.sub(cur, 1, 4) ~= 'run:' then
      -- Not a claim or a mark: something else wrote the key, which would otherwise hold its
      -- deliveries back for ever, silently.
      error({err = 'WRONGTYPE ' .. d .. ' holds a value flowrun did not write'})
    end
    if cur and cur ~= 'run:' .. tok then return math.max(redis.call('PTTL', d), 0) end
  end
  local v = -1
  if c and full(c, cl) and not redis.call('ZSCORE', c, tok) then
    v = math.max(tonumber(redis.call('ZRANGE', c, 0, 0, 'WITHSCORES')[2]) - now, 0)
  end
  if v == -1 and th then v = throttle(th, tl, tp) end
  if v >= 0 then
    if d then redis.call('DEL', d) end
    return v
  end
  if c then
    count[c] = count[c] + redis.call('ZADD', c, now + lease, tok)
    expire[c] = lease
  end
  return -1
end
local lim, per = {}, {}
for k = 1, #KEYS do
  lim[k], per[k] = tonumber(ARGV[2 * k]), tonumber(ARGV[2 * k + 1])
end
local out = {}
for i = 2 * #KEYS + 2, #ARGV, 4 do
  local d, c, th = tonumber(ARGV[i+1]), tonumber(ARGV[i+2]), tonumber(ARGV[i+3])
  out[#out + 1] = admit(ARGV[i], d > 0 and KEYS[d] or nil, c > 0 and KEYS[c] or nil, lim[c],
    th > 0 and KEYS[th] or nil, lim[th], per[th])
end
for k, ttl in pairs(expire) do redis.call('PEXPIRE', k, ttl) end
return out
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

// dropClaimsScript deletes each dedupe claim KEYS[i] if it is still the delivery's of token
// ARGV[i] (a retry or dead letter releases its key; a claim another process took over after an
// expiry stays).
var dropClaimsScript = redis.NewScript(`
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == 'run:' .. ARGV[i] then redis.call('DEL', KEYS[i]) end
end
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
		// admission finds its own claim or lease and counts as made. Its throttle start (a
		// time, not a token) is then counted twice: stricter for one period, never looser.
		for _, sc := range []*redis.Script{admitScript, renewScript, dropClaimsScript} {
			if err := loadScript(ctx, s.c, sc); err != nil {
				return fmt.Errorf("redisflow: load script: %w", redisconn.Fault(-1, "script|load", s.prefix, err))
			}
		}
		return s.round(ctx, r)
	}
	return nil
}

func (s *Store) round(ctx context.Context, r *engine.FlowRound) error {
	lease := ms(r.Lease)
	r.ReleaseFaults, r.RenewFaults, r.AdmitFaults = r.ReleaseFaults[:0], r.RenewFaults[:0], r.AdmitFaults[:0]
	p := s.c.Pipeline()
	releases, drops := s.queueReleases(ctx, p, r.Releases)
	renews := make([]*redis.Cmd, len(r.Renews))
	for i, x := range r.Renews {
		renews[i] = renewScript.EvalSha(ctx, p, s.leaseKeys(x.Conc, x.Dedupe), x.Token, renewWhich(x), lease)
	}
	n := min(len(r.Admits), max(r.Max, 0))
	leaseArg := any(lease)                // boxed once a round, not once a claim
	claims := make([]*redis.StatusCmd, n) // dedupe alone: SET NX GET claims the key and says what held it
	scripted := make([]int, 0, n)         // indexes of the admissions the script decides
	for i, a := range r.Admits[:n] {
		if a.Conc == "" && a.Throttle == "" {
			claims[i] = status(ctx, p, "set", s.prefix+a.Dedupe, "run:"+a.Token, "nx", "get", "px", leaseArg)
			continue
		}
		scripted = append(scripted, i)
	}
	var script *redis.Cmd
	if len(scripted) > 0 {
		script = s.admit(ctx, p, lease, r.Admits, scripted)
	}
	cmds, err := p.Exec(ctx)
	for _, c := range cmds {
		if redisconn.IsNoScript(c.Err()) {
			return errNoScript
		}
	}
	// A failure that passes by itself fails the round: the engine sends it again (every part
	// of a round is harmless twice). One that will not is reported for its own release,
	// renewal or admission, and the rest of the round counts.
	failed := false
	fault := func(faults *[]engine.Fault, index int, command, key string, err error) error {
		if err == nil || errors.Is(err, redis.Nil) {
			return nil
		}
		failed = true
		f := redisconn.Fault(index, command, key, err)
		if !f.Permanent {
			return fmt.Errorf("redisflow: round on %s: %w", s.prefix, f)
		}
		*faults = append(*faults, f)
		return nil
	}
	for _, x := range releases {
		if err := fault(&r.ReleaseFaults, x.index, x.command, x.key, x.cmd.Err()); err != nil {
			return err
		}
	}
	if drops.cmd != nil {
		if err := s.dropFaults(ctx, r, drops); err != nil {
			return err
		}
		failed = failed || drops.cmd.Err() != nil
	}
	for i, c := range renews {
		x := r.Renews[i]
		if err := fault(&r.RenewFaults, i, "evalsha", strings.Join(s.leaseKeys(x.Conc, x.Dedupe), " "), c.Err()); err != nil {
			return err
		}
	}
	for i, c := range claims {
		if c == nil || c.Err() == nil || errors.Is(c.Err(), redis.Nil) {
			continue // a claim made (nil) or found; the key's name is built for a fault only
		}
		if err := fault(&r.AdmitFaults, i, "set", s.prefix+r.Admits[i].Dedupe, c.Err()); err != nil {
			return err
		}
	}
	verdict := make([]int64, n)
	if script != nil {
		if err := s.verdicts(ctx, r, lease, script, scripted, verdict); err != nil {
			return err
		}
		failed = failed || script.Err() != nil
	}
	if err != nil && !failed && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("redisflow: round on %s: %w", s.prefix, redisconn.Fault(-1, "pipeline", s.prefix, err))
	}
	r.Lost = r.Lost[:0]
	for i, c := range renews {
		if v, err := c.Int64(); v == 0 && err == nil {
			r.Lost = append(r.Lost, i)
		}
	}
	s.claimVerdicts(r, claims, verdict)
	r.Verdicts = flowVerdicts(r.Verdicts[:0], len(r.Admits), verdict)
	return nil
}

// sentCmd is one queued release command, kept to name it in a fault.
type sentCmd struct {
	index        int
	command, key string
	cmd          redis.Cmder
}

// queueReleases queues each release's commands on p: the concurrency slot and the dedupe key,
// the claims to delete in one script call for the round.
func (s *Store) queueReleases(ctx context.Context, p redis.Pipeliner, xs []engine.FlowRelease) ([]sentCmd, drops) {
	var releases []sentCmd // made at the first key: a throttle alone releases none
	var drops drops
	var window time.Duration
	var windowArg any // boxed once for the round's windows (a pipeline has one)
	for i, x := range xs {
		if releases == nil && (x.Conc != "" || x.Dedupe != "") {
			releases = make([]sentCmd, 0, len(xs)-i)
		}
		if x.Conc != "" {
			k := s.prefix + x.Conc
			releases = append(releases, sentCmd{i, "zrem", k, integer(ctx, p, "zrem", k, x.Token)})
		}
		switch {
		case x.Dedupe == "":
		case x.Window > 0:
			if windowArg == nil || x.Window != window {
				window, windowArg = x.Window, any(ms(x.Window))
			}
			// Written whoever holds the claim by now: the message succeeded, so any copy is a
			// duplicate.
			k := s.prefix + x.Dedupe
			releases = append(releases, sentCmd{i, "set", k, status(ctx, p, "set", k, "done", "px", windowArg)})
		default:
			drops.index = append(drops.index, i)
			drops.keys = append(drops.keys, s.prefix+x.Dedupe)
			drops.tokens = append(drops.tokens, x.Token)
		}
	}
	if len(drops.index) > 0 {
		drops.cmd = dropClaimsScript.EvalSha(ctx, p, drops.keys, drops.tokens...)
	}
	return releases, drops
}

// drops is a round's dedupe claims to delete (retries and dead letters), sent as one
// dropClaimsScript call: a script call costs Redis several times the few commands each claim
// needs.
type drops struct {
	index  []int // into the round's Releases
	keys   []string
	tokens []any
	cmd    *redis.Cmd
}

// dropFaults reads the drops' outcome. When the script failed for good (a key of the wrong
// type, a permission the user lacks) Redis does not say which claim was at fault: each is
// deleted again by a script of its own (harmless twice), so that only those that need the bad
// key fail. A failure that may pass by itself fails the round.
func (s *Store) dropFaults(ctx context.Context, r *engine.FlowRound, d drops) error {
	err := d.cmd.Err()
	if err == nil || errors.Is(err, redis.Nil) {
		return nil
	}
	if f := redisconn.Fault(d.index[0], "evalsha", d.keys[0], err); !f.Permanent {
		return fmt.Errorf("redisflow: round on %s: %w", s.prefix, f)
	}
	each := []*redis.Cmd{d.cmd}
	if len(d.keys) > 1 {
		p := s.c.Pipeline()
		each = make([]*redis.Cmd, len(d.keys))
		for j, k := range d.keys {
			each[j] = dropClaimsScript.EvalSha(ctx, p, []string{k}, d.tokens[j])
		}
		_, _ = p.Exec(ctx) // each command's own error is read below
	}
	for j, c := range each {
		err := c.Err()
		if err == nil || errors.Is(err, redis.Nil) {
			continue
		}
		if redisconn.IsNoScript(err) {
			return errNoScript
		}
		f := redisconn.Fault(d.index[j], "evalsha", d.keys[j], err)
		if !f.Permanent {
			return fmt.Errorf("redisflow: round on %s: %w", s.prefix, f)
		}
		r.ReleaseFaults = append(r.ReleaseFaults, f)
	}
	return nil
}

// status and integer queue one command on p with its arguments as given: one allocation for
// them, where go-redis's SetArgs, Set and ZRem grow theirs, a cost paid per delivery here.
func status(ctx context.Context, p redis.Pipeliner, args ...any) *redis.StatusCmd {
	c := redis.NewStatusCmd(ctx, args...)
	_ = p.Process(ctx, c)
	return c
}

func integer(ctx context.Context, p redis.Pipeliner, args ...any) *redis.IntCmd {
	c := redis.NewIntCmd(ctx, args...)
	_ = p.Process(ctx, c)
	return c
}

// claimVerdicts reads what each dedupe-only SET NX GET claim found into verdict.
func (s *Store) claimVerdicts(r *engine.FlowRound, claims []*redis.StatusCmd, verdict []int64) {
	for i, c := range claims {
		if c == nil || c.Err() != nil && !errors.Is(c.Err(), redis.Nil) {
			continue
		}
		old, err := c.Result()
		switch {
		case errors.Is(err, redis.Nil):
			verdict[i] = -1
		case old == "done":
			verdict[i] = -2
		case old == "run:"+r.Admits[i].Token:
			verdict[i] = -1 // a round sent again: the claim is its own
		case !strings.HasPrefix(old, "run:"):
			// Not a claim or a mark (see admitScript).
			r.AdmitFaults = append(r.AdmitFaults, redisconn.Fault(i, "set", s.prefix+r.Admits[i].Dedupe,
				redisconn.ServerError("WRONGTYPE "+s.prefix+r.Admits[i].Dedupe+" holds a value flowrun did not write")))
		default:
			verdict[i] = 0 // another delivery runs it; poll
		}
	}
}

// flowVerdicts turns the script's and the claims' numbers into the engine's verdicts; an
// admission past the round's limit waits.
func flowVerdicts(out []engine.FlowVerdict, admits int, verdict []int64) []engine.FlowVerdict {
	for i := range admits {
		v := int64(0)
		if i < len(verdict) {
			v = verdict[i]
		}
		switch {
		case v == -1:
			out = append(out, engine.FlowVerdict{Kind: engine.FlowAdmitted})
		case v == -2:
			out = append(out, engine.FlowVerdict{Kind: engine.FlowDuplicate})
		default:
			out = append(out, engine.FlowVerdict{Kind: engine.FlowWait, RetryIn: time.Duration(v) * time.Millisecond})
		}
	}
	return out
}

// admit queues one admitScript call on p deciding the admissions of which, in order.
func (s *Store) admit(ctx context.Context, p redis.Pipeliner, lease int64, admits []engine.FlowAdmit, which []int) *redis.Cmd {
	var keys []string
	params := []any{lease} // two per key
	index := map[string]int{}
	// A pipeline's keys of one kind share their numbers: each is boxed once a round, not once
	// a key.
	boxed := map[int64]any{}
	box := func(n int64) any {
		b, ok := boxed[n]
		if !ok {
			b = n
			boxed[n] = b
		}
		return b
	}
	ix := func(k string, limit int, period time.Duration) int {
		if k == "" {
			return 0
		}
		i, ok := index[k]
		if !ok {
			keys = append(keys, s.prefix+k)
			params = append(params, box(int64(limit)), box(ms(period)))
			i = len(keys)
			index[k] = i
		}
		return i
	}
	args := make([]any, 0, 4*len(which))
	for _, i := range which {
		a := admits[i]
		var tok any = ""
		if a.Dedupe != "" || a.Conc != "" {
			tok = a.Token // a throttle alone holds nothing the token would name
		}
		args = append(args, tok, ix(a.Dedupe, 0, 0), ix(a.Conc, a.ConcLimit, 0), ix(a.Throttle, a.ThrottleLimit, a.Period))
	}
	return admitScript.EvalSha(ctx, p, keys, append(params, args...)...)
}

// verdicts reads the admission script's verdicts into verdict. When the script failed for good
// (a key of the wrong type, a permission the user lacks) Redis does not say which admission
// was at fault: each is decided again by a script of its own, so that only those that need the
// bad key fail. What the failed script took before it stopped is found again as the
// admission's own (a throttle start may count twice: stricter, never looser).
func (s *Store) verdicts(ctx context.Context, r *engine.FlowRound, lease int64, script *redis.Cmd, scripted []int, verdict []int64) error {
	err := script.Err()
	if err == nil {
		vs, err := script.Int64Slice()
		if err != nil || len(vs) != len(scripted) {
			return fmt.Errorf("redisflow: admit on %s: %d verdicts for %d admissions: %v", s.prefix, len(vs), len(scripted), err)
		}
		for j, i := range scripted {
			verdict[i] = vs[j]
		}
		return nil
	}
	if f := redisconn.Fault(0, "evalsha", "", err); !f.Permanent {
		return fmt.Errorf("redisflow: admit on %s: %w", s.prefix, f)
	}
	each := []*redis.Cmd{script}
	if len(scripted) > 1 {
		p := s.c.Pipeline()
		each = make([]*redis.Cmd, len(scripted))
		for j, i := range scripted {
			each[j] = s.admit(ctx, p, lease, r.Admits, []int{i})
		}
		_, _ = p.Exec(ctx) // each command's own error is read below
	}
	for j, c := range each {
		i := scripted[j]
		a := r.Admits[i]
		err := c.Err()
		if redisconn.IsNoScript(err) {
			return errNoScript
		}
		if err != nil {
			f := redisconn.Fault(i, "evalsha", strings.Join(s.leaseKeys(a.Conc, a.Dedupe, a.Throttle), " "), err)
			if !f.Permanent {
				return fmt.Errorf("redisflow: admit on %s: %w", s.prefix, f)
			}
			r.AdmitFaults = append(r.AdmitFaults, f)
			continue
		}
		vs, err := c.Int64Slice()
		if err != nil || len(vs) != 1 {
			return fmt.Errorf("redisflow: admit on %s: %d verdicts for 1 admission: %v", s.prefix, len(vs), err)
		}
		verdict[i] = vs[0]
	}
	return nil
}

// leaseKeys are the full names of the non-empty keys ks.
func (s *Store) leaseKeys(ks ...string) []string {
	out := make([]string, 0, len(ks))
	for _, k := range ks {
		if k != "" {
			out = append(out, s.prefix+k)
		}
	}
	return out
}

// renewWhich is renewScript's flags for a lease: "c" and/or "d", in KEYS order.
func renewWhich(x engine.FlowLease) string {
	which := ""
	if x.Conc != "" {
		which += "c"
	}
	if x.Dedupe != "" {
		which += "d"
	}
	return which
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
