// Package redisflow keeps per-key flow-control state in Redis (SPEC §13), shared by every
// flowrun process that runs a pipeline against the same Redis. Each engine round (releases,
// lease renewals, admissions of many deliveries) is one pipeline: one round trip per batch, and
// a few commands and script calls per round. Every key lives under `flowrun:{<pipeline>}:`, one
// Cluster slot per pipeline, and carries an expiry.
package redisflow

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
// trip for a whole batch, its releases and dedupe claims in one script call (keysScript) and
// its other admissions in another (admitScript), so flow control costs a constant, small amount
// of work per message. The keys:
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
// commands each admission runs. KEYS: every key of those admissions, once each (one slot),
// grouped by their numbers. ARGV: lease ms; the fields every admission carries, in order, some
// of k (its token), d, c, t (its dedupe, concurrency and throttle key indexes, 0: none); the
// number of key groups, then per group, in KEYS order, its key count, limit (a concurrency or
// throttle key's) and period ms (a throttle key's; 0 where unused); then the admissions'
// fields. A key's numbers go once a round for its whole group (a pipeline's keys of one kind
// share them), and an admission sends only the fields its round uses: a throttle alone, one
// index. Returns a string of one byte per admission, 'a' admitted, 'd' duplicate, 'w' wait,
// then per wait, in order, the ms after which trying again may succeed (0: unknown): the reply
// is read in one piece, no verdict boxed.
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
local fields = ARGV[2]
-- Each key's numbers, from its group's.
local lim, per = {}, {}
local k, a = 0, 4
for _ = 1, tonumber(ARGV[3]) do
  local n, l, p = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  for j = k + 1, k + n do lim[j], per[j] = l, p end
  k, a = k + n, a + 3
end
-- at: each field's offset within an admission's.
local at = {}
for f = 1, #fields do at[string.sub(fields, f, f)] = f - 1 end
local function ix(i, f)
  if not at[f] then return 0 end
  return tonumber(ARGV[i + at[f]])
end
local codes, waits = {}, {}
for i = a, #ARGV, #fields do
  local tok = at.k and ARGV[i + at.k] or ''
  local d, c, th = ix(i, 'd'), ix(i, 'c'), ix(i, 't')
  local v = admit(tok, d > 0 and KEYS[d] or nil, c > 0 and KEYS[c] or nil, lim[c],
    th > 0 and KEYS[th] or nil, lim[th], per[th])
  if v == -1 then
    codes[#codes + 1] = 'a'
  elseif v == -2 then
    codes[#codes + 1] = 'd'
  else
    codes[#codes + 1] = 'w'
    waits[#waits + 1] = v
  end
end
for k, ttl in pairs(expire) do redis.call('PEXPIRE', k, ttl) end
local out = {table.concat(codes)}
for _, w in ipairs(waits) do out[#out + 1] = w end
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

// keysScript carries out a round's releases and the claims of its admissions that have a
// dedupe key alone, in that order: one script call for the round rather than a command per
// release and claim, which costs this process a command's building, writing and reply per
// message. Each key's command runs under pcall, so a key that fails (a wrong type, a command the
// ACL does not grant) fails only its own release or claim. KEYS: the release keys, then the
// claim keys. ARGV: lease ms, the number of release keys, then per release key an op and its
// argument ('z' token: ZREM the lease; 'm' window ms: mark the claim done, whoever holds it by
// now, the message succeeded; 'x' token: delete the claim if it is still the token's: a
// retry or dead letter releases its key, a claim another process took over after an expiry
// stays), then per claim key its token. Returns a string of one byte per key, in KEYS order,
// then the errors of the keys whose byte is 'e', in order: a release's byte is 'o'; a claim's
// 't' taken (or found its own: a round sent again), 'd' done, 'b' another delivery runs it.
// One string rather than a number per key: a round's reply is read in one piece.
var keysScript = redis.NewScript(`
local lease, nrel = ARGV[1], tonumber(ARGV[2])
local codes, errs = {}, {}
local function failed(r)
  if type(r) == 'table' and r.err then
    errs[#errs + 1] = r
    return true
  end
  return false
end
for i = 1, nrel do
  local k, op, a = KEYS[i], ARGV[2 * i + 1], ARGV[2 * i + 2]
  local r
  if op == 'z' then
    r = redis.pcall('ZREM', k, a)
  elseif op == 'm' then
    r = redis.pcall('SET', k, 'done', 'PX', a)
  else
    r = redis.pcall('GET', k)
    if r == 'run:' .. a then r = redis.pcall('DEL', k) end
  end
  if failed(r) then codes[i] = 'e' else codes[i] = 'o' end
end
local base = nrel + 2
for j = nrel + 1, #KEYS do
  local k, tok = KEYS[j], ARGV[base + j]
  local cur = redis.pcall('SET', k, 'run:' .. tok, 'NX', 'GET', 'PX', lease)
  if failed(cur) then
    codes[j] = 'e'
  elseif not cur or cur == 'run:' .. tok then
    codes[j] = 't'
  elseif cur == 'done' then
    codes[j] = 'd'
  elseif string.sub(cur, 1, 4) ~= 'run:' then
    -- Not a claim or a mark (see admitScript).
    failed({err = 'WRONGTYPE ' .. k .. ' holds a value flowrun did not write'})
    codes[j] = 'e'
  else
    codes[j] = 'b'
  end
end
local out = {table.concat(codes)}
for _, e in ipairs(errs) do out[#out + 1] = e end
return out
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
		for _, sc := range []*redis.Script{admitScript, renewScript, keysScript} {
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
	n := min(len(r.Admits), max(r.Max, 0))
	ks := s.queueKeys(ctx, p, lease, r.Releases, r.Admits[:n])
	renews := make([]*redis.Cmd, len(r.Renews))
	for i, x := range r.Renews {
		renews[i] = renewScript.EvalSha(ctx, p, s.leaseKeys(x.Conc, x.Dedupe), x.Token, renewWhich(x), lease)
	}
	var scripted []int // indexes of the admissions admitScript decides
	for i, a := range r.Admits[:n] {
		if a.Conc != "" || a.Throttle != "" {
			if scripted == nil {
				scripted = make([]int, 0, n-i)
			}
			scripted = append(scripted, i)
		}
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
	verdict := make([]int64, n)
	if ks.cmd != nil {
		if err := s.keysVerdicts(r, ks, verdict, fault); err != nil {
			return err
		}
		failed = failed || ks.cmd.Err() != nil
	}
	for i, c := range renews {
		x := r.Renews[i]
		if err := fault(&r.RenewFaults, i, "evalsha", strings.Join(s.leaseKeys(x.Conc, x.Dedupe), " "), c.Err()); err != nil {
			return err
		}
	}
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
	r.Verdicts = flowVerdicts(r.Verdicts[:0], len(r.Admits), verdict)
	return nil
}

// keysCall is a round's keysScript call and what each of its keys stands for.
type keysCall struct {
	keys  []string
	index []int // per key: its release's index into Releases, or its claim's into Admits
	// command names a release key's command in a fault: "zrem" (a lease), "set" (a done mark),
	// "evalsha" (a claim deleted if still its own); nrel keys are releases, the rest claims.
	command []string
	nrel    int
	cmd     *redis.Cmd
}

// queueKeys queues one keysScript call on p for the round's releases (their concurrency leases
// and dedupe keys) and the claims of its admissions that have a dedupe key alone; none when
// there are neither (a throttle alone releases nothing).
func (s *Store) queueKeys(ctx context.Context, p redis.Pipeliner, lease int64, xs []engine.FlowRelease, admits []engine.FlowAdmit) keysCall {
	var k keysCall
	nkeys, size := 0, 0
	for _, a := range admits {
		if a.Dedupe != "" && a.Conc == "" && a.Throttle == "" {
			nkeys, size = nkeys+1, size+len(a.Dedupe)
		}
	}
	claims := nkeys
	for _, x := range xs {
		if x.Conc != "" {
			nkeys, size = nkeys+1, size+len(x.Conc)
		}
		if x.Dedupe != "" {
			nkeys, size = nkeys+1, size+len(x.Dedupe)
		}
	}
	if nkeys == 0 {
		return k
	}
	names := keyNames{buf: make([]byte, 0, size+nkeys*len(s.prefix)), ends: make([]int, 0, nkeys)}
	k.index = make([]int, 0, nkeys)
	k.command = make([]string, 0, nkeys-claims)
	// Tokens go as pointers into the round (see evalSha): no boxing each.
	args := make([]any, 2, 2+2*(nkeys-claims)+claims)
	args[0] = lease
	var window time.Duration
	var windowArg any // boxed once for the round's windows (a pipeline has one)
	for i := range xs {
		x := &xs[i]
		if x.Conc != "" {
			names.add(s.prefix, x.Conc)
			k.index, k.command = append(k.index, i), append(k.command, "zrem")
			args = append(args, "z", &x.Token)
		}
		switch {
		case x.Dedupe == "":
			continue
		case x.Window > 0:
			if windowArg == nil || x.Window != window {
				window, windowArg = x.Window, any(ms(x.Window))
			}
			k.command = append(k.command, "set")
			args = append(args, "m", windowArg)
		default:
			k.command = append(k.command, "evalsha")
			args = append(args, "x", &x.Token)
		}
		names.add(s.prefix, x.Dedupe)
		k.index = append(k.index, i)
	}
	k.nrel = len(k.index)
	args[1] = k.nrel
	for i := range admits {
		if a := &admits[i]; a.Dedupe != "" && a.Conc == "" && a.Throttle == "" {
			names.add(s.prefix, a.Dedupe)
			k.index = append(k.index, i)
			args = append(args, &a.Token)
		}
	}
	k.keys = names.strings()
	k.cmd = evalSha(ctx, p, keysScript, k.keys, args)
	return k
}

// keysVerdicts reads keysScript's answer: a fault per release or claim whose key failed, and
// each claim's verdict into verdict. When the whole call failed for good (a permission the
// user lacks) every release and claim in it fails so.
func (s *Store) keysVerdicts(r *engine.FlowRound, k keysCall, verdict []int64,
	fault func(faults *[]engine.Fault, index int, command, key string, err error) error) error {
	command := func(j int) string {
		if j < k.nrel {
			return k.command[j]
		}
		return "set"
	}
	faults := func(j int) *[]engine.Fault {
		if j < k.nrel {
			return &r.ReleaseFaults
		}
		return &r.AdmitFaults
	}
	if err := k.cmd.Err(); err != nil {
		for j, key := range k.keys {
			if err := fault(faults(j), k.index[j], "evalsha", key, err); err != nil {
				return err
			}
		}
		return nil
	}
	vs, err := k.cmd.Slice()
	var codes string
	if err == nil && len(vs) > 0 {
		codes, _ = vs[0].(string)
	}
	if err != nil || len(codes) != len(k.keys) {
		return fmt.Errorf("redisflow: round on %s: answers %q for %d keys: %v", s.prefix, codes, len(k.keys), err)
	}
	errs := vs[1:]
	for j := range len(codes) {
		switch codes[j] {
		case 'o':
		case 't':
			verdict[k.index[j]] = -1
		case 'd':
			verdict[k.index[j]] = -2
		case 'b':
			verdict[k.index[j]] = 0 // another delivery runs it; poll
		case 'e':
			var e error
			if len(errs) > 0 {
				e, _ = errs[0].(error)
				errs = errs[1:]
			}
			if e == nil {
				return fmt.Errorf("redisflow: round on %s: no error for key %s", s.prefix, k.keys[j])
			}
			if err := fault(faults(j), k.index[j], command(j), k.keys[j], e); err != nil {
				return err
			}
		default:
			return fmt.Errorf("redisflow: round on %s: answer %q for key %s", s.prefix, codes[j], k.keys[j])
		}
	}
	return nil
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
	// The fields the round's admissions carry (admitScript): a pipeline's admissions all ask
	// for the same blocks, but one asking again for a late start asks for its throttle alone.
	var d, c, t bool
	for _, i := range which {
		a := &admits[i]
		d, c, t = d || a.Dedupe != "", c || a.Conc != "", t || a.Throttle != ""
	}
	fields := make([]byte, 0, 4)
	for _, f := range []struct {
		on bool
		b  byte
	}{{d || c, 'k'}, {d, 'd'}, {c, 'c'}, {t, 't'}} {
		if f.on {
			fields = append(fields, f.b)
		}
	}
	// Keys by group (their numbers), each key once: where an admission's keys are is noted as
	// a group and place, their indexes known once every group's size is.
	type nums struct{ limit, period int64 }
	type place struct{ group, at int32 } // at+1; 0: no key
	var groups []nums
	var members [][]string
	index := make(map[string]place, len(which)) // room for a key per admission: not grown a doubling at a time
	size := 0                                   // the names' bytes, prefixes aside
	put := func(k string, limit int, period time.Duration) place {
		if k == "" {
			return place{}
		}
		if pl, ok := index[k]; ok {
			return pl
		}
		// A round has a group or three (a pipeline's keys of one kind share their numbers):
		// a look along them, not a map.
		n := nums{int64(limit), ms(period)}
		g := int32(slices.Index(groups, n))
		if g < 0 {
			g = int32(len(groups))
			groups, members = append(groups, n), append(members, make([]string, 0, len(which)))
		}
		members[g] = append(members[g], k)
		size += len(k)
		pl := place{g, int32(len(members[g]))}
		index[k] = pl
		return pl
	}
	places := make([]place, 0, 3*len(which))
	for _, i := range which {
		a := &admits[i]
		places = append(places, put(a.Dedupe, 0, 0), put(a.Conc, a.ConcLimit, 0), put(a.Throttle, a.ThrottleLimit, a.Period))
	}
	names := keyNames{buf: make([]byte, 0, size+len(index)*len(s.prefix)), ends: make([]int, 0, len(index))}
	offset := make([]int, len(groups))
	args := make([]any, 0, 3+3*len(groups)+len(fields)*len(which))
	args = append(args, lease, string(fields), len(groups))
	for g, n := range groups {
		offset[g] = len(names.ends)
		for _, k := range members[g] {
			names.add(s.prefix, k)
		}
		args = append(args, len(members[g]), n.limit, n.period)
	}
	keyIndex := func(pl place) int {
		if pl.at == 0 {
			return 0
		}
		return offset[pl.group] + int(pl.at)
	}
	for j, i := range which {
		a := &admits[i]
		if d || c {
			var tok any = ""
			if a.Dedupe != "" || a.Conc != "" {
				tok = &a.Token // a throttle alone holds nothing the token would name
			}
			args = append(args, tok)
		}
		if d {
			args = append(args, keyIndex(places[3*j]))
		}
		if c {
			args = append(args, keyIndex(places[3*j+1]))
		}
		if t {
			args = append(args, keyIndex(places[3*j+2]))
		}
	}
	return evalSha(ctx, p, admitScript, names.strings(), args)
}

// evalSha queues sc's EVALSHA of keys and args on p, building its arguments once: the keys go
// as pointers into keys (go-redis writes a *string as its string), which boxes none of them,
// where Script.EvalSha boxes every key and copies the arguments twice.
func evalSha(ctx context.Context, p redis.Pipeliner, sc *redis.Script, keys []string, args []any) *redis.Cmd {
	all := make([]any, 3, 3+len(keys)+len(args))
	all[0], all[1], all[2] = "evalsha", sc.Hash(), len(keys)
	for i := range keys {
		all = append(all, &keys[i])
	}
	c := redis.NewCmd(ctx, append(all, args...)...)
	if len(keys) > 0 {
		c.SetFirstKeyPos(3) // a Cluster client routes by the first key
	}
	_ = p.Process(ctx, c)
	return c
}

// keyNames builds a round's full key names in one string, each name a slice of it: one
// allocation for the round's names rather than one a key.
type keyNames struct {
	buf  []byte
	ends []int
}

func (n *keyNames) add(prefix, k string) {
	n.buf = append(append(n.buf, prefix...), k...)
	n.ends = append(n.ends, len(n.buf))
}

func (n *keyNames) strings() []string {
	all, start := string(n.buf), 0
	out := make([]string, len(n.ends))
	for i, end := range n.ends {
		out[i], start = all[start:end], end
	}
	return out
}

// verdicts reads the admission script's verdicts into verdict. When the script failed for good
// (a key of the wrong type, a permission the user lacks) Redis does not say which admission
// was at fault: each is decided again by a script of its own, so that only those that need the
// bad key fail. What the failed script took before it stopped is found again as the
// admission's own (a throttle start may count twice: stricter, never looser).
func (s *Store) verdicts(ctx context.Context, r *engine.FlowRound, lease int64, script *redis.Cmd, scripted []int, verdict []int64) error {
	err := script.Err()
	if err == nil {
		return s.readAdmits(script, scripted, verdict)
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
		if err := s.readAdmits(c, scripted[j:j+1], verdict); err != nil {
			return err
		}
	}
	return nil
}

// readAdmits reads admitScript's answer for the admissions which into verdict: -1 admitted,
// -2 duplicate, else the wait's ms.
func (s *Store) readAdmits(c *redis.Cmd, which []int, verdict []int64) error {
	vs, err := c.Slice()
	var codes string
	if err == nil && len(vs) > 0 {
		codes, _ = vs[0].(string)
	}
	if err != nil || len(codes) != len(which) {
		return fmt.Errorf("redisflow: admit on %s: verdicts %q for %d admissions: %v", s.prefix, codes, len(which), err)
	}
	waits := vs[1:]
	for j, i := range which {
		switch codes[j] {
		case 'a':
			verdict[i] = -1
		case 'd':
			verdict[i] = -2
		case 'w':
			var ms int64
			if len(waits) > 0 {
				ms, _ = waits[0].(int64)
				waits = waits[1:]
			}
			verdict[i] = max(ms, 0)
		default:
			return fmt.Errorf("redisflow: admit on %s: verdict %q", s.prefix, codes[j])
		}
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
