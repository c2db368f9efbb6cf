package schedule

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/transports/transporttest"
)

func TestMain(m *testing.M) {
	os.Exit(redistest.Main(m)) // one redis-server shared by the tests
}

func newSource(t *testing.T, c redis.UniversalClient, opts Options) *Source {
	t.Helper()
	s, err := New(c, opts, transporttest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func everySecond(t *testing.T) Clock {
	c, err := Every(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// scheduledAt is a delivery's tick, checked against its id and payload.
func scheduledAt(t *testing.T, d *engine.Delivery) time.Time {
	t.Helper()
	s := d.Headers[HeaderScheduledAt]
	tick, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatalf("x-scheduled-at %q: %v", s, err)
	}
	if d.ID != s || string(d.Payload) != `{"scheduled_at":"`+s+`"}` {
		t.Errorf("tick %s has id %q payload %s", s, d.ID, d.Payload)
	}
	return tick
}

// collect takes deliveries from every receiver until n arrived in all, then stops them and
// takes what is left.
func collect(t *testing.T, n int, rs ...*transporttest.Receiver) []time.Time {
	t.Helper()
	var ticks []time.Time
	deadline := time.After(transporttest.Timeout)
	for len(ticks) < n {
		select {
		case d := <-rs[0].Out():
			ticks = append(ticks, scheduledAt(t, d))
		case d := <-rs[1].Out():
			ticks = append(ticks, scheduledAt(t, d))
		case <-deadline:
			t.Fatalf("%d ticks within %s, want %d", len(ticks), transporttest.Timeout, n)
		}
	}
	for _, r := range rs {
		rest, err := r.Halt(t)
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		for _, d := range rest {
			ticks = append(ticks, scheduledAt(t, d))
		}
	}
	slices.SortFunc(ticks, func(a, b time.Time) int { return a.Compare(b) })
	return ticks
}

// consecutive fails unless ticks are one second apart: none twice, none missing.
func consecutive(t *testing.T, ticks []time.Time) {
	t.Helper()
	for i := 1; i < len(ticks); i++ {
		if d := ticks[i].Sub(ticks[i-1]); d != time.Second {
			t.Fatalf("ticks %v: %s and %s are %s apart, want each once, a second apart", ticks, ticks[i-1], ticks[i], d)
		}
	}
}

// Two sources on one Redis take each tick once between them, and the keys say so.
func TestEachTickOnceAcrossSources(t *testing.T) {
	srv := redistest.Shared(t)
	c := srv.Client(t)
	opts := Options{Pipeline: "once", Clock: everySecond(t)}
	a := transporttest.Receive(t, newSource(t, srv.Client(t), opts), 10)
	b := transporttest.Receive(t, newSource(t, srv.Client(t), opts), 10)
	ticks := collect(t, 4, a, b)
	consecutive(t, ticks)

	ctx := context.Background()
	last, ok, err := readLast(ctx, c, "once")
	if err != nil || !ok || !last.Equal(ticks[len(ticks)-1]) {
		t.Errorf("last = %s %v %v, want %s", last, ok, err, ticks[len(ticks)-1])
	}
	for _, tick := range ticks {
		key := TickKey("once", tick)
		ttl, err := c.PTTL(ctx, key).Result()
		if err != nil || ttl <= time.Hour || ttl > opts.Expiry() {
			t.Errorf("%s expires in %s (%v), want within %s", key, ttl, err, opts.Expiry())
		}
	}
	if ttl := c.PTTL(ctx, LastKey("once")).Val(); ttl != -1 {
		t.Errorf("%s expires in %s, want never", LastKey("once"), ttl)
	}
}

// catch_up fires the ticks missed since last, once across two sources starting together.
func TestCatchUpOnceAcrossSources(t *testing.T) {
	srv := redistest.Shared(t)
	c := srv.Client(t)
	ctx := context.Background()
	last := time.Now().Truncate(time.Second).Add(-5 * time.Second)
	if err := c.Set(ctx, LastKey("catchup"), strconv.FormatInt(last.UnixMilli(), 10), 0).Err(); err != nil {
		t.Fatal(err)
	}
	opts := Options{Pipeline: "catchup", Clock: everySecond(t), CatchUp: time.Minute}
	a := transporttest.Receive(t, newSource(t, srv.Client(t), opts), 100)
	b := transporttest.Receive(t, newSource(t, srv.Client(t), opts), 100)
	ticks := collect(t, 6, a, b)
	consecutive(t, ticks)
	if !ticks[0].Equal(last.Add(time.Second)) {
		t.Errorf("first tick %s, want the one after last %s", ticks[0], last)
	}
	if got, _, _ := readLast(ctx, c, "catchup"); !got.Equal(ticks[len(ticks)-1]) {
		t.Errorf("last = %s, want %s", got, ticks[len(ticks)-1])
	}
}

// A retry copy is held in the process and handed over again with the tick as its id, once
// however often the engine sends the settlement; without Redis a dead letter has nowhere to go.
func TestRetryCopyHeldInProcess(t *testing.T) {
	src := newSource(t, nil, Options{Pipeline: "held", Clock: everySecond(t)})
	r := transporttest.Receive(t, src, 10)
	d := r.Next(t)
	tick := scheduledAt(t, d)
	d.Attempt = 1
	batch := []engine.Settlement{{Delivery: d, Action: engine.ActRequeue, Copy: d.RetryCopy()}}
	for range 2 {
		if err := src.Settle(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
	}
	c := r.Next(t)
	if !scheduledAt(t, c).Equal(tick) || c.Headers[engine.HeaderRetryCount] != "1" {
		t.Errorf("copy %q headers %v, want tick %s retried once", c.ID, c.Headers, tick)
	}
	if next := r.Next(t); scheduledAt(t, next).Equal(tick) {
		t.Errorf("the copy came back twice")
	}
	dl := []engine.Settlement{{Delivery: c, Action: engine.ActDeadLetter, Copy: c.RetryCopy(), DeadLetterKey: "held.dlq"}}
	var se *engine.SettleError
	if err := src.Settle(context.Background(), dl); !errors.As(err, &se) || !errors.Is(err, engine.ErrUnsupported) {
		t.Errorf("dead letter without Redis: %v, want unsupported", err)
	}
}

// With Redis a dead letter is XADDed to its stream, once.
func TestDeadLetterToStream(t *testing.T) {
	srv := redistest.Shared(t)
	c := srv.Client(t)
	src := newSource(t, srv.Client(t), Options{Pipeline: "dlq", Clock: everySecond(t)})
	d := src.delivery(time.Now().Truncate(time.Second))
	batch := []engine.Settlement{{Delivery: d, Action: engine.ActDeadLetter, Copy: d.RetryCopy(), DeadLetterKey: "dlq.dead"}}
	for range 2 {
		if err := src.Settle(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := c.XRange(context.Background(), "dlq.dead", "-", "+").Result()
	if err != nil || len(entries) != 1 || entries[0].Values[HeaderScheduledAt] != d.Headers[HeaderScheduledAt] {
		t.Errorf("dead letters %v (%v), want one with x-scheduled-at %s", entries, err, d.Headers[HeaderScheduledAt])
	}
}

// A take retried after a lost reply finds its own name in the key and owns the tick; another
// source does not.
func TestRetriedTakeOwnsItsOwnTick(t *testing.T) {
	srv := redistest.Shared(t)
	opts := Options{Pipeline: "retake", Clock: everySecond(t)}
	mine, other := newSource(t, srv.Client(t), opts), newSource(t, srv.Client(t), opts)
	tick := time.Now().Truncate(time.Second)
	for i, want := range []struct {
		s    *Source
		owns bool
	}{{mine, true}, {mine, true}, {other, false}} {
		owned, err := want.s.claims.Claim(context.Background(), tick)
		if err != nil || owned != want.owns {
			t.Errorf("take %d: owned %v (%v), want %v", i+1, owned, err, want.owns)
		}
	}
}

// Ready means Redis answered, with or without catch_up (SPEC §10): a source whose Redis is
// down from the start is not ready, and becomes so once it answers.
func TestNotReadyUntilRedisAnswers(t *testing.T) {
	srv, _ := redistest.Fresh(t)
	srv.Kill()
	s := newSource(t, srv.Client(t), Options{Pipeline: "ready", Clock: everySecond(t)})
	transporttest.Receive(t, s, 10)
	// A source that takes its first tick's start without Redis is ready at once; this one
	// must still not be after a few of its retries.
	if redistest.WaitFor(context.Background(), 500*time.Millisecond, s.Ready) {
		t.Fatal("ready with its Redis down")
	}
	srv.Restart(t)
	if !redistest.WaitFor(context.Background(), transporttest.Timeout, s.Ready) {
		t.Fatal("not ready after its Redis came back")
	}
}
