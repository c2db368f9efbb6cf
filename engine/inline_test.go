package engine

import (
	"bytes"
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// idleWorkers is how many workers wait on q.
func (q *Queue) idleWorkers() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.waiting
}

// waitWaiting polls until n workers wait on q.
func waitWaiting(t *testing.T, q *Queue, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		q.mu.Lock()
		w := q.waiting
		q.mu.Unlock()
		if w == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d workers waiting, want %d", w, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A push of a few deliveries while every worker waits runs them through the inline func on
// the pushing goroutine, in order, before Push returns; the workers get nothing.
func TestQueueRunsInlineWhenWorkersIdle(t *testing.T) {
	q := NewQueue(16)
	var ran []string
	q.SetInline(2, func(ds []*Delivery) int {
		for _, d := range ds {
			ran = append(ran, d.ID)
		}
		return len(ds)
	})
	var taken atomic.Int32
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if _, ok := q.Take(); !ok {
					return
				}
				taken.Add(1)
			}
		}()
	}
	waitWaiting(t, q, 2)
	ctx := context.Background()
	ds := []*Delivery{{Message: Message{ID: "1"}}, {Message: Message{ID: "2"}}, {Message: Message{ID: "3"}}}
	if !q.Push(ctx, ds) {
		t.Fatal("Push refused")
	}
	if len(ran) != 3 || ran[0] != "1" || ran[2] != "3" {
		t.Fatalf("ran inline %v, want [1 2 3]", ran)
	}
	// More than inlineMax at once: the workers share them out.
	var big []*Delivery
	for range inlineMax + 1 {
		big = append(big, &Delivery{})
	}
	q.Push(ctx, big)
	q.Close()
	wg.Wait()
	if len(ran) != 3 || taken.Load() != int32(inlineMax+1) {
		t.Fatalf("ran inline %d, workers took %d; want 3 and %d", len(ran), taken.Load(), inlineMax+1)
	}
}

// Nothing runs inline while a worker is busy, and what the inline func refuses is queued for
// the workers.
func TestQueueInlineOnlyWhenAllIdle(t *testing.T) {
	q := NewQueue(16)
	var inline atomic.Int32
	var refuse atomic.Bool
	q.SetInline(1, func(ds []*Delivery) int {
		if refuse.Load() {
			return 0
		}
		inline.Add(int32(len(ds)))
		return len(ds)
	})
	ctx := context.Background()
	// No worker waits yet: queued.
	q.Push(ctx, []*Delivery{{}})
	if inline.Load() != 0 || q.len() != 1 {
		t.Fatalf("inline %d, queued %d; want 0 and 1", inline.Load(), q.len())
	}
	release := make(chan struct{})
	took := make(chan struct{}, 4)
	go func() {
		for {
			if _, ok := q.Take(); !ok {
				return
			}
			took <- struct{}{}
			<-release // busy
		}
	}()
	<-took
	q.Push(ctx, []*Delivery{{}}) // the one worker is busy
	if inline.Load() != 0 || q.len() != 1 {
		t.Fatalf("inline %d, queued %d with the worker busy; want 0 and 1", inline.Load(), q.len())
	}
	release <- struct{}{}
	<-took
	release <- struct{}{}
	waitWaiting(t, q, 1)
	refuse.Store(true)
	q.Push(ctx, []*Delivery{{}})
	<-took
	if inline.Load() != 0 {
		t.Fatalf("inline ran %d where it refused", inline.Load())
	}
	release <- struct{}{}
	waitWaiting(t, q, 1)
	refuse.Store(false)
	q.Push(ctx, []*Delivery{{}})
	if inline.Load() != 1 {
		t.Fatalf("inline ran %d with the worker idle again, want 1", inline.Load())
	}
	q.Close()
}

func goroutineID() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	id, _, _ := bytes.Cut(bytes.TrimPrefix(b, []byte("goroutine ")), []byte(" "))
	return string(id)
}

// idSource pushes its deliveries one at a time, noting its goroutine, and waits for each to be
// settled before the next, as a source at a low rate does.
type idSource struct {
	fakeSource
	id      string
	settled chan struct{}
}

func (s *idSource) Receive(ctx context.Context, feed Feed) error {
	s.id = goroutineID()
	for _, d := range s.deliveries {
		if q, ok := feed.(*Queue); ok && q.inline != nil {
			// As at a low rate: every worker waits again before the next message comes (the one
			// that handled the last may still be on its way back when its settlement is done).
			deadline := time.Now().Add(5 * time.Second)
			for q.idleWorkers() < q.workers && time.Now().Before(deadline) {
				time.Sleep(100 * time.Microsecond)
			}
		}
		if feed.Room(ctx) == 0 || !feed.Push(ctx, []*Delivery{d}) {
			return ctx.Err()
		}
		select {
		case <-s.settled:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (s *idSource) Settle(ctx context.Context, batch []Settlement) error {
	err := s.fakeSource.Settle(ctx, batch)
	for range batch {
		s.settled <- struct{}{}
	}
	return err
}

type inlineHandler struct {
	HandlerFunc
	inline bool
}

func (h inlineHandler) Inline() bool { return h.inline }

// An Inliner handler runs on the source's goroutine when the workers are idle; any other
// handler runs on a worker. (Under flow control, TestRunInlineWithFlowControl: here the flow
// key cannot be computed, so no handler runs at all.)
func TestRunInlineHandler(t *testing.T) {
	for _, tc := range []struct {
		name       string
		inline     bool
		flow       *Flow
		wantSource bool
	}{
		{"inliner", true, nil, true},
		{"inline false", false, nil, false},
		{"flow control", true, &Flow{Concurrency: &ConcurrencyKey{Key: headerKey("k"), Limit: 1}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			onSource, elsewhere := runOnSource(t, deliveries(20), tc.inline, tc.flow)
			if tc.wantSource && (onSource != 20 || elsewhere != 0) {
				t.Fatalf("%d of 20 ran on the source's goroutine, want all", onSource)
			}
			if !tc.wantSource && onSource != 0 {
				t.Fatalf("%d ran on the source's goroutine, want none", onSource)
			}
		})
	}
}

// runOnSource runs ds through an idSource, one push at a time, and counts the handlers that ran
// on the source's goroutine and elsewhere; every delivery must be settled.
func runOnSource(t *testing.T, ds []*Delivery, inline bool, flow *Flow) (onSource, elsewhere int32) {
	t.Helper()
	src := &idSource{fakeSource: fakeSource{caps: Capabilities{Ack: true}, deliveries: ds}, settled: make(chan struct{}, len(ds))}
	var on, off atomic.Int32
	h := inlineHandler{inline: inline, HandlerFunc: func(context.Context, *Delivery) Result {
		if goroutineID() == src.id {
			on.Add(1)
		} else {
			off.Add(1)
		}
		return Result{Outcome: Ack()}
	}}
	p := &Pipeline{Name: "p", Source: src, Handler: h, Concurrency: 2, ShutdownTimeout: 5 * time.Second, Flow: flow, Logger: zerolog.Nop()}
	if err := run(t, context.Background(), Options{}, p); err != nil {
		t.Fatal(err)
	}
	if settled, _, _ := src.snapshot(); len(settled) != len(ds) {
		t.Fatalf("settled %d, want %d", len(settled), len(ds))
	}
	return on.Load(), off.Load()
}

// mixedSource pushes 6 deliveries (more than run inline), then 1, and so on, without waiting:
// the small pushes come while workers are busy with the large ones.
type mixedSource struct{ fakeSource }

func (s *mixedSource) Receive(ctx context.Context, feed Feed) error {
	for i, size := 0, 6; i < len(s.deliveries); size = 7 - size {
		b := s.deliveries[i:min(i+size, len(s.deliveries))]
		i += len(b)
		if feed.RoomFor(ctx, len(b)) == 0 || !feed.Push(ctx, b) {
			return ctx.Err()
		}
	}
	return nil
}

// SPEC §11: concurrency bounds the handlers in flight, inline runs included: pushes small
// enough to run inline, while workers are busy with earlier ones, never put more than
// concurrency handlers at work at once.
func TestInlineKeepsConcurrency(t *testing.T) {
	for _, conc := range []int{1, 2} {
		src := &mixedSource{fakeSource: fakeSource{caps: Capabilities{Ack: true, Batch: 8}, deliveries: deliveries(400)}}
		var g gauge
		var total atomic.Int32
		h := inlineHandler{inline: true, HandlerFunc: func(context.Context, *Delivery) Result {
			leave := g.enter()
			time.Sleep(20 * time.Microsecond)
			leave()
			total.Add(1)
			return Result{Outcome: Ack()}
		}}
		p := &Pipeline{Name: "p", Source: src, Handler: h, Concurrency: conc, ShutdownTimeout: 5 * time.Second, Logger: zerolog.Nop()}
		if err := run(t, context.Background(), Options{}, p); err != nil {
			t.Fatal(err)
		}
		if total.Load() != 400 || g.most() > int32(conc) {
			t.Fatalf("concurrency %d: handled %d of 400, %d at once", conc, total.Load(), g.most())
		}
	}
}

// groupSource pushes its deliveries three at a time once every worker waits, and waits for each
// push to be settled before the next: reads of a few entries at a low rate.
type groupSource struct{ idSource }

func (s *groupSource) Receive(ctx context.Context, feed Feed) error {
	q := feed.(*Queue)
	for i := 0; i < len(s.deliveries); i += 3 {
		deadline := time.Now().Add(5 * time.Second)
		for q.idleWorkers() < q.workers && time.Now().Before(deadline) {
			time.Sleep(100 * time.Microsecond)
		}
		b := s.deliveries[i:min(i+3, len(s.deliveries))]
		if feed.Room(ctx) == 0 || !feed.Push(ctx, b) {
			return ctx.Err()
		}
		for range b {
			select {
			case <-s.settled:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// The deliveries of a push run inline reach the settler once all of them are decided, so one
// wake of the settler settles the read: no settlement of a push comes while its handlers run.
func TestInlinePushDecidedBeforeSettled(t *testing.T) {
	src := &groupSource{idSource{fakeSource: fakeSource{caps: Capabilities{Ack: true}, deliveries: deliveries(30)}, settled: make(chan struct{}, 30)}}
	var early atomic.Int32 // handlers that ran after a settlement of their own push
	h := inlineHandler{inline: true, HandlerFunc: func(_ context.Context, d *Delivery) Result {
		n, _ := strconv.Atoi(d.ID)
		pushStart := (n - 1) / 3 * 3 // deliveries settled before this push
		if settled, _, _ := src.snapshot(); len(settled) > pushStart {
			early.Add(1)
		}
		time.Sleep(200 * time.Microsecond) // time enough for a woken settler to settle
		return Result{Outcome: Ack()}
	}}
	p := &Pipeline{Name: "p", Source: src, Handler: h, Concurrency: 2, ShutdownTimeout: 5 * time.Second, Logger: zerolog.Nop()}
	if err := run(t, context.Background(), Options{}, p); err != nil {
		t.Fatal(err)
	}
	if settled, _, _ := src.snapshot(); len(settled) != 30 {
		t.Fatalf("settled %d, want 30", len(settled))
	}
	if early.Load() != 0 {
		t.Fatalf("%d handlers ran after a settlement of their own push, want none", early.Load())
	}
}

// Flow control admits in the queue, so inline handling stays on with it: while every worker
// waits, a push's round goes out from the source's goroutine and its admitted deliveries run
// there, whatever the flow block; each key's rules still hold.
func TestRunInlineWithFlowControl(t *testing.T) {
	for _, tc := range []struct {
		name string
		flow *Flow
	}{
		{"concurrency_key", &Flow{Concurrency: &ConcurrencyKey{Key: headerKey("k"), Limit: 1}}},
		{"throttle", &Flow{Throttle: &Throttle{Key: headerKey("k"), Limit: 1000, Period: time.Second}}},
		{"dedupe", &Flow{Dedupe: &Dedupe{Key: headerKey("k"), Window: time.Hour}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := deliveries(20)
			for _, d := range ds {
				d.Headers["k"] = d.ID // one key each: nothing waits for another
			}
			if onSource, elsewhere := runOnSource(t, ds, true, tc.flow); onSource != 20 || elsewhere != 0 {
				t.Fatalf("%d of 20 ran on the source's goroutine (%d elsewhere), want all", onSource, elsewhere)
			}
		})
	}
}
