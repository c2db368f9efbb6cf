package redisstream

import (
	"maps"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/engine"
)

func streamOpts(stream string) Options {
	return Options{Kind: KindStream, Stream: stream, Group: "g", Consumer: "c1", Block: 200 * time.Millisecond}
}

func TestMessageMapping(t *testing.T) {
	e := newEnv(t)
	id1 := e.xadd("orders", "payload", `{"amount":5}`, "tenant", "a")
	id2 := e.xadd("orders", "id", "7", "amount", "12")
	id3 := e.xadd("orders", "payload", "x", "x-retry-count", "2")
	r := e.start(streamOpts("orders"))
	ds := r.Take(t, 3)
	tests := []struct {
		id      string
		payload string
		headers map[string]string
		attempt int
	}{
		{id1, `{"amount":5}`, map[string]string{"tenant": "a"}, 1},
		{id2, "", map[string]string{"id": "7", "amount": "12"}, 1},
		{id3, "x", map[string]string{"x-retry-count": "2"}, 3},
	}
	for i, tt := range tests {
		d := ds[i]
		if d.Key != "orders" || d.ID != tt.id || !tokenIs(d, tt.id) || string(d.Payload) != tt.payload ||
			!maps.Equal(d.Headers, tt.headers) || d.Attempt != tt.attempt {
			t.Errorf("delivery %d = key %q id %q token %v payload %q headers %v attempt %d",
				i, d.Key, d.ID, d.Token, d.Payload, d.Headers, d.Attempt)
		}
	}
}

func TestGroupCreatedAtStart(t *testing.T) {
	tests := []struct {
		start string
		want  int // entries delivered out of the two written before the group existed
	}{
		{"0", 2},
		{"$", 0},
	}
	for _, tt := range tests {
		t.Run(tt.start, func(t *testing.T) {
			e := newEnv(t)
			e.xadd("s", "payload", "old1")
			e.xadd("s", "payload", "old2")
			o := streamOpts("s")
			o.Start = tt.start
			r := e.start(o)
			e.waitFor("group", 5*time.Second, func() bool {
				g, err := e.rdb.XInfoGroups(e.ctx, "s").Result()
				return err == nil && len(g) == 1
			})
			newID := e.xadd("s", "payload", "new")
			ds := r.Take(t, tt.want+1)
			if ds[len(ds)-1].ID != newID {
				t.Fatalf("last delivery %s, want the new entry %s", ds[len(ds)-1].ID, newID)
			}
		})
	}
}

func TestGroupCreatedWithMkStream(t *testing.T) {
	e := newEnv(t)
	r := e.start(streamOpts("fresh"))
	e.waitFor("stream and group", 5*time.Second, func() bool {
		g, err := e.rdb.XInfoGroups(e.ctx, "fresh").Result()
		return err == nil && len(g) == 1 && g[0].Name == "g"
	})
	id := e.xadd("fresh", "payload", "p")
	if d := r.Next(t); d.ID != id {
		t.Fatalf("got %s want %s", d.ID, id)
	}
	e.waitFor("ready", 5*time.Second, r.src.Ready)
}

// Each settlement action's commands on the stream kind (SPEC §4): a copy and the acknowledgement
// of its original go in one script, a plain ack is one XACK; a durable delay's member names the
// entry it replaces. What each leaves in Redis is the conformance suite's (TestConformance).
func TestSettleActionsStream(t *testing.T) {
	type check func(t *testing.T, e *env, d *engine.Delivery, st engine.Settlement)
	due := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	tests := []struct {
		name   string
		opts   func(o *Options)
		settle func(d *engine.Delivery) engine.Settlement
		xlen   int64 // of the source stream afterwards
		multi  bool  // sent as MULTI/EXEC
		check  check
	}{
		{
			name: "ack",
			settle: func(d *engine.Delivery) engine.Settlement {
				return engine.Settlement{Delivery: d, Action: engine.ActAck}
			},
			xlen: 1,
		},
		{
			name: "requeue",
			settle: func(d *engine.Delivery) engine.Settlement {
				return engine.Settlement{Delivery: d, Action: engine.ActRequeue, Copy: d.RetryCopy()}
			},
			xlen:  2,
			multi: true,
		},
		{
			name: "dead letter",
			settle: func(d *engine.Delivery) engine.Settlement {
				c := d.Message.Clone()
				c.Headers[engine.HeaderDeadLetterReason] = "too many"
				c.Headers[engine.HeaderOriginalKey] = d.Key
				c.Headers[engine.HeaderOriginalID] = d.ID
				c.Headers[engine.HeaderAttempts] = "3"
				return engine.Settlement{Delivery: d, Action: engine.ActDeadLetter, Copy: c, DeadLetterKey: "s.dlq"}
			},
			xlen:  1,
			multi: true,
		},
		{
			name: "delay",
			opts: func(o *Options) { o.DelayedRetry = DelayDurableZSet },
			settle: func(d *engine.Delivery) engine.Settlement {
				return engine.Settlement{Delivery: d, Action: engine.ActDelay, Copy: d.RetryCopy(), Due: due}
			},
			xlen:  1,
			multi: true,
			check: func(t *testing.T, e *env, d *engine.Delivery, _ engine.Settlement) {
				zs, err := e.rdb.ZRangeWithScores(e.ctx, "s:delayed", 0, -1).Result()
				if err != nil || len(zs) != 1 {
					t.Fatalf("zset = %v, %v; want one member", zs, err)
				}
				if int64(zs[0].Score) != due.UnixMilli() {
					t.Fatalf("score = %v, want %d", zs[0].Score, due.UnixMilli())
				}
				dl, err := DecodeDelayed(zs[0].Member.(string))
				if err != nil {
					t.Fatal(err)
				}
				want := map[string]string{"h": "v", "x-retry-count": "1"}
				if dl.Key != "s" || dl.OriginalID != d.ID || string(dl.Message.Payload) != "p1" ||
					!maps.Equal(dl.Message.Headers, want) {
					t.Fatalf("member = %+v %+v", dl, dl.Message)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.xadd("s", "payload", "p1", "h", "v")
			o := streamOpts("s")
			if tt.opts != nil {
				tt.opts(&o)
			}
			r := e.start(o)
			d := r.Next(t)
			if n := e.pending("s", "g"); n != 1 {
				t.Fatalf("pending before settle = %d, want 1", n)
			}
			r.rec.reset()
			st := tt.settle(d)
			r.settle(t, st)
			if _, ok := e.pendingOf("s", "g", d.ID); ok {
				t.Fatal("original still pending after settle")
			}
			if n := e.rdb.XLen(e.ctx, "s").Val(); n != tt.xlen {
				t.Fatalf("xlen = %d, want %d", n, tt.xlen)
			}
			// A copy and its acknowledgement go in one script; a plain ack is one XACK.
			names := r.rec.names()
			if got := count(names, "evalsha")+count(names, "eval") >= 1; got != tt.multi {
				t.Fatalf("commands %v: settle script = %v, want %v", names, got, tt.multi)
			}
			if want := map[bool]int{true: 0, false: 1}[tt.multi]; count(names, "xack") != want {
				t.Fatalf("commands %v: want %d xack", names, want)
			}
			if tt.check != nil {
				tt.check(t, e, d, st)
			}
		})
	}
}

func TestSettleOneXAckPerBatch(t *testing.T) {
	e := newEnv(t)
	e.xaddN("s", 50)
	o := streamOpts("s")
	o.Batch = 50
	r := e.start(o)
	ds := r.Take(t, 50)
	r.rec.reset()
	sts := ack(ds[:40]...)
	for _, d := range ds[40:45] {
		sts = append(sts, engine.Settlement{Delivery: d, Action: engine.ActRequeue, Copy: d.RetryCopy()})
	}
	for _, d := range ds[45:] {
		c := d.Message.Clone()
		sts = append(sts, engine.Settlement{Delivery: d, Action: engine.ActDeadLetter, Copy: c, DeadLetterKey: "dlq"})
	}
	r.settle(t, sts...)
	names := r.rec.names()
	if count(names, "xack") != 1 || count(names, "xadd") != 0 || count(names, "evalsha") != 1 {
		t.Fatalf("commands = %v; want one XACK and one script writing the 10 copies", names)
	}
	for _, d := range ds {
		if _, ok := e.pendingOf("s", "g", d.ID); ok {
			t.Fatalf("%s still pending", d.ID)
		}
	}
	if n := e.rdb.XLen(e.ctx, "s").Val(); n != 55 {
		t.Fatalf("xlen = %d, want 55", n)
	}
	if n := e.rdb.XLen(e.ctx, "dlq").Val(); n != 5 {
		t.Fatalf("dlq len = %d, want 5", n)
	}
	// The requeued copies come back with x-retry-count 1.
	copies := r.Take(t, 5)
	for _, c := range copies {
		if c.Headers["x-retry-count"] != "1" || c.Attempt != 2 {
			t.Fatalf("copy %s headers %v attempt %d", c.ID, c.Headers, c.Attempt)
		}
	}
}

// At start a stream source first re-reads its own pending entries, acknowledging those whose
// data is gone, then reads new ones.
func TestPendingRereadAtStart(t *testing.T) {
	e := newEnv(t)
	ids := e.xaddN("s", 5)
	e.rdb.XGroupCreate(e.ctx, "s", "g", "0")
	// A previous run of consumer c1 read everything and died; another consumer holds one.
	e.rdb.XReadGroup(e.ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c1", Streams: []string{"s", ">"}, Count: 4})
	e.rdb.XReadGroup(e.ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "other", Streams: []string{"s", ">"}, Count: 1})
	e.rdb.XDel(e.ctx, "s", ids[1]) // deleted while pending
	newID := e.xadd("s", "payload", "new")

	o := streamOpts("s")
	o.Batch = 2 // several pages
	r := e.start(o)
	ds := r.Take(t, 4)
	got := []string{ds[0].ID, ds[1].ID, ds[2].ID, ds[3].ID}
	want := []string{ids[0], ids[2], ids[3], newID}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("deliveries %v, want %v", got, want)
		}
	}
	if _, ok := e.pendingOf("s", "g", ids[1]); ok {
		t.Fatal("deleted pending entry not acknowledged")
	}
	if p, ok := e.pendingOf("s", "g", ids[4]); !ok || p.Consumer != "other" {
		t.Fatal("another consumer's pending entry was touched")
	}
	r.None(t, 300*time.Millisecond)
}

// After a lost connection the source re-reads its own pending entries, skipping those still in
// flight, and goes on with new ones.
func TestPendingRereadAfterReconnectSkipsInFlight(t *testing.T) {
	e := newOwnEnv(t)
	ids := e.xaddN("s", 3)
	e.rdb.XGroupCreate(e.ctx, "s", "g", "0")
	// ids[2] is read by another consumer first, so the source never sees it come in.
	e.rdb.XReadGroup(e.ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "other", Streams: []string{"s", ">"}, Count: 3})
	e.rdb.XClaim(e.ctx, &redis.XClaimArgs{Stream: "s", Group: "g", Consumer: "other", Messages: ids[:2]})
	e.rdb.XAck(e.ctx, "s", "g", ids[0], ids[1])
	a := e.xadd("s", "payload", "a")
	b := e.xadd("s", "payload", "b")
	r := e.start(streamOpts("s"))
	ds := r.Take(t, 2)
	if ds[0].ID != a || ds[1].ID != b {
		t.Fatalf("got %s %s, want %s %s", ds[0].ID, ds[1].ID, a, b)
	}
	r.settle(t, ack(ds[0])...) // b stays in flight
	e.waitFor("ready", 5*time.Second, r.src.Ready)
	// ids[2] becomes this consumer's pending entry behind the source's back: stranded.
	if err := e.rdb.XClaim(e.ctx, &redis.XClaimArgs{Stream: "s", Group: "g", Consumer: "c1", Messages: []string{ids[2]}}).Err(); err != nil {
		t.Fatal(err)
	}
	e.killClients()
	got := r.Next(t)
	if got.ID != ids[2] {
		t.Fatalf("after reconnect got %s, want the stranded %s (in flight: %s)", got.ID, ids[2], b)
	}
	after := e.xadd("s", "payload", "after")
	if d := r.Next(t); d.ID != after {
		t.Fatalf("got %s, want %s", d.ID, after)
	}
	r.None(t, 300*time.Millisecond)
	r.settle(t, ack(ds[1], got)...)
	if n := e.pending("s", "g"); n != 1 { // "after" is still unsettled
		t.Fatalf("pending = %d, want 1", n)
	}
}
