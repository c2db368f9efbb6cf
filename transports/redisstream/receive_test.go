package redisstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
)

// After a stop the source hands nothing more to the engine: what it read and had not handed
// over is untracked and stays pending, and exactly what was handed over stays tracked (the
// engine gives back, or settles, each of those). Run a few times: the stop lands at different
// moments of the read loop.
func TestNothingHandedOutAfterStop(t *testing.T) {
	e := newEnv(t)
	for i := range 12 {
		stream := fmt.Sprintf("s%d", i)
		e.xaddN(stream, 40)
		o := streamOpts(stream)
		o.Batch = 10
		m := e.start(o)
		for range 6 {
			m.Next(t)
		}
		e.waitFor("the read-ahead", 5*time.Second, func() bool { return m.src.track.len() > 10 })
		// What was handed over before the stop and not taken yet is still in the feed: it is
		// not given back here, so that what the source tracks shows.
		untaken, err := m.Halt(t)
		if err != nil {
			t.Fatalf("Receive = %v", err)
		}
		read := e.pending(stream, "g")
		late := len(untaken)
		if late > o.Batch+1 {
			t.Fatalf("run %d: %d handed over beyond the 6 taken, want at most a batch (+1 held)", i, late)
		}
		if n := m.src.track.len(); n != 6+late {
			t.Fatalf("run %d: %d tracked after the stop, want the %d handed over", i, n, 6+late)
		}
		if read < int64(6+late) {
			t.Fatalf("run %d: %d pending, fewer than the %d handed over", i, read, 6+late)
		}
	}
}

// Ready is true by the time anything is handed out: a test (or /readyz) that sees a delivery
// sees a ready source. Before the fix Ready was set after the hand-over.
func TestReadyBeforeHandOver(t *testing.T) {
	e := newEnv(t)
	for i := range 10 {
		for _, kind := range []string{KindStream, KindClaiming, KindReclaim} {
			stream := fmt.Sprintf("%s%d", kind, i)
			o := claimOpts(kind, "a")
			o.Stream = stream
			if kind == KindStream {
				o.MinIdle = 0
				// Pending for this consumer already: the very first step (the pending
				// re-read) hands it out.
				if err := e.rdb.XGroupCreateMkStream(e.ctx, stream, "g", "0").Err(); err != nil {
					t.Fatal(err)
				}
				e.xadd(stream, "payload", "p")
				e.rdb.XReadGroup(e.ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "a", Streams: []string{stream, ">"}})
			} else {
				e.xadd(stream, "payload", "p")
			}
			m := e.start(o)
			m.Next(t)
			if !m.src.Ready() {
				t.Fatalf("%s run %d: a delivery was handed out while Ready is false", kind, i)
			}
			m.Stop(t)
		}
	}
}

// faultHook fails or rewrites chosen commands of a source's client.
type faultHook struct {
	mu     sync.Mutex
	before func(cmd redis.Cmder) error // a non-nil error fails the command unsent
	after  func(cmd redis.Cmder)       // may rewrite the reply
}

func (h *faultHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *faultHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		before, after := h.before, h.after
		h.mu.Unlock()
		if before != nil {
			if err := before(cmd); err != nil {
				cmd.SetErr(err)
				return err
			}
		}
		err := next(ctx, cmd)
		if after != nil {
			after(cmd)
		}
		return err
	}
}

func (h *faultHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// failOnce returns a before-hook failing the first command named name.
func failOnce(name string) func(redis.Cmder) error {
	var once sync.Once
	return func(cmd redis.Cmder) error {
		var err error
		if cmd.Name() == name {
			once.Do(func() { err = errors.New("injected failure of " + name) })
		}
		return err
	}
}

// Entries claimed just before a later command of the claim pass fails are handed over (or,
// for reclaim, stay tracked and are handed over by the next step) with the delivery count the
// claim gave them: the failure does not cost them an attempt. Before the fix they were dropped
// untracked and came back after min_idle with their count raised once more.
func TestClaimedBeforeErrorHandedOver(t *testing.T) {
	tests := []struct {
		kind string
		hook func(h *faultHook)
		// what the deliveries must show: consumer x read them once, then this source claimed
		dc, attempt int
	}{
		{
			// Redis 7 drops deleted entries inside XCLAIM, so the older servers' reply (an
			// entry with no fields) is simulated, and the XACK of that id fails.
			kind: KindClaiming,
			hook: func(h *faultHook) {
				h.after = func(cmd redis.Cmder) {
					if c, ok := cmd.(*redis.XMessageSliceCmd); ok && cmd.Name() == "xclaim" && c.Err() == nil {
						c.SetVal(append(c.Val(), redis.XMessage{ID: "0-1"}))
					}
				}
				h.before = failOnce("xack")
			},
			dc: 1, attempt: 2,
		},
		{
			// The XPENDING that learns the counts after XAUTOCLAIM fails once.
			kind: KindReclaim,
			hook: func(h *faultHook) { h.before = failOnce("xpending") },
			dc:   2, attempt: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			e := newEnv(t)
			ids := e.xaddN("s", 2)
			if err := e.rdb.XGroupCreateMkStream(e.ctx, "s", "g", "0").Err(); err != nil {
				t.Fatal(err)
			}
			e.rdb.XReadGroup(e.ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "x", Streams: []string{"s", ">"}})
			time.Sleep(testMinIdle + 50*time.Millisecond) // idle enough to be claimed
			h := &faultHook{}
			tt.hook(h)
			c := e.srv.NewClient()
			c.AddHook(h)
			t.Cleanup(func() { c.Close() })
			m := e.startWith(c, nil, claimOpts(tt.kind, "a"))
			got := map[string]*engine.Delivery{}
			for range 2 {
				d := m.Next(t)
				got[d.ID] = d
			}
			for _, id := range ids {
				d := got[id]
				if d == nil {
					t.Fatalf("got %v, want %v", got, ids)
				}
				if d.DeliveryCount != tt.dc || d.Attempt != tt.attempt {
					t.Errorf("%s: delivery count %d attempt %d, want %d and %d",
						id, d.DeliveryCount, d.Attempt, tt.dc, tt.attempt)
				}
				// Redis counts x's read and this source's claim, and nothing more.
				if p, ok := e.pendingOf("s", "g", id); !ok || p.Consumer != "a" || p.RetryCount != 2 {
					t.Errorf("%s: pending %+v, want owned by a, delivered twice", id, p)
				}
			}
			// Nothing comes back a second time while they are in flight here.
			select {
			case d := <-m.Out():
				t.Fatalf("%s handed out twice (delivery count %d)", d.ID, d.DeliveryCount)
			case <-time.After(2 * testMinIdle):
			}
			for _, d := range got {
				if err := m.src.Settle(e.ctx, ack(d)); err != nil {
					t.Fatal(err)
				}
			}
			if n := e.pending("s", "g"); n != 0 {
				t.Fatalf("%d pending after settling", n)
			}
			if n := m.src.track.len(); n != 0 {
				t.Fatalf("%d still tracked after settling", n)
			}
		})
	}
}

// A stop while the read is blocked in XREADGROUP BLOCK returns at once, not after the block:
// the read's own connection is closed. Settling after the read stopped still works.
func TestStopCutsBlockedRead(t *testing.T) {
	for _, kind := range []string{KindStream, KindClaiming, KindReclaim} {
		t.Run(kind, func(t *testing.T) {
			e := newOwnEnv(t) // blockedReads counts the server's clients
			o := claimOpts(kind, "a")
			if kind == KindStream {
				o.MinIdle = 0
			}
			o.Block = 5 * time.Second
			m := e.start(o)
			e.xadd("s", "payload", "p")
			d := m.Next(t)
			e.waitFor("a read blocked in XREADGROUP", 10*time.Second, func() bool { return blockedReads(e) == 1 })
			start := time.Now()
			if err := m.Stop(t); err != nil {
				t.Fatalf("Receive = %v", err)
			}
			took := time.Since(start)
			t.Logf("Receive returned %v after the stop (block %v)", took, o.Block)
			if took > 2*time.Second {
				t.Fatalf("Receive took %v to return after the stop; the read was not cut short", took)
			}
			e.waitFor("no blocked read left on the server", 5*time.Second, func() bool { return blockedReads(e) == 0 })
			if err := m.src.Settle(e.ctx, ack(d)); err != nil {
				t.Fatalf("settle after the stop: %v", err)
			}
			if n := e.pending("s", "g"); n != 0 {
				t.Fatalf("%d pending after settling", n)
			}
		})
	}
}

// blockedReads counts the server's clients blocked in XREADGROUP.
func blockedReads(e *env) int {
	list, err := e.rdb.ClientList(e.ctx).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, "cmd=xreadgroup") && hasFlag(line, 'b') {
			n++
		}
	}
	return n
}

func hasFlag(line string, f byte) bool {
	for _, field := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(field, "flags="); ok {
			return strings.IndexByte(v, f) >= 0
		}
	}
	return false
}

// Reads of new entries go over a connection of their own that speaks RESP2: over RESP3, go-redis
// peeks at a connection held longer than 5 s for push notifications before and after each
// command, two system calls per read. The reads work the same over it.
func TestReadConnectionSpeaksRESP2(t *testing.T) {
	e := newEnv(t)
	src := newTestSource(t, e, Options{Kind: KindStream, Stream: "s", Group: "g", Consumer: "c", Batch: 10})
	if err := e.rdb.XGroupCreateMkStream(e.ctx, "s", "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	id, err := e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: "s", Values: []string{"payload", `{"n":1}`, "k", "v"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	rc := src.newReadClient(nil)
	if rc == nil {
		t.Fatal("no read client for a single-server source")
	}
	defer rc.Close()
	conn := rc.Conn()
	defer conn.Close()
	info, err := conn.ClientInfo(e.ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if info.Resp != 2 {
		t.Errorf("the read connection speaks RESP%d, want RESP2", info.Resp)
	}
	// As a TLS source reads on it (go-redis parses; TestRawReadsAfterSetup reads it bare).
	msgs, err := src.xreadgroup(e.ctx, conn, ">", 10, -1)
	if err != nil {
		t.Fatal(err)
	}
	ds := src.deliveries(msgs)
	if len(ds) != 1 || ds[0].ID != id || string(ds[0].Payload) != `{"n":1}` || ds[0].Headers["k"] != "v" {
		t.Fatalf("read %+v, want %s with its payload and header", ds, id)
	}
}

// A read of new entries may block for longer than the client's read timeout: the read
// connection allows for the block (go-redis's own XREADGROUP does so per command), so an idle
// source waits out its block without a read error.
func TestReadBlocksLongerThanReadTimeout(t *testing.T) {
	e := newEnv(t)
	c := redis.NewClient(&redis.Options{Addr: e.srv.Addr, ReadTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	o := streamOpts("s")
	o.Block = 700 * time.Millisecond
	src, err := New(c, o, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	var errs atomic.Int32
	src.SetErrorHook(func() { errs.Add(1) })
	r := e.run(src, nil)
	e.waitFor("the group", 5*time.Second, func() bool {
		g, _ := e.rdb.XInfoGroups(e.ctx, "s").Result()
		return len(g) == 1
	})
	// Two blocks pass with nothing to read, then an entry comes.
	time.Sleep(2 * o.Block)
	id := e.xadd("s", "payload", "x")
	if d := r.Next(t); d.ID != id {
		t.Fatalf("read %s, want %s", d.ID, id)
	}
	if n := errs.Load(); n != 0 {
		t.Fatalf("%d read errors while blocked", n)
	}
}
