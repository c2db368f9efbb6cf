package redislist

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/redistest"
	"github.com/flowrun/flowrun/transports/redisconn"
	"github.com/flowrun/flowrun/transports/transporttest"
)

func TestNewOptions(t *testing.T) {
	_, c := redistest.Fresh(t)
	src := newSource(t, c, Options{Key: "orders", Reliable: true, Consumer: "w1"})
	if got := src.Options(); got.Processing != "orders:processing:w1" || got.Batch != DefaultBatch {
		t.Fatalf("defaults: processing %q batch %d", got.Processing, got.Batch)
	}
	if _, err := New(c, Options{}, zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "key is required") {
		t.Fatalf("no key: %v", err)
	}
	if _, err := New(c, Options{Key: "k", Reliable: true, Processing: "k"}, zerolog.Nop()); err == nil {
		t.Fatal("processing list equal to the key was accepted")
	}
	if got := newSource(t, c, Options{Key: "k"}).Options(); got.Processing != "" {
		t.Fatalf("simple list has processing list %q", got.Processing)
	}
}

func TestCrashRecoveryAtStart(t *testing.T) {
	_, c := redistest.Fresh(t)
	ctx := context.Background()
	src := newSource(t, c, Options{Key: "jobs", Reliable: true, Consumer: "w1", Batch: 10})
	// What a crash leaves: p1 was moved first (oldest), so it sits at the right end.
	lpush(t, c, "jobs:processing:w1", "p1", "p2", "p3")
	lpush(t, c, "jobs", "n1", "n2")
	r := transporttest.Receive(t, src, src.opts.Batch)
	var got []string
	for range 5 {
		d := r.Next(t)
		got = append(got, string(d.Payload))
		if err := src.Settle(ctx, []engine.Settlement{{Delivery: d, Action: engine.ActAck}}); err != nil {
			t.Fatal(err)
		}
	}
	// The recovered elements are read first, in their original order.
	if want := []string{"p1", "p2", "p3", "n1", "n2"}; !slices.Equal(got, want) {
		t.Fatalf("read order %q, want %q", got, want)
	}
	wantList(t, c, "jobs")
	wantList(t, c, "jobs:processing:w1")
}

func TestStopReturnsUnhandled(t *testing.T) {
	for _, reliable := range []bool{true, false} {
		t.Run(fmt.Sprintf("reliable=%v", reliable), func(t *testing.T) {
			_, c := redistest.Fresh(t)
			src := newSource(t, c, Options{Key: "q", Reliable: reliable, Consumer: "w1", Batch: 5})
			lpush(t, c, "q", "e1", "e2", "e3", "e4", "e5", "e6")
			r := transporttest.Receive(t, src, src.opts.Batch)
			d1, d2 := r.Next(t), r.Next(t)
			if string(d1.Payload) != "e1" || string(d2.Payload) != "e2" {
				t.Fatalf("read %q, %q", d1.Payload, d2.Payload)
			}
			// The batch is read (and, once room frees, maybe the last element too).
			transporttest.WaitFor(t, "the batch to be read", func() bool { return llen(t, c, "q") <= 1 })
			if err := r.Stop(t); err != nil {
				t.Fatal(err)
			}
			src.Close() // as the engine does after a stop
			// e3..e5 were read but never taken by a handler: back at the read end, in order.
			wantList(t, c, "q", "e6", "e5", "e4", "e3")
			if reliable {
				// The two the engine holds stay in processing until they are settled.
				wantList(t, c, "q:processing:w1", "e2", "e1")
				if err := src.Settle(context.Background(), []engine.Settlement{
					{Delivery: d1, Action: engine.ActAck}, {Delivery: d2, Action: engine.ActAck},
				}); err != nil {
					t.Fatal(err)
				}
				wantList(t, c, "q:processing:w1")
			}
		})
	}
}

func TestBackpressure(t *testing.T) {
	for _, reliable := range []bool{true, false} {
		t.Run(fmt.Sprintf("reliable=%v", reliable), func(t *testing.T) {
			_, c := redistest.Fresh(t)
			const batch, total = 10, 100
			src := newSource(t, c, Options{Key: "bp", Reliable: reliable, Consumer: "w1", Batch: batch})
			elems := make([]string, total)
			for i := range elems {
				elems[i] = fmt.Sprintf("e%03d", i)
			}
			lpush(t, c, "bp", elems...)
			r := transporttest.Receive(t, src, src.opts.Batch)
			out := func() int64 { return total - llen(t, c, "bp") } // moved out of the list
			transporttest.WaitFor(t, "the first batch", func() bool { return out() == batch })
			// Nothing taken: no further read.
			time.Sleep(200 * time.Millisecond) // asserting that nothing happens needs a wait
			if n := out(); n != batch {
				t.Fatalf("%d elements out of the list with none taken, want %d", n, batch)
			}
			// However many are taken, reads stay within one batch of them (the feed's
			// goroutine holds one more, as a handler would).
			for i := range 3 * batch {
				if d := r.Next(t); string(d.Payload) != elems[i] {
					t.Fatalf("delivery %d = %q, want %q", i, d.Payload, elems[i])
				}
				time.Sleep(5 * time.Millisecond)
				if n := out(); n > int64(i+1+1+batch) {
					t.Fatalf("%d out with %d taken, want at most taken + 1 + batch %d", n, i+1, batch)
				}
			}
			transporttest.WaitFor(t, "reads to go on", func() bool { return out() > 3*batch })
			if reliable {
				if n, m := llen(t, c, "bp:processing:w1"), out(); n != m {
					t.Fatalf("processing list holds %d, want the %d out of the list", n, m)
				}
			}
		})
	}
}

func TestEngineBackpressure(t *testing.T) {
	_, c := redistest.Fresh(t)
	// With 7 handlers busy and batch 5, reads stop once the engine holds a batch it cannot
	// start: at most N + batch elements are out of the list.
	const n, batch, total = 7, 5, 60
	src := newSource(t, c, Options{Key: "ebp", Reliable: true, Consumer: "w1", Batch: batch})
	for i := range total {
		lpush(t, c, "ebp", fmt.Sprint(i))
	}
	release := make(chan struct{})
	var mu sync.Mutex
	handled := map[string]int{}
	stop := transporttest.RunPipeline(t, &engine.Pipeline{Source: src, Concurrency: n,
		Handler: engine.HandlerFunc(func(ctx context.Context, d *engine.Delivery) engine.Result {
			select {
			case <-release:
			case <-ctx.Done():
			}
			mu.Lock()
			handled[string(d.Payload)]++
			mu.Unlock()
			return engine.Result{Outcome: engine.Ack()}
		})})
	transporttest.WaitFor(t, "every handler busy", func() bool { return llen(t, c, "ebp:processing:w1") >= n })
	time.Sleep(300 * time.Millisecond) // asserting that reading stopped needs a wait
	if got := llen(t, c, "ebp:processing:w1"); got > n+batch {
		t.Fatalf("processing list holds %d with every handler busy, want ≤ N + batch = %d", got, n+batch)
	}
	close(release)
	transporttest.WaitFor(t, "the backlog to drain", func() bool {
		return llen(t, c, "ebp") == 0 && llen(t, c, "ebp:processing:w1") == 0
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if len(handled) != total {
		t.Fatalf("handled %d distinct elements, want %d", len(handled), total)
	}
}

// TestEngineOutcomes runs SPEC §4's rows through the engine: ack, drop, retry up to the cap into
// the dead-letter list, and retry_after's runtime copy back to the list.
func TestEngineOutcomes(t *testing.T) {
	for _, reliable := range []bool{true, false} {
		t.Run(fmt.Sprintf("reliable=%v", reliable), func(t *testing.T) {
			_, c := redistest.Fresh(t)
			src := newSource(t, c, Options{Key: "eo", Reliable: reliable, Consumer: "w1", Batch: 4})
			lpush(t, c, "eo", "ack", "drop", `{"headers":{"h":"v"},"payload":"retry"}`, "later")
			var mu sync.Mutex
			var seen []string
			stop := transporttest.RunPipeline(t, &engine.Pipeline{Source: src, Concurrency: 2, MaxAttempts: 2, DeadLetter: "eo.dlq",
				Handler: engine.HandlerFunc(func(ctx context.Context, d *engine.Delivery) engine.Result {
					mu.Lock()
					seen = append(seen, fmt.Sprintf("%s/%d", d.Payload, d.Attempt))
					mu.Unlock()
					switch p := string(d.Payload); {
					case p == "drop":
						return engine.Result{Outcome: engine.Drop()}
					case p == "retry":
						return engine.Result{Outcome: engine.Retry()}
					case p == "later" && d.Attempt == 1:
						return engine.Result{Outcome: engine.RetryAfter(100 * time.Millisecond)}
					}
					return engine.Result{Outcome: engine.Ack()}
				})})
			transporttest.WaitFor(t, "six handler runs", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 6 })
			transporttest.WaitFor(t, "a dead letter", func() bool { return llen(t, c, "eo.dlq") == 1 })
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			slices.Sort(seen)
			if want := []string{"ack/1", "drop/1", "later/1", "later/2", "retry/1", "retry/2"}; !slices.Equal(seen, want) {
				t.Fatalf("handled %q, want %q", seen, want)
			}
			wantList(t, c, "eo")
			wantList(t, c, "eo:processing:w1")
			dl := lrange(t, c, "eo.dlq")[0]
			for _, part := range []string{`"h":"v"`, `"x-attempts":"2"`, `"x-original-key":"eo"`, `"x-retry-count":"1"`, `"payload":"retry"`} {
				if !strings.Contains(dl, part) {
					t.Fatalf("dead letter %s lacks %s", dl, part)
				}
			}
		})
	}
}

func TestReconnect(t *testing.T) {
	// With AOF the processing list survives the restart, as on a persistent production server.
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	c := srv.Client(t)
	ctx := context.Background()
	old := sweepEvery
	t.Cleanup(func() { sweepEvery = old })
	sweepEvery = time.Hour // only the failed read may trigger the sweep here

	src := newSource(t, c, Options{Key: "rc", Reliable: true, Consumer: "w1"})
	lpush(t, c, "rc", "before")
	r := transporttest.Receive(t, src, src.opts.Batch)
	d := r.Next(t)
	transporttest.WaitFor(t, "ready", src.Ready)
	// A BLMOVE whose reply was lost: an element in processing that the engine never got.
	lpush(t, c, "rc:processing:w1", "stray")

	srv.Kill()
	transporttest.WaitFor(t, "not ready while Redis is down", func() bool { return !src.Ready() })
	srv.Restart(t)
	transporttest.WaitFor(t, "ready again", src.Ready)

	// The settlement the engine retries after the reconnect simply succeeds.
	if err := src.Settle(ctx, []engine.Settlement{{Delivery: d, Action: engine.ActAck}}); err != nil {
		t.Fatal(err)
	}
	// The stray element went back to the list and is read again; new elements flow.
	if got := r.Next(t); string(got.Payload) != "stray" {
		t.Fatalf("after reconnect read %q, want stray", got.Payload)
	}
	lpush(t, c, "rc", "after")
	got := r.Next(t)
	if string(got.Payload) != "after" {
		t.Fatalf("read %q, want after", got.Payload)
	}
	wantList(t, c, "rc:processing:w1", "after", "stray")
}

func TestAuthErrorEndsReceive(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "s3cret-pw")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "wrong-pw"})
	t.Cleanup(func() { c.Close() })
	src := newSource(t, c, Options{Key: "auth", Reliable: true, Consumer: "w1"})
	done := make(chan error, 1)
	go func() { done <- src.Receive(context.Background(), engine.NewQueue(1)) }()
	select {
	case err := <-done:
		if !redisconn.IsAuthError(err) || strings.Contains(err.Error(), "wrong-pw") {
			t.Fatalf("Receive = %v, want a redacted auth error", err)
		}
	case <-time.After(transporttest.Timeout):
		t.Fatal("Receive kept retrying an authentication error")
	}
}

func TestCluster(t *testing.T) {
	c := redistest.StartCluster(t).ClusterClient(t)
	ctx := context.Background()
	if _, err := New(c, Options{Key: "orders", Reliable: true, Consumer: "w1"}, zerolog.Nop()); err == nil ||
		!strings.Contains(err.Error(), "hash tag") {
		t.Fatalf("untagged processing list in a cluster: %v", err)
	}
	src := newSource(t, c, Options{Key: "{orders}", Reliable: true, Consumer: "w1"})
	lpush(t, c, "{orders}", "a", "b", "c")
	r := transporttest.Receive(t, src, src.opts.Batch)
	ds := []*engine.Delivery{r.Next(t), r.Next(t), r.Next(t)}
	r.Stop(t)
	// The dead letter is on another slot: written first, outside the MULTI.
	batch := []engine.Settlement{
		settlement(src, ds[0], engine.Ack(), 0),
		settlement(src, ds[1], engine.Retry(), 0),
		settlement(src, ds[2], engine.DeadLetter("x"), 0),
	}
	if err := src.Settle(ctx, batch); err != nil {
		t.Fatal(err)
	}
	wantList(t, c, "{orders}:processing:w1")
	wantList(t, c, "{orders}", `{"headers":{"x-retry-count":"1"},"payload":"b"}`)
	if n := llen(t, c, "dlq"); n != 1 {
		t.Fatalf("dlq has %d, want 1", n)
	}
	if err := NewSink(c).Publish(ctx, &engine.Message{Key: "x1", Payload: []byte("1")}, &engine.Message{Key: "x2", Payload: []byte("2")}); err != nil {
		t.Fatal(err)
	}
	wantList(t, c, "x1", "1")
	wantList(t, c, "x2", "2")
}

// TestSweepLeavesHeldElements: a sweep returns exactly the processing list's elements the
// engine does not hold, counting equal elements one by one, across reads partly settled.
func TestSweepLeavesHeldElements(t *testing.T) {
	_, c := redistest.Fresh(t)
	ctx := context.Background()
	src := newSource(t, c, Options{Key: "sw", Reliable: true, Consumer: "w1"})
	// Newest first: "gone" was moved first, so it sits at the right end.
	lpush(t, c, "sw:processing:w1", "gone", "dup", "dup", "solo", "settled")
	first := []token{{elem: "dup"}, {elem: "settled"}}
	second := []token{{elem: "solo"}}
	src.count(first)
	src.count(second)
	src.uncount(&first[1]) // settled: no longer held, though still in the list here
	if err := src.sweep(ctx, false); err != nil {
		t.Fatal(err)
	}
	wantList(t, c, "sw:processing:w1", "solo", "dup")
	wantList(t, c, "sw", "settled", "dup", "gone")
	src.uncount(&first[0], &second[0], &second[0]) // uncounting twice changes nothing
	if n := len(src.heldElements()); n != 0 {
		t.Fatalf("%d elements still held", n)
	}
	if len(src.held) != 0 {
		t.Fatalf("%d reads still held", len(src.held))
	}
}
