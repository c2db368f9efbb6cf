package redisstream

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/transports/redisconn"
)

// Redis dies and comes back empty: Ready flips to false and back, the group is recreated and
// reads resume, for every kind.
func TestReconnectAfterRestart(t *testing.T) {
	for _, kind := range []string{KindStream, KindClaiming, KindReclaim} {
		t.Run(kind, func(t *testing.T) {
			e := newOwnEnv(t)
			o := claimOpts(kind, "a")
			if kind == KindStream {
				o.MinIdle = 0
			}
			r := e.start(o)
			e.xadd("s", "payload", "before")
			d := r.Next(t)
			r.settle(t, ack(d)...)
			if !r.src.Ready() {
				t.Fatal("not ready after a successful read")
			}
			e.srv.Kill()
			e.waitFor("Ready to turn false", 10*time.Second, func() bool { return !r.src.Ready() })
			e.srv.Restart(t)
			e.waitFor("Ready to turn true", 15*time.Second, r.src.Ready)
			id := e.xadd("s", "payload", "after")
			if got := r.Next(t); got.ID != id {
				t.Fatalf("after restart got %s, want %s", got.ID, id)
			}
			if err := r.Stop(t); err != nil {
				t.Fatalf("Receive returned %v", err)
			}
		})
	}
}

// Redis unreachable at start: Receive waits (Ready false) and starts reading when it appears.
func TestStartWhileRedisDown(t *testing.T) {
	e := newOwnEnv(t)
	e.srv.Kill()
	r := e.start(streamOpts("s"))
	// Several failed attempts; then the server comes up.
	time.Sleep(300 * time.Millisecond)
	if r.src.Ready() {
		t.Fatal("ready while Redis is down")
	}
	e.srv.Restart(t)
	id := e.xadd("s", "payload", "p")
	if got := r.Next(t); got.ID != id {
		t.Fatalf("got %s want %s", got.ID, id)
	}
}

// A wrong password at start is a configuration problem: Receive returns it, redacted.
func TestAuthErrorAtStart(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "right-pw")
	c, err := redisconn.New(redisconn.Options{URL: srv.URL, Password: "wrong-pw"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	src, err := New(c, streamOpts("s"), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = src.Receive(ctx, nil)
	if err == nil || !redisconn.IsAuthError(err) {
		t.Fatalf("Receive = %v, want an auth error", err)
	}
	if strings.Contains(err.Error(), "wrong-pw") {
		t.Fatalf("password in error: %v", err)
	}
}

// Settling while Redis is down fails every settlement of the batch; they stay tracked (not
// re-delivered by the pending re-read) and a re-sent batch succeeds once Redis is back.
func TestSettleWhileDownThenResend(t *testing.T) {
	e := newOwnEnv(t)
	e.srv.Stop()
	e.srv.Restart(t) // same port; fresh data
	ids := e.xaddN("s", 3)
	r := e.start(streamOpts("s"))
	ds := r.Take(t, 3)
	batch := []engine.Settlement{
		{Delivery: ds[0], Action: engine.ActAck},
		{Delivery: ds[1], Action: engine.ActRequeue, Copy: ds[1].RetryCopy()},
		{Delivery: ds[2], Action: engine.ActAck},
	}
	e.srv.Kill()
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	err := r.src.Settle(ctx, batch)
	var se *engine.SettleError
	if !errors.As(err, &se) || !slices.Equal(slices.Sorted(slices.Values(se.FailedIndexes())), []int{0, 1, 2}) {
		t.Fatalf("Settle = %v, want a SettleError failing 0, 1, 2", err)
	}
	for _, f := range se.Faults {
		if f.Permanent || f.Reason != "connection" {
			t.Errorf("fault %+v: want a transient connection fault", f)
		}
	}
	if r.src.track.len() != 3 {
		t.Fatalf("tracked %d, want 3", r.src.track.len())
	}
	e.srv.Restart(t) // empty again: recreate what the batch needs
	for _, id := range ids {
		e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: "s", ID: id, Values: []string{"payload", "x"}})
	}
	e.waitFor("the source to read again", 15*time.Second, r.src.Ready)
	// The source recreated the group at "0" and reads the re-added entries as new; settle
	// what it hands out so the stream drains, then re-send the failed batch.
	r.Take(t, 3)
	if err := r.src.Settle(e.ctx, batch); err != nil {
		t.Fatalf("re-sent batch: %v", err)
	}
	for _, id := range ids {
		if _, ok := e.pendingOf("s", "g", id); ok {
			t.Fatalf("%s pending after the re-sent batch", id)
		}
	}
	if n := e.rdb.XLen(e.ctx, "s").Val(); n != 4 {
		t.Fatalf("xlen = %d, want 3 + the requeued copy", n)
	}
}
