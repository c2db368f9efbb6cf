package engine

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// Batches are shared out across the workers: every delivery is handled once, at most
// concurrency at a time, several at once when a batch holds several.
func TestBatchesSpreadOverWorkers(t *testing.T) {
	src := &fakeSource{caps: Capabilities{Ack: true}, deliveries: deliveries(500), batch: 64}
	var g gauge
	p := pipeline(src, func(context.Context, *Delivery) Result {
		leave := g.enter()
		time.Sleep(100 * time.Microsecond)
		leave()
		return Result{Outcome: Ack()}
	})
	p.Concurrency = 4
	if err := run(t, context.Background(), Options{}, p); err != nil {
		t.Fatal(err)
	}
	settled, _, _ := src.snapshot()
	seen := map[string]int{}
	for _, s := range settled {
		seen[s.Delivery.ID]++
	}
	if len(settled) != 500 || len(seen) != 500 {
		t.Fatalf("settled %d (%d distinct), want 500", len(settled), len(seen))
	}
	if g.most() > 4 || g.most() < 2 {
		t.Fatalf("%d handlers at once, want 2..4 with concurrency 4", g.most())
	}
}

// releasingSource records what the engine hands back unstarted at a stop.
type releasingSource struct {
	fakeSource
	mu       sync.Mutex
	released []string
}

func (r *releasingSource) Return(ds []*Delivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range ds {
		r.released = append(r.released, d.ID)
	}
}

// At a stop, what was handed over but not started is returned to a source that can take it
// back, not handled: every delivery is either settled or returned, none both, none lost.
func TestStopReleasesUnstarted(t *testing.T) {
	src := &releasingSource{fakeSource: fakeSource{caps: Capabilities{Ack: true}, deliveries: deliveries(100), batch: 100, infinite: true}}
	started := make(chan struct{}, 100)
	release := make(chan struct{})
	p := pipeline(src, func(context.Context, *Delivery) Result {
		started <- struct{}{}
		<-release
		return Result{Outcome: Ack()}
	})
	p.Concurrency = 2
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- New(Options{}, p).Run(ctx) }()
	<-started
	<-started
	cancel()
	time.Sleep(20 * time.Millisecond) // the stop reaches the workers before they take more
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	settled, _, _ := src.snapshot()
	if len(settled)+len(src.released) != 100 {
		t.Fatalf("settled %d + released %d, want 100", len(settled), len(src.released))
	}
	if len(settled) > 4 {
		t.Errorf("settled %d after the stop, want only the handlers already running", len(settled))
	}
}

// A finite source ends with a summary line; progress lines come while it works.
func TestProgressAndSummary(t *testing.T) {
	ds := deliveries(30)
	src := &fakeSource{caps: Capabilities{Ack: true}, deliveries: ds}
	p := pipeline(src, func(_ context.Context, d *Delivery) Result {
		time.Sleep(time.Millisecond)
		if d.ID == "3" {
			return Result{Outcome: Retry()}
		}
		return Result{Outcome: Ack()}
	})
	p.DeadLetter, p.MaxAttempts, p.Concurrency = "dlq", 1, 1 // 30 ms at least: several ticks
	var logs syncBuf
	p.Logger = zerolog.New(&logs)
	if err := run(t, context.Background(), Options{Progress: 5 * time.Millisecond}, p); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if !strings.Contains(out, `"message":"progress"`) {
		t.Errorf("no progress line:\n%s", out)
	}
	want := `"read":30,"handled":30,"outcomes":{"ack":29,"dead_letter":1},"copies":0,"dead_letters":1`
	if !strings.Contains(out, want) || !strings.Contains(out, `"message":"input done"`) {
		t.Errorf("summary lacks %s:\n%s", want, out)
	}
}

// RoomFor waits until the queue can take n more (at most its limit), woken by the takes that
// free that much, and returns 0 once ctx ends.
func TestRoomFor(t *testing.T) {
	q := NewQueue(10)
	ctx := context.Background()
	if !q.Push(ctx, deliveries(8)) {
		t.Fatal("push refused")
	}
	got := make(chan int, 1)
	waits := func(what string) { // RoomFor has not returned (yet)
		t.Helper()
		select {
		case n := <-got:
			t.Fatalf("%s returned %d with %d queued", what, n, q.len())
		case <-time.After(20 * time.Millisecond):
		}
	}
	returns := func(what string, want int) {
		t.Helper()
		select {
		case n := <-got:
			if n != want {
				t.Fatalf("%s = %d, want %d", what, n, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s still waits with %d queued", what, q.len())
		}
	}

	go func() { got <- q.RoomFor(ctx, 6) }()
	for range 3 {
		q.Take()
		waits("RoomFor(6)")
	}
	q.Take() // 6 free now
	returns("RoomFor(6)", 6)

	go func() { got <- q.RoomFor(ctx, 50) }() // more than it holds: until it is empty
	for range 4 {
		waits("RoomFor(50)")
		q.Take()
	}
	returns("RoomFor(50)", 10)

	// Room for all of it is not there (one queued), so it waits until its context ends.
	q.Push(ctx, deliveries(1))
	cctx, cancel := context.WithCancel(ctx)
	go func() { got <- q.RoomFor(cctx, 10) }()
	waits("RoomFor(10)")
	cancel()
	returns("RoomFor(10) after the end of its context", 0)
	q.Take()
	if n := q.RoomFor(cctx, 1); n != 0 {
		t.Fatalf("RoomFor with room and an ended context = %d, want 0", n)
	}
}
