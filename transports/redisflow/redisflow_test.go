package redisflow

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// stores returns the Redis store and the in-process one: both must decide alike.
func stores(t *testing.T, pipeline string) map[string]engine.FlowStore {
	_, c := redistest.Fresh(t)
	return map[string]engine.FlowStore{"redis": New(c, pipeline), "mem": engine.NewMemFlowStore()}
}

func round(t *testing.T, s engine.FlowStore, r *engine.FlowRound) []engine.FlowVerdictKind {
	t.Helper()
	if r.Lease == 0 {
		r.Lease = 10 * time.Second
	}
	if r.Max == 0 {
		r.Max = 100
	}
	if err := s.Round(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	out := make([]engine.FlowVerdictKind, len(r.Verdicts))
	for i, v := range r.Verdicts {
		out[i] = v.Kind
	}
	return out
}

const (
	W = engine.FlowWait
	A = engine.FlowAdmitted
	D = engine.FlowDuplicate
)

func same(t *testing.T, what string, got []engine.FlowVerdictKind, want ...engine.FlowVerdictKind) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: verdicts %v, want %v", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: verdicts %v, want %v (0 wait, 1 admitted, 2 duplicate)", what, got, want)
		}
	}
}

func conc(tok, key string, limit int) engine.FlowAdmit {
	return engine.FlowAdmit{Token: tok, Conc: "c:" + key, ConcLimit: limit}
}

func TestConcurrencyKey(t *testing.T) {
	for name, s := range stores(t, "p1") {
		t.Run(name, func(t *testing.T) {
			got := round(t, s, &engine.FlowRound{Admits: []engine.FlowAdmit{
				conc("1", "a", 2), conc("2", "a", 2), conc("3", "a", 2), conc("4", "b", 2),
			}})
			same(t, "first round", got, A, A, W, A)
			// Order per key: nothing of a starts ahead of 3 while 3 waits.
			got = round(t, s, &engine.FlowRound{
				Releases: []engine.FlowRelease{{FlowLease: engine.FlowLease{Token: "1", Conc: "c:a"}}},
				Admits:   []engine.FlowAdmit{conc("3", "a", 2), conc("5", "a", 2)},
			})
			same(t, "after a release", got, A, W)
			// Max bounds what one round admits.
			got = round(t, s, &engine.FlowRound{Max: 1, Admits: []engine.FlowAdmit{conc("6", "x", 5), conc("7", "y", 5)}})
			same(t, "max", got, A, W)
		})
	}
}

func TestLeaseExpiresAndRenewal(t *testing.T) {
	for name, s := range stores(t, "p2") {
		t.Run(name, func(t *testing.T) {
			lease := 300 * time.Millisecond
			same(t, "take", round(t, s, &engine.FlowRound{Lease: lease, Admits: []engine.FlowAdmit{conc("1", "a", 1), conc("2", "b", 1)}}), A, A)
			// 1 is renewed, 2 is not (its holder crashed).
			time.Sleep(200 * time.Millisecond)
			r := &engine.FlowRound{Lease: lease, Renews: []engine.FlowLease{{Token: "1", Conc: "c:a"}}}
			round(t, s, r)
			if len(r.Lost) != 0 {
				t.Fatalf("renewal lost %v", r.Lost)
			}
			time.Sleep(200 * time.Millisecond)
			same(t, "after expiry", round(t, s, &engine.FlowRound{Lease: lease, Admits: []engine.FlowAdmit{conc("3", "a", 1), conc("4", "b", 1)}}), W, A)
			r = &engine.FlowRound{Lease: lease, Renews: []engine.FlowLease{{Token: "2", Conc: "c:b"}}}
			round(t, s, r)
			if len(r.Lost) != 1 || r.Lost[0] != 0 {
				t.Fatalf("an expired lease renewed: lost %v", r.Lost)
			}
		})
	}
}

func TestDedupe(t *testing.T) {
	for name, s := range stores(t, "p3") {
		t.Run(name, func(t *testing.T) {
			dd := func(tok, k string) engine.FlowAdmit { return engine.FlowAdmit{Token: tok, Dedupe: "d:" + k} }
			same(t, "claim", round(t, s, &engine.FlowRound{Admits: []engine.FlowAdmit{dd("1", "a"), dd("2", "a"), dd("3", "b")}}), A, W, A)
			// 1 succeeded (kept for the window), 3 retried (released).
			got := round(t, s, &engine.FlowRound{
				Releases: []engine.FlowRelease{
					{FlowLease: engine.FlowLease{Token: "1", Dedupe: "d:a"}, Window: time.Minute},
					{FlowLease: engine.FlowLease{Token: "3", Dedupe: "d:b"}},
				},
				Admits: []engine.FlowAdmit{dd("2", "a"), dd("4", "b")},
			})
			same(t, "after", got, D, A)
			// A stale release (another token) never unmarks a key.
			same(t, "stale", round(t, s, &engine.FlowRound{
				Releases: []engine.FlowRelease{{FlowLease: engine.FlowLease{Token: "1", Dedupe: "d:b"}}},
				Admits:   []engine.FlowAdmit{dd("5", "b")},
			}), W)
		})
	}
}

func TestThrottleSlidingWindow(t *testing.T) {
	for name, s := range stores(t, "p4") {
		t.Run(name, func(t *testing.T) {
			th := func(tok string) engine.FlowAdmit {
				return engine.FlowAdmit{Token: tok, Throttle: "t", ThrottleLimit: 2, Period: 300 * time.Millisecond}
			}
			r := &engine.FlowRound{Admits: []engine.FlowAdmit{th("1"), th("2"), th("3")}}
			same(t, "burst", round(t, s, r), A, A, W)
			if in := r.Verdicts[2].RetryIn; in <= 200*time.Millisecond || in > 300*time.Millisecond {
				t.Fatalf("retry in %v, want about the period", in)
			}
			time.Sleep(310 * time.Millisecond)
			same(t, "next window", round(t, s, &engine.FlowRound{Admits: []engine.FlowAdmit{th("3"), th("4"), th("5")}}), A, A, W)
		})
	}
}

// A throttle key holds start times, at most limit of them, and drops the ones that have left the
// window as it goes: a budget that never fills does not keep limit starts.
func TestThrottleWindowList(t *testing.T) {
	_, c := redistest.Fresh(t)
	ctx := context.Background()
	s := New(c, "p5")
	key := "flowrun:{p5}:t:x"
	th := func(tok string, limit int, period time.Duration) engine.FlowAdmit {
		return engine.FlowAdmit{Token: tok, Throttle: "t:x", ThrottleLimit: limit, Period: period}
	}
	burst := func(n, limit int, period time.Duration) []engine.FlowVerdictKind {
		r := &engine.FlowRound{Max: n}
		for i := range n {
			r.Admits = append(r.Admits, th(strconv.Itoa(i), limit, period))
		}
		return round(t, s, r)
	}
	// A full window: the push is undone, the retry is about the period.
	same(t, "fill", burst(3, 2, 200*time.Millisecond), A, A, W)
	if n := c.LLen(ctx, key).Val(); n != 2 {
		t.Fatalf("%d starts kept, want 2", n)
	}
	time.Sleep(210 * time.Millisecond)
	same(t, "next window", burst(3, 2, 200*time.Millisecond), A, A, W)
	if n := c.LLen(ctx, key).Val(); n != 2 {
		t.Fatalf("%d starts kept after the window moved, want 2", n)
	}
	if ttl := c.PTTL(ctx, key).Val(); ttl <= 0 || ttl > 200*time.Millisecond {
		t.Fatalf("expiry %v, want the period", ttl)
	}
	// A lower limit (a reloaded config) keeps only what it needs.
	time.Sleep(210 * time.Millisecond)
	same(t, "limit lowered", burst(2, 1, 200*time.Millisecond), A, W)
	if n := c.LLen(ctx, key).Val(); n != 1 {
		t.Fatalf("%d starts kept at limit 1, want 1", n)
	}
	// A large budget that never fills: starts older than the period are dropped as new ones
	// come (every 64th), so the list holds about one window, not the limit.
	for range 4 {
		time.Sleep(60 * time.Millisecond)
		same(t, "large budget", burst(64, 1_000_000, 50*time.Millisecond), slices.Repeat([]engine.FlowVerdictKind{A}, 64)...)
	}
	if n := c.LLen(ctx, key).Val(); n > 128 {
		t.Fatalf("%d starts kept for a 50ms window of at most 64, want at most 128", n)
	}
}

// Every key the store writes carries an expiry and lives in the pipeline's slot.
func TestKeysExpireAndShareASlot(t *testing.T) {
	_, c := redistest.Fresh(t)
	s := New(c, "orders")
	round(t, s, &engine.FlowRound{Admits: []engine.FlowAdmit{
		{Token: "1", Dedupe: "d:x", Conc: "c:x", ConcLimit: 1, Throttle: "t:x", ThrottleLimit: 5, Period: time.Second},
	}})
	round(t, s, &engine.FlowRound{Releases: []engine.FlowRelease{{FlowLease: engine.FlowLease{Token: "2", Dedupe: "d:y"}}},
		Admits: []engine.FlowAdmit{{Token: "2", Dedupe: "d:y"}}})
	round(t, s, &engine.FlowRound{Releases: []engine.FlowRelease{{FlowLease: engine.FlowLease{Token: "2", Dedupe: "d:y"}, Window: time.Hour}}})
	keys := c.Keys(context.Background(), "*").Val()
	if len(keys) != 4 {
		t.Fatalf("keys %v", keys)
	}
	for _, k := range keys {
		if k[:len("flowrun:{orders}:")] != "flowrun:{orders}:" {
			t.Fatalf("key %q outside the pipeline's namespace", k)
		}
		if ttl := c.PTTL(context.Background(), k).Val(); ttl <= 0 {
			t.Fatalf("key %q has no expiry (%v)", k, ttl)
		}
	}
}

func TestCluster(t *testing.T) {
	srv := redistest.StartCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr}})
	defer c.Close()
	s := New(c, "payouts")
	got := round(t, s, &engine.FlowRound{Admits: []engine.FlowAdmit{
		{Token: "1", Dedupe: "d:a", Conc: "c:a", ConcLimit: 1, Throttle: "t:x", ThrottleLimit: 10, Period: time.Second},
		{Token: "2", Dedupe: "d:b", Conc: "c:a", ConcLimit: 1},
		{Token: "3", Dedupe: "d:c", Conc: "c:zz", ConcLimit: 1},
	}})
	same(t, "cluster", got, A, W, A)
}

// The ACL line for flow control (docs/acl.md) is exactly enough: every kind of round runs as a user
// granted only it, and ACL LOG stays empty.
func TestACLLine(t *testing.T) {
	srv, admin := redistest.Fresh(t)
	ctx := context.Background()
	admin.Do(ctx, "ACL", "LOG", "RESET")
	line := "+ping +set +get +del +pttl +pexpire +zadd +zrem +zcard +zscore +zrange +zremrangebyscore +rpush +rpop +lpop +lindex +lrange +ltrim +time +evalsha +eval +script|load ~flowrun:{jobs}:*"
	args := []any{"ACL", "SETUSER", "flowacl", "reset", "on", ">pw"}
	for _, f := range strings.Fields(line) {
		args = append(args, f)
	}
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatal(err)
	}
	defer admin.Do(ctx, "ACL", "DELUSER", "flowacl")
	admin.ScriptFlush(ctx)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "flowacl", Password: "pw"})
	defer c.Close()
	s := New(c, "jobs")
	full := engine.FlowAdmit{Token: "1", Dedupe: "d:a", Conc: "c:a", ConcLimit: 1, Throttle: "t:a", ThrottleLimit: 5, Period: time.Second}
	same(t, "admit", round(t, s, &engine.FlowRound{Admits: []engine.FlowAdmit{full, {Token: "2", Dedupe: "d:b"}, {Token: "3", Dedupe: "d:a", Conc: "c:a", ConcLimit: 1}}}), A, A, W)
	// Every throttle path: a full window (LINDEX, RPOP), a window that moved on (LPOP), the
	// 64th push of a window that never fills (LRANGE, LTRIM); the lengths show each ran.
	th := func(n, limit int) {
		r := &engine.FlowRound{Max: n}
		for i := range n {
			r.Admits = append(r.Admits, engine.FlowAdmit{Token: strconv.Itoa(i), Throttle: "t:b", ThrottleLimit: limit, Period: 300 * time.Millisecond})
		}
		round(t, s, r)
	}
	llen := func(want int64) {
		t.Helper()
		if n := admin.LLen(ctx, "flowrun:{jobs}:t:b").Val(); n != want {
			t.Fatalf("throttle list of %d, want %d", n, want)
		}
	}
	th(1, 2)
	time.Sleep(150 * time.Millisecond)
	th(2, 2) // admitted, then a full window
	llen(2)
	time.Sleep(200 * time.Millisecond)
	th(1, 2) // the first start left the window
	llen(2)
	time.Sleep(200 * time.Millisecond)
	th(62, 100) // the 64th push drops the one start that left the window
	llen(63)
	r := &engine.FlowRound{Renews: []engine.FlowLease{{Token: "1", Conc: "c:a", Dedupe: "d:a"}}}
	round(t, s, r)
	round(t, s, &engine.FlowRound{Releases: []engine.FlowRelease{
		{FlowLease: engine.FlowLease{Token: "1", Conc: "c:a", Dedupe: "d:a"}, Window: time.Hour},
		{FlowLease: engine.FlowLease{Token: "2", Dedupe: "d:b"}},
	}})
	if n := admin.Do(ctx, "ACL", "LOG").Val(); n != nil && len(n.([]any)) > 0 {
		t.Fatalf("ACL LOG: %v", n)
	}
}

// faultAt returns the faults of index i.
func faultAt(fs []engine.Fault, i int) []engine.Fault {
	var out []engine.Fault
	for _, f := range fs {
		if f.Index == i {
			out = append(out, f)
		}
	}
	return out
}

// A key of the wrong type fails, for good, only what needs it (SPEC §10 "Settlement
// failures"): the round is carried out for every other release, renewal and admission, and the
// fault names the command, the key and Redis's own text.
func TestWrongTypeKeyFailsOnlyItsOwn(t *testing.T) {
	_, c := redistest.Fresh(t)
	ctx := context.Background()
	s := New(c, "wt")
	c.Set(ctx, "flowrun:{wt}:c:bad", "x", 0)
	c.RPush(ctx, "flowrun:{wt}:d:list", "x")
	dd := func(tok, k string) engine.FlowAdmit { return engine.FlowAdmit{Token: tok, Dedupe: "d:" + k} }
	same(t, "take", round(t, s, &engine.FlowRound{Admits: []engine.FlowAdmit{conc("1", "a", 1), dd("2", "ok")}}), A, A)
	r := &engine.FlowRound{
		Releases: []engine.FlowRelease{
			{FlowLease: engine.FlowLease{Token: "9", Conc: "c:bad"}},
			{FlowLease: engine.FlowLease{Token: "1", Conc: "c:a"}},
			{FlowLease: engine.FlowLease{Token: "8", Dedupe: "d:other"}, Window: time.Hour},
			{FlowLease: engine.FlowLease{Token: "2", Dedupe: "d:ok"}, Window: time.Hour},
		},
		Renews: []engine.FlowLease{{Token: "7", Conc: "c:bad"}, {Token: "6", Conc: "c:b"}},
		Admits: []engine.FlowAdmit{conc("3", "a", 1), conc("4", "bad", 1), dd("5", "list"), conc("6", "b", 1), dd("10", "ok")},
	}
	same(t, "round", round(t, s, r), A, W, W, A, D)
	wrong := "WRONGTYPE Operation against a key holding the wrong kind of value"
	check := func(what string, fs []engine.Fault, command, key string) {
		t.Helper()
		if len(fs) != 1 || fs[0].Command != command || fs[0].Key != key || fs[0].Reason != "wrongtype" ||
			!fs[0].Permanent || !strings.Contains(fs[0].Err.Error(), wrong) {
			t.Fatalf("%s: faults %+v, want one %s %s wrongtype", what, fs, command, key)
		}
	}
	check("release of c:bad", faultAt(r.ReleaseFaults, 0), "zrem", "flowrun:{wt}:c:bad")
	// SET overwrites any type: a done mark never fails for a key's type.
	if len(r.ReleaseFaults) != 1 {
		t.Fatalf("release faults %+v", r.ReleaseFaults)
	}
	check("renewal of c:bad", r.RenewFaults, "evalsha", "flowrun:{wt}:c:bad")
	if len(r.Lost) != 1 || r.Lost[0] != 1 {
		t.Fatalf("lost %v: want only the renewal of c:b (never taken), not the faulted one", r.Lost)
	}
	check("admission on c:bad", faultAt(r.AdmitFaults, 1), "evalsha", "flowrun:{wt}:c:bad")
	check("claim of d:list", faultAt(r.AdmitFaults, 2), "set", "flowrun:{wt}:d:list")
	if len(r.AdmitFaults) != 2 {
		t.Fatalf("admission faults %+v", r.AdmitFaults)
	}
	// A dedupe key holding a string flowrun did not write (neither a claim nor "done") would
	// hold its deliveries back for ever: it fails them, for good, as a wrong type.
	c.Set(ctx, "flowrun:{wt}:d:str", "x", 0)
	r = &engine.FlowRound{Admits: []engine.FlowAdmit{dd("11", "str"), {Token: "12", Dedupe: "d:str", Conc: "c:z", ConcLimit: 1}, conc("13", "y", 1)}}
	same(t, "foreign value", round(t, s, r), W, W, A)
	for i := range 2 {
		if fs := faultAt(r.AdmitFaults, i); len(fs) != 1 || fs[0].Reason != "wrongtype" || !fs[0].Permanent ||
			!strings.Contains(fs[0].Err.Error(), "holds a value flowrun did not write") {
			t.Fatalf("admission %d: faults %+v, want wrongtype", i, fs)
		}
	}
	// The admissions beside the bad one hold their leases once each.
	for k, tok := range map[string]string{"flowrun:{wt}:c:a": "3", "flowrun:{wt}:c:b": "6"} {
		if m := c.ZRange(ctx, k, 0, -1).Val(); !slices.Equal(m, []string{tok}) {
			t.Fatalf("%s holds %v, want [%s]", k, m, tok)
		}
	}
}

// A round's dedupe claims to delete go in one script call; a key of the wrong type among them
// fails, for good, only its own release, and the others are deleted.
func TestDropClaimsFailOnlyTheirOwn(t *testing.T) {
	_, c := redistest.Fresh(t)
	ctx := context.Background()
	s := New(c, "dc")
	dd := func(tok, k string) engine.FlowAdmit { return engine.FlowAdmit{Token: tok, Dedupe: "d:" + k} }
	same(t, "take", round(t, s, &engine.FlowRound{Admits: []engine.FlowAdmit{dd("1", "a"), dd("2", "b"), dd("3", "c")}}), A, A, A)
	c.Del(ctx, "flowrun:{dc}:d:b")
	c.RPush(ctx, "flowrun:{dc}:d:b", "x")
	c.Set(ctx, "flowrun:{dc}:d:c", "run:other", 0) // taken over by another delivery: it stays
	r := &engine.FlowRound{Releases: []engine.FlowRelease{
		{FlowLease: engine.FlowLease{Token: "1", Dedupe: "d:a"}},
		{FlowLease: engine.FlowLease{Token: "2", Dedupe: "d:b"}},
		{FlowLease: engine.FlowLease{Token: "3", Dedupe: "d:c"}},
	}}
	round(t, s, r)
	if fs := r.ReleaseFaults; len(fs) != 1 || fs[0].Index != 1 || fs[0].Command != "evalsha" || fs[0].Key != "flowrun:{dc}:d:b" ||
		fs[0].Reason != "wrongtype" || !fs[0].Permanent {
		t.Fatalf("release faults %+v, want one wrongtype for d:b", fs)
	}
	if n := c.Exists(ctx, "flowrun:{dc}:d:a").Val(); n != 0 {
		t.Fatal("the claim of d:a was not deleted")
	}
	if v := c.Get(ctx, "flowrun:{dc}:d:c").Val(); v != "run:other" {
		t.Fatalf("d:c holds %q: another delivery's claim was deleted", v)
	}
	// A round of one drop alone.
	same(t, "take again", round(t, s, &engine.FlowRound{Admits: []engine.FlowAdmit{dd("4", "a")}}), A)
	r = &engine.FlowRound{Releases: []engine.FlowRelease{{FlowLease: engine.FlowLease{Token: "4", Dedupe: "d:a"}}}}
	round(t, s, r)
	if len(r.ReleaseFaults) != 0 || c.Exists(ctx, "flowrun:{dc}:d:a").Val() != 0 {
		t.Fatalf("faults %+v; the claim of d:a is left", r.ReleaseFaults)
	}
}

// A user without a command the flow keys need (NOPERM, or Redis 7.0's ERR inside a script)
// fails, for good, only the commands that need it.
func TestNoPermFailsOnlyItsOwn(t *testing.T) {
	srv, admin := redistest.Fresh(t)
	ctx := context.Background()
	// Everything but ZREM (a release) and ZADD (an admission's lease, inside the script).
	if err := admin.Do(ctx, "ACL", "SETUSER", "nozrem", "reset", "on", ">pw", "+@all", "-zrem", "-zadd", "~*").Err(); err != nil {
		t.Fatal(err)
	}
	defer admin.Do(ctx, "ACL", "DELUSER", "nozrem")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "nozrem", Password: "pw"})
	defer c.Close()
	s := New(c, "np")
	r := &engine.FlowRound{
		Releases: []engine.FlowRelease{{FlowLease: engine.FlowLease{Token: "1", Conc: "c:a", Dedupe: "d:a"}, Window: time.Hour}},
		Admits:   []engine.FlowAdmit{conc("2", "b", 1), {Token: "3", Dedupe: "d:c"}},
	}
	same(t, "round", round(t, s, r), W, A)
	if fs := r.ReleaseFaults; len(fs) != 1 || fs[0].Command != "zrem" || fs[0].Reason != "noperm" || !fs[0].Permanent {
		t.Fatalf("release faults %+v, want one zrem noperm", fs)
	}
	if fs := r.AdmitFaults; len(fs) != 1 || fs[0].Index != 0 || fs[0].Reason != "noperm" || !fs[0].Permanent {
		t.Fatalf("admission faults %+v, want the scripted one noperm", fs)
	}
	if v := admin.Get(ctx, "flowrun:{np}:d:a").Val(); v != "done" {
		t.Fatalf("done mark %q: the rest of a release goes through", v)
	}
}

// A failure that passes by itself (here a lost connection) fails the whole round, so that the
// engine sends it again; the error says why.
func TestTransientFailureFailsTheRound(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	s := New(c, "tr")
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := s.Round(ctx, &engine.FlowRound{Lease: time.Second, Max: 1, Admits: []engine.FlowAdmit{conc("1", "a", 1)}})
	var f engine.Fault
	if !errors.As(err, &f) || f.Permanent || f.Reason != "connection" {
		t.Fatalf("round: %v (fault %+v), want a transient connection fault", err, f)
	}
}

// A round whose dedupe drops (one script call) lose their reply fails, as any failure that may
// pass (SPEC §10), and sent again does what it was to do once: the claims of the round's own
// deliveries are gone, and a claim another delivery took meanwhile stays.
func TestDropClaimsReplyLost(t *testing.T) {
	srv, admin := redistest.Fresh(t)
	ctx := context.Background()
	proxy := redistest.StartProxy(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1})
	defer c.Close()
	s := New(c, "dl")
	dd := func(tok, k string) engine.FlowAdmit { return engine.FlowAdmit{Token: tok, Dedupe: "d:" + k} }
	same(t, "take", round(t, s, &engine.FlowRound{Admits: []engine.FlowAdmit{dd("1", "a"), dd("2", "b"), dd("3", "c")}}), A, A, A)
	admin.Set(ctx, "flowrun:{dl}:d:c", "run:other", 0) // taken over by another delivery: it stays
	drops := func() *engine.FlowRound {
		return &engine.FlowRound{Lease: 10 * time.Second, Max: 100, Releases: []engine.FlowRelease{
			{FlowLease: engine.FlowLease{Token: "1", Dedupe: "d:a"}},
			{FlowLease: engine.FlowLease{Token: "2", Dedupe: "d:b"}},
			{FlowLease: engine.FlowLease{Token: "3", Dedupe: "d:c"}},
		}}
	}
	cut := proxy.CutReply(redistest.Command("evalsha"))
	err := s.Round(ctx, drops())
	<-cut
	var f engine.Fault
	if !errors.As(err, &f) || f.Permanent {
		t.Fatalf("round with its reply cut: %v (fault %+v), want a fault that may pass", err, f)
	}
	r := drops()
	if err := s.Round(ctx, r); err != nil || len(r.ReleaseFaults) != 0 {
		t.Fatalf("round sent again: %v, faults %+v", err, r.ReleaseFaults)
	}
	for _, k := range []string{"a", "b"} {
		if n := admin.Exists(ctx, "flowrun:{dl}:d:"+k).Val(); n != 0 {
			t.Errorf("the claim of d:%s was not deleted", k)
		}
	}
	if v := admin.Get(ctx, "flowrun:{dl}:d:c").Val(); v != "run:other" {
		t.Errorf("d:c holds %q: another delivery's claim was deleted", v)
	}
}
