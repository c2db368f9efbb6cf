package redisstream

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
)

const testMinIdle = 300 * time.Millisecond

func claimOpts(kind, consumer string) Options {
	return Options{Kind: kind, Stream: "s", Group: "g", Consumer: consumer,
		MinIdle: testMinIdle, Block: 50 * time.Millisecond}
}

func leave(d *engine.Delivery) engine.Settlement {
	return engine.Settlement{Delivery: d, Action: engine.ActLeave}
}

// expectCounts checks a claiming/reclaim delivery's numbers and SPEC §6 headers.
func expectCounts(t *testing.T, d *engine.Delivery, attempt, count int, idleMin, idleMax int64) {
	t.Helper()
	hc, _ := strconv.Atoi(d.Headers[engine.HeaderDeliveryCount])
	hi, err := strconv.ParseInt(d.Headers[engine.HeaderIdleMS], 10, 64)
	if d.Attempt != attempt || d.DeliveryCount != count || hc != count || err != nil || hi != d.IdleMS ||
		d.IdleMS < idleMin || d.IdleMS > idleMax {
		t.Fatalf("delivery %s: attempt %d count %d idle %d headers %v; want attempt %d count %d idle in [%d,%d]",
			d.ID, d.Attempt, d.DeliveryCount, d.IdleMS, d.Headers, attempt, count, idleMin, idleMax)
	}
}

// A retried (left) entry moves between two consumers; each delivery's numbers follow Redis's
// delivery count, the way SPEC §6 defines them per kind.
func TestDeliveryCountsAcrossConsumers(t *testing.T) {
	minIdle := testMinIdle.Milliseconds()
	tests := []struct {
		kind string
		// per delivery i (0 = fresh): attempt, x-delivery-count, idle bounds
		attempt func(i int) int
		count   func(i int) int
		idle    func(i int) (int64, int64)
	}{
		{
			kind:    KindClaiming,
			attempt: func(i int) int { return i + 1 },
			count:   func(i int) int { return i }, // deliveries before this one
			idle: func(i int) (int64, int64) {
				if i == 0 {
					return 0, 0
				}
				return minIdle, minIdle + 5000 // from XPENDING: at least min_idle
			},
		},
		{
			kind:    KindReclaim,
			attempt: func(i int) int { return i + 1 },
			count:   func(i int) int { return i + 1 }, // including this one
			idle: func(i int) (int64, int64) {
				if i == 0 {
					return 0, 0
				}
				return minIdle, minIdle // exactly min_idle, a lower bound
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			e := newEnv(t)
			a := e.start(claimOpts(tt.kind, "a"))
			b := e.start(claimOpts(tt.kind, "b"))
			id := e.xadd("s", "payload", "p", "h", "v")
			// Whoever reads first gets the fresh entry; then it alternates as each leaves it.
			var d *engine.Delivery
			var holder *running
			select {
			case d = <-a.Out():
				holder = a
			case d = <-b.Out():
				holder = b
			case <-time.After(5 * time.Second):
				t.Fatal("fresh entry not delivered")
			}
			for i := 0; i < 3; i++ {
				if d.ID != id || string(d.Payload) != "p" || d.Headers["h"] != "v" {
					t.Fatalf("delivery %d: %s %q %v", i, d.ID, d.Payload, d.Headers)
				}
				lo, hi := tt.idle(i)
				expectCounts(t, d, tt.attempt(i), tt.count(i), lo, hi)
				p, _ := e.pendingOf("s", "g", id)
				if p.Consumer != holder.src.o.Consumer || p.RetryCount != int64(i+1) {
					t.Fatalf("delivery %d: XPENDING %+v, want owner %s count %d", i, p, holder.src.o.Consumer, i+1)
				}
				holder.settle(t, leave(d)) // retry in place: released now
				if i == 2 {
					break
				}
				// The next delivery comes after min_idle, to either consumer.
				left := time.Now()
				select {
				case d = <-a.Out():
					holder = a
				case d = <-b.Out():
					holder = b
				case <-time.After(5 * time.Second):
					t.Fatalf("delivery %d never reclaimed", i+1)
				}
				if waited := time.Since(left); waited < testMinIdle-20*time.Millisecond {
					t.Fatalf("reclaimed after %s, before min_idle %s", waited, testMinIdle)
				}
			}
			holder.settle(t, ack(d)...)
			if n := e.pending("s", "g"); n != 0 {
				t.Fatalf("pending = %d after ack", n)
			}
			want := engine.Capabilities{Ack: true, RetryInPlace: true, MinIdle: testMinIdle, DeliveryCount: true, Batch: a.src.o.Batch}
			if got := a.src.Capabilities(); got != want {
				t.Fatalf("capabilities %+v, want %+v", got, want)
			}
		})
	}
}

// An entry left pending by a consumer that died is claimed by a live one; one in flight at a
// live, slow consumer is kept from looking idle and never claimed (SPEC §4).
func TestKeepAliveProtectsSlowEntry(t *testing.T) {
	for _, kind := range []string{KindClaiming, KindReclaim} {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t)
			e.rdb.XGroupCreateMkStream(e.ctx, "s", "g", "0")
			dead := e.xadd("s", "payload", "dead")
			// A consumer that read it and died.
			e.rdb.XReadGroup(e.ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "ghost", Streams: []string{"s", ">"}})
			slow := e.xadd("s", "payload", "slow")
			a := e.start(claimOpts(kind, "a"))
			got := a.Next(t)
			if got.ID != slow {
				t.Fatalf("a got %s first, want the fresh %s", got.ID, slow)
			}
			// a holds "slow" (a handler running long); b starts and must take only "dead".
			b := e.start(claimOpts(kind, "b"))
			var fromA, fromB []*engine.Delivery
			deadline := time.After(4 * testMinIdle)
		loop:
			for {
				select {
				case d := <-a.Out():
					fromA = append(fromA, d)
				case d := <-b.Out():
					fromB = append(fromB, d)
				case <-deadline:
					break loop
				}
			}
			all := append(append([]*engine.Delivery{}, fromA...), fromB...)
			if len(all) != 1 || all[0].ID != dead {
				ids := []string{}
				for _, d := range all {
					ids = append(ids, d.ID)
				}
				t.Fatalf("deliveries in 4×min_idle: %v; want only the dead consumer's %s", ids, dead)
			}
			p, ok := e.pendingOf("s", "g", slow)
			if !ok || p.Consumer != "a" || p.RetryCount != 1 || p.Idle >= testMinIdle {
				t.Fatalf("slow entry pending %+v (ok %v); want owner a, count 1, idle < min_idle", p, ok)
			}
			a.settle(t, ack(got)...)
			for _, d := range all {
				for _, r := range []*running{a, b} {
					if err := r.src.Settle(e.ctx, ack(d)); err != nil {
						t.Fatal(err)
					}
				}
			}
			if n := e.pending("s", "g"); n != 0 {
				t.Fatalf("pending = %d, want 0", n)
			}
		})
	}
}

// Ids that XAUTOCLAIM reports deleted are acknowledged; Redis 7's XCLAIM drops them itself.
func TestDeletedPendingEntriesAcked(t *testing.T) {
	for _, kind := range []string{KindClaiming, KindReclaim} {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t)
			e.rdb.XGroupCreateMkStream(e.ctx, "s", "g", "0")
			ids := e.xaddN("s", 3)
			e.rdb.XReadGroup(e.ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "ghost", Streams: []string{"s", ">"}})
			e.rdb.XDel(e.ctx, "s", ids[0], ids[2])
			a := e.start(claimOpts(kind, "a"))
			d := a.Next(t)
			if d.ID != ids[1] {
				t.Fatalf("got %s, want the surviving %s", d.ID, ids[1])
			}
			e.waitFor("deleted ids to leave the PEL", 5*time.Second, func() bool { return e.pending("s", "g") == 1 })
			a.None(t, 2*testMinIdle)
		})
	}
}

// claimOnce runs one claiming pass of up to count entries and waits for it: claimAhead's
// steps without a second pass in flight.
func (r *reader) claimOnce(ctx context.Context, count int) ([]*engine.Delivery, error) {
	if err := r.listIdle(ctx, count); err != nil {
		return nil, err
	}
	p := r.newPass(count)
	if p == nil {
		return nil, nil
	}
	r.runPass(ctx, p)
	return r.finishPass(ctx, p)
}

// A claiming takeover sends one round trip per pass: the XCLAIM of this pass's candidates and
// the XPENDING that lists the next pass's. A candidate someone else took in between is refused
// by XCLAIM's MIN-IDLE, and delivery counts stay exact; candidates older than min_idle are
// listed again before they are used.
func TestClaimingPassesOneRoundTrip(t *testing.T) {
	e := newEnv(t)
	ids := deadBacklog(e, 6)
	r, rec := passReader(e, KindClaiming)
	pass := func(want ...string) {
		t.Helper()
		ds, err := r.claimOnce(e.ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range ds {
			got = append(got, d.ID)
			expectCounts(t, d, 2, 1, testMinIdle.Milliseconds(), testMinIdle.Milliseconds()+5000)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("claimed %v, want %v", got, want)
		}
	}
	pass(ids[0], ids[1])
	if n := count(rec.names(), "xpending"); n != 2 {
		t.Fatalf("first pass sent %v; want XPENDING, then XCLAIM with the next XPENDING", rec.names())
	}
	// Another consumer takes ids[2], the first candidate the last round trip listed.
	e.rdb.XClaim(e.ctx, &redis.XClaimArgs{Stream: "s", Group: "g", Consumer: "other", Messages: []string{ids[2]}})
	rec.reset()
	pass(ids[3])
	if got := rec.names(); !slices.Equal(got, []string{"xclaim", "xpending"}) {
		t.Fatalf("second pass sent %v; want one round trip: xclaim, xpending", got)
	}
	if p, _ := e.pendingOf("s", "g", ids[2]); p.Consumer != "other" || p.RetryCount != 2 {
		t.Fatalf("taken entry %+v; want owner other, count 2", p)
	}
	// Candidates as old as min_idle are listed again first.
	r.candsAt = time.Now().Add(-testMinIdle)
	rec.reset()
	pass(ids[4], ids[5])
	if got := rec.names(); !slices.Equal(got, []string{"xpending", "xclaim", "xpending"}) {
		t.Fatalf("pass with stale candidates sent %v", got)
	}
	if !r.noneIdle {
		t.Fatal("the last pass's XPENDING found nothing idle, but the reader does not know")
	}
}

// A reclaim pass asks for delivery counts in its XAUTOCLAIM's round trip only while the last
// pass claimed something: over a fresh backlog, where passes claim nothing, it sends XAUTOCLAIM
// alone; the first pass that claims learns the counts with one more XPENDING.
func TestReclaimCountsOnlyAfterAClaim(t *testing.T) {
	e := newEnv(t)
	e.rdb.XGroupCreateMkStream(e.ctx, "s", "g", "0")
	e.xaddN("s", 4)
	r, rec := passReader(e, KindReclaim)
	if ds, err := r.autoClaim(e.ctx, 2); err != nil || len(ds) != 0 {
		t.Fatalf("nothing pending: claimed %d, %v", len(ds), err)
	}
	streamCmds := func() []string { // the connection's own handshake (hello, client) aside
		var out []string
		for _, n := range rec.names() {
			if strings.HasPrefix(n, "x") {
				out = append(out, n)
			}
		}
		return out
	}
	if got := streamCmds(); !slices.Equal(got, []string{"xautoclaim"}) {
		t.Fatalf("a pass with nothing to claim sent %v; want xautoclaim alone", got)
	}
	e.rdb.XReadGroup(e.ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "ghost", Streams: []string{"s", ">"}})
	e.waitFor("entries to become idle", 5*time.Second, func() bool {
		p, _ := e.rdb.XPendingExt(e.ctx, &redis.XPendingExtArgs{Stream: "s", Group: "g", Idle: testMinIdle, Start: "-", End: "+", Count: 10}).Result()
		return len(p) == 4
	})
	for i, want := range [][]string{{"xautoclaim", "xpending"}, {"xautoclaim", "xpending"}} {
		rec.reset()
		ds, err := r.autoClaim(e.ctx, 2)
		if err != nil || len(ds) != 2 {
			t.Fatalf("pass %d: claimed %d, %v", i, len(ds), err)
		}
		for _, d := range ds {
			expectCounts(t, d, 2, 2, testMinIdle.Milliseconds(), testMinIdle.Milliseconds())
		}
		if got := streamCmds(); !slices.Equal(got, want) {
			t.Fatalf("pass %d sent %v, want %v", i, got, want)
		}
	}
}

// inFlight counts the pipelines with an XCLAIM that run at once on a client, and the entries
// XPENDING listed.
type inFlight struct {
	mu       sync.Mutex
	now, max int
	listed   int
}

func (h *inFlight) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *inFlight) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *inFlight) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		defer func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			for _, c := range cmds {
				if p, ok := c.(*redis.XPendingExtCmd); ok {
					h.listed += len(p.Val())
				}
			}
		}()
		if !slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == "xclaim" }) {
			return next(ctx, cmds)
		}
		h.mu.Lock()
		h.now++
		h.max = max(h.max, h.now)
		h.mu.Unlock()
		defer func() {
			h.mu.Lock()
			h.now--
			h.mu.Unlock()
		}()
		return next(ctx, cmds)
	}
}

// deadBacklog adds n entries that a consumer "ghost" reads and never settles, and waits until
// they are all idle for min_idle.
func deadBacklog(e *env, n int) []string {
	e.t.Helper()
	e.rdb.XGroupCreateMkStream(e.ctx, "s", "g", "0")
	ids := e.xaddN("s", n)
	e.rdb.XReadGroup(e.ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "ghost", Streams: []string{"s", ">"}, Count: int64(n)})
	e.waitFor("entries to become idle", 5*time.Second, func() bool {
		p, _ := e.rdb.XPendingExt(e.ctx, &redis.XPendingExtArgs{Stream: "s", Group: "g", Idle: testMinIdle, Start: "-", End: "+", Count: int64(n)}).Result()
		return len(p) == n
	})
	return ids
}

// passReader is a reader of consumer "a" of kind, batch 2, that a test drives pass by pass,
// and the recorder of its client's commands.
func passReader(e *env, kind string) (*reader, *recorder) {
	e.t.Helper()
	c, rec := e.client()
	o := claimOpts(kind, "a")
	o.Batch = 2
	src, err := New(c, o, zerolog.Nop())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { src.Close() })
	r := &reader{s: src}
	r.reset()
	return r, rec
}

// takeOver starts a claiming consumer "a", batch 16 (passes of 8), on a dead backlog of n
// entries, with hook (if any) on its client; then its passes go through go-redis, where the
// hook sees them, rather than on the bare read connection.
func takeOver(e *env, n int, hook redis.Hook) (*running, *recorder, Options) {
	e.t.Helper()
	deadBacklog(e, n)
	c, rec := e.client()
	if hook != nil {
		c.AddHook(hook)
	}
	o := claimOpts(KindClaiming, "a")
	o.Batch = 16
	src, err := New(c, o, zerolog.New(zerolog.NewTestWriter(e.t)).Level(zerolog.WarnLevel))
	if err != nil {
		e.t.Fatal(err)
	}
	src.noBare = hook != nil
	return e.run(src, rec), rec, src.o
}

// callsOf is how many times the server ran cmd since its stats were last reset (INFO
// commandstats): it sees what the bare read connection sends, which no hook does.
func callsOf(e *env, cmd string) int {
	e.t.Helper()
	for _, l := range strings.Split(e.rdb.Info(e.ctx, "commandstats").Val(), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest+",", ',')])
			return n
		}
	}
	return 0
}

// A claiming takeover on the bare read connection (the passes written there, their replies
// read in order while the next pass is in Redis) delivers every entry exactly once with its
// delivery count and idle time, in passes of at most half a batch, listing the idle entries
// in about one XPENDING per pass, and leaves nothing pending.
func TestClaimingTakeoverBare(t *testing.T) {
	e := newOwnEnv(t)
	const n = 400
	deadBacklog(e, n)
	e.rdb.ConfigResetStat(e.ctx)
	o := claimOpts(KindClaiming, "a")
	o.Batch = 16
	a := e.start(o)
	ackEachOnce(t, a, map[string]bool{}, n, func(d *engine.Delivery) {
		expectCounts(t, d, 2, 1, testMinIdle.Milliseconds(), testMinIdle.Milliseconds()+10_000)
	})
	a.None(t, 2*testMinIdle)
	if n := e.pending("s", "g"); n != 0 {
		t.Fatalf("pending = %d, want 0", n)
	}
	xclaims, listings := callsOf(e, "xclaim"), callsOf(e, "xpending")
	if xclaims < n/8 {
		t.Fatalf("%d XCLAIMs for %d entries; want passes of at most half a batch (8)", xclaims, n)
	}
	if listings > xclaims+8 {
		t.Fatalf("%d XPENDINGs for %d XCLAIMs; want the listing to ride on the passes", listings, xclaims)
	}
}

// A claiming pass whose reply is cut on the bare read connection, with another pass written
// behind it, loses nothing: the source reconnects and goes on, and the entries the cut pass
// (and any pass behind it) claimed come back after min_idle as one attempt more; each entry is
// delivered once, nothing stays pending.
func TestClaimingBarePassReplyLost(t *testing.T) {
	e := newOwnEnv(t)
	const n = 200
	deadBacklog(e, n)
	attempt := e.takeOverWithCut(t, KindClaiming, "XCLAIM", 16, n)
	third := 0
	for id, k := range attempt {
		switch k {
		case 2:
		case 3:
			third++
		default:
			t.Errorf("%s came as attempt %d, want 2 or 3", id, k)
		}
	}
	if third == 0 {
		t.Error("no entry came back as attempt 3 after the cut pass")
	}
	// Only the passes in flight on the cut connection lose their replies: the cut one and at
	// most maxPasses-1 behind it, each of at most half a batch.
	if most := maxPasses * 16 / 2; third > most {
		t.Errorf("%d entries came back as attempt 3; the passes in flight hold at most %d", third, most)
	}
	e.waitFor("nothing pending", 10*time.Second, func() bool { return e.pending("s", "g") == 0 })
}

// ackEachOnce takes and acknowledges deliveries from r until seen holds n ids, failing on one
// delivered twice; check, if set, looks at each delivery first.
func ackEachOnce(t *testing.T, r *running, seen map[string]bool, n int, check func(d *engine.Delivery)) {
	t.Helper()
	for len(seen) < n {
		d := r.Next(t)
		if seen[d.ID] {
			t.Fatalf("%s delivered twice", d.ID)
		}
		seen[d.ID] = true
		if check != nil {
			check(d)
		}
		r.settle(t, ack(d)...)
	}
}

// A claiming takeover keeps two passes in flight (Redis claims the next while this process
// converts and hands over the last), lists each idle entry once (each listing serves the
// passes after it), and delivers every entry exactly once with its delivery count, never reading more
// than the engine has room for (the Receiver checks the feed contract).
func TestClaimingTakeoverOverlapsPasses(t *testing.T) {
	e := newEnv(t)
	const n = 400
	ov := &inFlight{}
	a, rec, o := takeOver(e, n, ov)
	ackEachOnce(t, a, map[string]bool{}, n, func(d *engine.Delivery) {
		expectCounts(t, d, 2, 1, testMinIdle.Milliseconds(), testMinIdle.Milliseconds()+10_000)
	})
	a.None(t, 2*testMinIdle)
	if n := e.pending("s", "g"); n != 0 {
		t.Fatalf("pending = %d, want 0", n)
	}
	ov.mu.Lock()
	most, listed := ov.max, ov.listed
	ov.mu.Unlock()
	if most < 2 {
		t.Fatalf("at most %d claiming pass in flight at once; want 2", most)
	}
	// The first listing from the start is a batch; each later one starts after the last
	// candidate known.
	if listed > n+o.Batch {
		t.Fatalf("XPENDING listed %d entries for %d idle ones; want each listed once", listed, n)
	}
	if xclaims := count(rec.names(), "xclaim"); xclaims < n/8 {
		t.Fatalf("%d XCLAIMs for %d entries; want passes of at most half a batch (8)", xclaims, n)
	}
}

// Passes in flight when Receive stops are waited for and what they claimed is untracked, not
// handed over: it stays pending and another consumer takes it over after min_idle, so nothing
// is lost and nothing runs twice.
func TestClaimingStopWithPassesInFlight(t *testing.T) {
	e := newEnv(t)
	const n = 200
	a, _, _ := takeOver(e, n, nil)
	taken := a.Take(t, 5) // nobody takes more: the queue fills and passes wait in flight
	untaken, err := a.Halt(t)
	if err != nil {
		t.Fatal(err)
	}
	a.src.Return(untaken)
	a.settle(t, ack(taken...)...)
	if a.src.track.len() != 0 {
		t.Fatalf("%d entries still tracked after the stop", a.src.track.len())
	}
	b := e.start(claimOpts(KindClaiming, "b"))
	seen := map[string]bool{}
	for _, d := range taken {
		seen[d.ID] = true
	}
	ackEachOnce(t, b, seen, n, nil)
	if n := e.pending("s", "g"); n != 0 {
		t.Fatalf("pending = %d, want 0", n)
	}
}

// loseReply lets the nth pipeline with an XCLAIM run in Redis and then reports a broken
// connection, as when the reply is lost: the entries are claimed, the source never sees them.
type loseReply struct {
	n     int
	mu    sync.Mutex
	seen  int
	ids   []string // the ids that pass asked for
	fired chan struct{}
}

func (h *loseReply) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *loseReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *loseReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if cmds[0].Name() != "xclaim" {
			return err
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.seen++; h.seen != h.n {
			return err
		}
		for _, a := range cmds[0].Args()[5:] {
			if id, ok := a.(string); ok && strings.Contains(id, "-") {
				h.ids = append(h.ids, id)
			}
		}
		lost := errors.New("read tcp: connection reset by peer")
		for _, c := range cmds {
			c.SetErr(lost)
		}
		close(h.fired)
		return lost
	}
}

// A pass whose reply is lost while another is in flight loses nothing: the source backs off,
// hands over the other pass, and the entries the lost pass claimed (pending for this consumer,
// never seen) come back once idle for min_idle, one delivery more on their count. Every entry
// is delivered, and the group ends with nothing pending.
func TestClaimingPassReplyLost(t *testing.T) {
	e := newEnv(t)
	const n = 200
	h := &loseReply{n: 3, fired: make(chan struct{})}
	a, _, _ := takeOver(e, n, h)
	seen, attempt := map[string]int{}, map[string]int{}
	deadline := time.After(20 * time.Second)
	for len(seen) < n {
		select {
		case d := <-a.Out():
			seen[d.ID]++
			attempt[d.ID] = d.Attempt
			a.settle(t, ack(d)...)
		case <-deadline:
			t.Fatalf("%d of %d entries delivered", len(seen), n)
		}
	}
	select {
	case <-h.fired:
	default:
		t.Fatal("no reply was lost")
	}
	h.mu.Lock()
	lost := slices.Clone(h.ids)
	h.mu.Unlock()
	if len(lost) == 0 {
		t.Fatal("the lost pass asked for no ids")
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("%s delivered %d times", id, k)
		}
	}
	// The dead consumer's read was the first delivery, the lost claim the second (it counts:
	// the handler may have been about to run it), so these come as attempt 3, the rest as 2.
	for _, id := range lost {
		if attempt[id] != 3 {
			t.Errorf("%s came back as attempt %d, want 3", id, attempt[id])
		}
	}
	e.waitFor("nothing pending", 10*time.Second, func() bool { return e.pending("s", "g") == 0 })
}

// Through a claiming takeover, whenever a pass is handed over and idle entries remain beyond
// the pass still in flight, candidates for the next pass are known: the listing riding on a
// pass covers one pass more than can be in flight. (Listing for two left the pool empty every
// third pass, and the next XCLAIM then waited a whole round trip for its candidates.)
func TestClaimingCandidatesNeverRunDry(t *testing.T) {
	e := newEnv(t)
	const n = 40
	deadBacklog(e, n)
	r, _ := passReader(e, KindClaiming) // batch 2: passes of 1, two in flight
	claimed := 0
	for claimed < n {
		ds, err := r.claimAhead(e.ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 {
			t.Fatalf("a pass claimed nothing after %d of %d", claimed, n)
		}
		claimed += len(ds)
		if left := n - claimed - r.outstanding(); left > 0 && len(r.cands) == 0 {
			t.Fatalf("after %d claimed, %d in flight and %d idle left: no candidates known for the next pass", claimed, r.outstanding(), left)
		}
	}
	r.dropPasses()
}

// Entries with no field but the payload get the delivery count and idle time as their only
// headers (the source may share one map among them); an entry's own fields stay its own, taken
// over or fresh.
func TestCountHeadersOfPayloadOnlyEntries(t *testing.T) {
	minIdle := testMinIdle.Milliseconds()
	for _, kind := range []string{KindClaiming, KindReclaim} {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t)
			if err := e.rdb.XGroupCreateMkStream(e.ctx, "s", "g", "0").Err(); err != nil {
				t.Fatal(err)
			}
			own := map[string]bool{}
			for i := range 6 {
				fields := []string{"payload", strconv.Itoa(i)}
				if i%3 == 1 {
					fields = append(fields, "h", strconv.Itoa(i))
				}
				id := e.xadd("s", fields...)
				own[id] = i%3 == 1
				if i == 2 { // the first three left pending by a consumer that died
					e.rdb.XReadGroup(e.ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "ghost", Streams: []string{"s", ">"}})
				}
			}
			r := e.start(claimOpts(kind, "a"))
			taken := map[string]bool{}
			for range 6 {
				var d *engine.Delivery
				select {
				case d = <-r.Out():
				case <-time.After(5 * time.Second):
					t.Fatalf("%d of 6 delivered", len(taken))
				}
				taken[d.ID] = true
				fresh := d.Payload[0] >= '3'
				switch {
				case kind == KindClaiming && fresh:
					expectCounts(t, d, 1, 0, 0, 0)
				case kind == KindClaiming:
					expectCounts(t, d, 2, 1, minIdle, minIdle+5000)
				case fresh:
					expectCounts(t, d, 1, 1, 0, 0)
				default:
					expectCounts(t, d, 2, 2, minIdle, minIdle)
				}
				want := 2
				if own[d.ID] {
					want = 3
					if d.Headers["h"] != string(d.Payload) {
						t.Fatalf("delivery %s: headers %v, want its own field h", d.ID, d.Headers)
					}
				}
				if len(d.Headers) != want {
					t.Fatalf("delivery %s (payload %s): headers %v, want %d", d.ID, d.Payload, d.Headers, want)
				}
				r.settle(t, ack(d)...)
			}
			if n := e.pending("s", "g"); n != 0 {
				t.Fatalf("pending = %d after acks", n)
			}
		})
	}
}

// Reclaim learns its delivery counts from the XPENDING page sent behind its XAUTOCLAIM,
// matched in id order; an entry the page left out (crowded by others) is asked for again, and
// one no longer pending for this consumer is dropped and untracked.
func TestReclaimCountsFromPartialPage(t *testing.T) {
	e := newEnv(t)
	ids := deadBacklog(e, 5)
	r, rec := passReader(e, KindReclaim)
	s := r.s
	// Consumer a takes all five (delivery count 2 each), then one twice more (count 4).
	if err := e.rdb.XClaim(e.ctx, &redis.XClaimArgs{Stream: "s", Group: "g", Consumer: "a", Messages: ids}).Err(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		e.rdb.XClaim(e.ctx, &redis.XClaimArgs{Stream: "s", Group: "g", Consumer: "a", Messages: ids[2:3]})
	}
	page, err := e.rdb.XPendingExt(e.ctx, &redis.XPendingExtArgs{Stream: "s", Group: "g", Consumer: "a", Start: "-", End: "+", Count: 10}).Result()
	if err != nil || len(page) != 5 {
		t.Fatalf("xpending: %v %v", page, err)
	}
	e.rdb.XAck(e.ctx, "s", "g", ids[4]) // settled elsewhere since
	// The page lacks ids[1] and ids[4] and lists one id that is not carried.
	known := []redis.XPendingExt{page[0], {ID: "0-1", RetryCount: 9}, page[2], page[3]}
	for _, id := range ids {
		d := &engine.Delivery{Message: engine.Message{Key: "s", ID: id}, Token: id}
		r.carry = append(r.carry, d)
	}
	s.track.addUntracked(r.carry)
	rec.reset()
	ds, err := r.countCarried(e.ctx, known)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, d := range ds {
		got[d.ID] = d.DeliveryCount
		if d.Headers[engine.HeaderDeliveryCount] != strconv.Itoa(d.DeliveryCount) {
			t.Errorf("%s: headers %v", d.ID, d.Headers)
		}
	}
	want := map[string]int{ids[0]: 2, ids[1]: 2, ids[2]: 4, ids[3]: 2}
	if !maps.Equal(got, want) {
		t.Errorf("counts %v, want %v", got, want)
	}
	if n := slices.Index(rec.names(), "xpending"); n < 0 {
		t.Errorf("the entry left out of the page was not asked for: %v", rec.names())
	}
	if len(r.carry) != 0 || s.track.len() != 4 {
		t.Errorf("after counting: %d carried, %d tracked; want 0 and 4", len(r.carry), s.track.len())
	}
}

// A reclaim pass whose reply is lost on the source's read connection (Redis claimed the
// entries, the reply never came) fails the read; the source reconnects and goes on, and the
// lost pass's entries, pending under this consumer with their counts raised, come back after
// min_idle as one attempt more (SPEC §10): each entry is delivered once, nothing stays pending.
func TestReclaimPassReplyLost(t *testing.T) {
	e := newOwnEnv(t)
	const n, batch = 64, 16
	ids := deadBacklog(e, n)
	attempt := e.takeOverWithCut(t, KindReclaim, "XAUTOCLAIM", batch, n)
	// The dead consumer's read was the first delivery, the lost pass the second.
	for i, id := range ids {
		want := 2
		if i < batch {
			want = 3 // the first pass, from the start of the pending list
		}
		if attempt[id] != want {
			t.Errorf("entry %d (%s) came as attempt %d, want %d", i, id, attempt[id], want)
		}
	}
	e.waitFor("nothing pending", 10*time.Second, func() bool { return e.pending("s", "g") == 0 })
}

// takeOverWithCut takes over n dead entries with a source of kind (batch entries a read) whose
// connection goes through a proxy that cuts the reply of command once, acknowledging each
// delivery: it fails on an entry delivered twice or a reply never cut, and returns the attempt
// each entry came as.
func (e *env) takeOverWithCut(t *testing.T, kind, command string, batch, n int) map[string]int {
	t.Helper()
	proxy := redistest.StartProxy(t, e.srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr})
	t.Cleanup(func() { c.Close() })
	cut := proxy.CutReply(redistest.Command(command))
	o := claimOpts(kind, "a")
	o.Batch = batch
	a := e.startWith(c, nil, o)
	attempt := map[string]int{}
	deadline := time.After(20 * time.Second)
	for len(attempt) < n {
		select {
		case d := <-a.Out():
			if _, twice := attempt[d.ID]; twice {
				t.Fatalf("%s delivered twice", d.ID)
			}
			attempt[d.ID] = d.Attempt
			a.settle(t, ack(d)...)
		case <-deadline:
			t.Fatalf("%d of %d entries delivered", len(attempt), n)
		}
	}
	select {
	case <-cut:
	default:
		t.Fatalf("no %s reply was cut", command)
	}
	return attempt
}
