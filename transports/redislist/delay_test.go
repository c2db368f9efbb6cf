package redislist

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/transports/transporttest"
)

// TestDurableDelayIdenticalElements: two identical elements delayed at once are two members of
// the delay queue (a member per delivery, not per content), both leave the processing list in
// the settling script, and both come back onto the list when due, as copies one retry higher.
func TestDurableDelayIdenticalElements(t *testing.T) {
	_, c := redistest.Fresh(t)
	ctx := context.Background()
	src := newSource(t, c, Options{Key: "dd", Reliable: true, Consumer: "w1", DelayedRetry: DelayDurableZSet})
	if src.opts.DelayKey != "dd:delayed" {
		t.Fatalf("default delay_key %q, want dd:delayed", src.opts.DelayKey)
	}
	lpush(t, c, "dd", "same", "same")
	r := transporttest.Receive(t, src, src.opts.Batch)
	ds := r.Take(t, 2)
	var batch []engine.Settlement
	for _, d := range ds {
		st := settlement(src, d, engine.RetryAfter(300*time.Millisecond), 0)
		if st.Action != engine.ActDelay {
			t.Fatalf("action %s, want a durable delay", st.Action)
		}
		st.Due = time.Now().Add(300 * time.Millisecond)
		batch = append(batch, st)
	}
	if err := src.Settle(ctx, batch); err != nil {
		t.Fatal(err)
	}
	wantList(t, c, src.opts.Processing)
	if n := c.ZCard(ctx, "dd:delayed").Val(); n != 2 {
		t.Fatalf("ZCARD dd:delayed = %d, want 2", n)
	}
	back := r.Take(t, 2)
	for _, d := range back {
		if d.RetryCount() != 1 || string(d.Payload) != "same" {
			t.Fatalf("copy %q with x-retry-count %d, want \"same\" with 1", d.Payload, d.RetryCount())
		}
		if err := src.Settle(ctx, []engine.Settlement{{Delivery: d, Action: engine.ActAck}}); err != nil {
			t.Fatal(err)
		}
	}
	r.Stop(t)
	wantList(t, c, src.opts.Processing)
	wantList(t, c, "dd")
	if n := c.ZCard(ctx, "dd:delayed").Val(); n != 0 {
		t.Fatalf("ZCARD dd:delayed = %d after both came back, want 0", n)
	}
}

// TestDurableDelayRefused: a delay queue Redis refuses to write (WRONGTYPE) is a permanent fault
// naming ZADD and the delay key, and the element stays in the processing list.
func TestDurableDelayRefused(t *testing.T) {
	_, c := redistest.Fresh(t)
	ctx := context.Background()
	src := newSource(t, c, Options{Key: "dr", Reliable: true, Consumer: "w1", DelayedRetry: DelayDurableZSet})
	lpush(t, c, "dr", "x")
	r := transporttest.Receive(t, src, src.opts.Batch)
	d := r.Next(t)
	r.Stop(t)
	c.Set(ctx, "dr:delayed", "not a zset", 0)
	st := settlement(src, d, engine.RetryAfter(time.Minute), 0)
	err := src.Settle(ctx, []engine.Settlement{st})
	var se *engine.SettleError
	if !errors.As(err, &se) || len(se.Faults) != 1 {
		t.Fatalf("Settle = %v, want one fault", err)
	}
	if f := se.Faults[0]; f.Command != "zadd" || f.Key != "dr:delayed" || !strings.Contains(f.Err.Error(), "WRONGTYPE") {
		t.Fatalf("fault %+v, want zadd dr:delayed WRONGTYPE", f)
	}
	wantList(t, c, src.opts.Processing, "x")
}

func TestDurableDelayOptions(t *testing.T) {
	for _, o := range []Options{
		{Key: "k", Reliable: false, DelayedRetry: DelayDurableZSet},
		{Key: "k", Reliable: true, Consumer: "w", DelayedRetry: DelayDurableZSet, DelayKey: "k"},
		{Key: "k", Reliable: true, Consumer: "w", DelayedRetry: "later"},
	} {
		o.setDefaults()
		if err := o.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", o)
		}
	}
	if m := encodeDelayed(&engine.Message{Payload: []byte("p")}); DelayedElement(m) != "p" || len(m) != memberHead+1 {
		t.Errorf("member %q decodes to %q", m, DelayedElement(m))
	}
	if DelayedElement("foreign") != "foreign" {
		t.Error("a foreign member is not pushed back as itself")
	}
}
