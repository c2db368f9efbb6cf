package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// fakeSource is the recording transport DESIGN.md allows in engine tests: it hands out the given
// deliveries and records every call, in order, in a shared event log.
type fakeSource struct {
	caps       Capabilities
	deliveries []*Delivery
	infinite   bool // block after the last delivery until ctx ends
	receiveErr error
	failSettle int  // fail this many Settle calls first
	partial    bool // a failing Settle carries out all but the last settlement
	batch      int  // hand deliveries over in batches of this many (default 1)

	mu       sync.Mutex
	events   []string
	settled  []Settlement
	requeued []*Message
	closed   bool
}

func (f *fakeSource) Receive(ctx context.Context, feed Feed) error {
	batch := max(f.batch, 1)
	for i := 0; i < len(f.deliveries); i += batch {
		b := append([]*Delivery(nil), f.deliveries[i:min(i+batch, len(f.deliveries))]...) // the engine owns what it is pushed
		if feed.Room(ctx) == 0 || !feed.Push(ctx, b) {
			return ctx.Err()
		}
	}
	if f.receiveErr != nil {
		return f.receiveErr
	}
	if f.infinite {
		<-ctx.Done()
		f.log("receive returned")
		return ctx.Err()
	}
	return nil
}

func (f *fakeSource) Settle(_ context.Context, batch []Settlement) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failSettle > 0 {
		f.failSettle--
		if f.partial && len(batch) > 1 {
			for _, s := range batch[:len(batch)-1] {
				f.settled = append(f.settled, s)
			}
			return partialErr{failed: []int{len(batch) - 1}}
		}
		return errors.New("connection refused")
	}
	for _, s := range batch {
		f.settled = append(f.settled, s)
		f.events = append(f.events, "settle "+s.Action.String()+" "+s.Delivery.ID)
	}
	return nil
}

func (f *fakeSource) Requeue(_ context.Context, msgs []*Message) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range msgs {
		f.requeued = append(f.requeued, m)
		f.events = append(f.events, "requeue "+m.Key+" "+m.Headers[HeaderRetryCount])
	}
	return nil
}

func (f *fakeSource) Capabilities() Capabilities {
	c := f.caps
	c.Batch = max(c.Batch, f.batch)
	return c
}
func (f *fakeSource) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

func (f *fakeSource) log(ev string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, ev)
}

func (f *fakeSource) snapshot() ([]Settlement, []*Message, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Settlement(nil), f.settled...), append([]*Message(nil), f.requeued...), append([]string(nil), f.events...)
}

func deliveries(n int) []*Delivery {
	ds := make([]*Delivery, n)
	for i := range ds {
		ds[i] = &Delivery{Message: Message{Key: "in", ID: strconv.Itoa(i + 1), Headers: map[string]string{}, Payload: []byte(strconv.Itoa(i))}}
	}
	return ds
}

func pipeline(src Source, h HandlerFunc) *Pipeline {
	return &Pipeline{Name: "p", Source: src, Handler: h, Concurrency: 4, ShutdownTimeout: 5 * time.Second, Logger: zerolog.Nop()}
}

func run(t *testing.T, ctx context.Context, opts Options, ps ...*Pipeline) error {
	t.Helper()
	return runEngine(t, ctx, New(opts, ps...))
}

// runEngine runs e to its end, failing the test if that takes more than 20 seconds; a test that
// reads e afterwards (its Status) passes its own engine.
func runEngine(t *testing.T, ctx context.Context, e *Engine) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

// gauge counts the handlers at work and the most at once.
type gauge struct{ now, peak atomic.Int32 }

// enter notes a handler starting; the func it returns notes it ending.
func (g *gauge) enter() (leave func()) {
	n := g.now.Add(1)
	for {
		old := g.peak.Load()
		if n <= old || g.peak.CompareAndSwap(old, n) {
			break
		}
	}
	return func() { g.now.Add(-1) }
}

// most is the most handlers at work at once so far.
func (g *gauge) most() int32 { return g.peak.Load() }

func TestRunSettlesEveryDeliveryWithinConcurrency(t *testing.T) {
	src := &fakeSource{caps: Capabilities{Ack: true}, deliveries: deliveries(200)}
	var g gauge
	p := pipeline(src, func(_ context.Context, d *Delivery) Result {
		defer g.enter()()
		if d.Attempt != 1 {
			return Result{Err: fmt.Errorf("attempt %d", d.Attempt)}
		}
		return Result{Outcome: Ack()}
	})
	p.Concurrency = 3
	if err := run(t, context.Background(), Options{}, p); err != nil {
		t.Fatal(err)
	}
	settled, _, _ := src.snapshot()
	if len(settled) != 200 {
		t.Fatalf("settled %d, want 200", len(settled))
	}
	seen := map[string]bool{}
	for _, s := range settled {
		if s.Action != ActAck {
			t.Fatalf("delivery %s: %s, want ack", s.Delivery.ID, s.Action)
		}
		seen[s.Delivery.ID] = true
	}
	if len(seen) != 200 {
		t.Fatalf("%d distinct deliveries settled, want 200", len(seen))
	}
	if g.most() > 3 {
		t.Fatalf("%d handlers ran at once, concurrency is 3", g.most())
	}
	if !src.closed {
		t.Fatal("source not closed")
	}
}

func TestRunPanicAndErrorBecomeRetry(t *testing.T) {
	ds := deliveries(2)
	ds[1].Headers[HeaderRetryCount] = "4"
	src := &fakeSource{caps: Capabilities{Ack: true}, deliveries: ds}
	p := pipeline(src, func(_ context.Context, d *Delivery) Result {
		if d.ID == "1" {
			panic("boom")
		}
		return Result{Outcome: Ack(), Err: errors.New("failed")}
	})
	var logs syncBuf
	p.Logger = zerolog.New(&logs)
	if err := run(t, context.Background(), Options{}, p); err != nil {
		t.Fatal(err)
	}
	settled, _, _ := src.snapshot()
	if len(settled) != 2 {
		t.Fatalf("settled %d", len(settled))
	}
	out := logs.String()
	if strings.Count(out, `"stack":"goroutine`) != 1 || !strings.Contains(out, `"error":"handler panicked: boom"`) || !strings.Contains(out, `"error":"failed"`) {
		t.Errorf("want one logged stack for the panic and both errors logged:\n%s", out)
	}
	for _, s := range settled {
		if s.Action != ActRequeue {
			t.Errorf("delivery %s: %s, want requeue", s.Delivery.ID, s.Action)
		}
		want := strconv.Itoa(s.Delivery.Attempt)
		if s.Copy.Headers[HeaderRetryCount] != want {
			t.Errorf("copy of %s: x-retry-count %q, want %s", s.Delivery.ID, s.Copy.Headers[HeaderRetryCount], want)
		}
	}
}

func TestRunCapBeforeHandler(t *testing.T) {
	ds := deliveries(2)
	ds[0].Headers[HeaderRetryCount] = "3" // attempt 4 > 3: never runs
	ds[1].Headers[HeaderRetryCount] = "2" // attempt 3: runs, then dead-lettered on retry
	src := &fakeSource{caps: Capabilities{Ack: true}, deliveries: ds}
	var ran sync.Map
	p := pipeline(src, func(_ context.Context, d *Delivery) Result {
		ran.Store(d.ID, true)
		return Result{Outcome: Retry()}
	})
	p.MaxAttempts, p.DeadLetter = 3, "dlq"
	if err := run(t, context.Background(), Options{}, p); err != nil {
		t.Fatal(err)
	}
	if _, ok := ran.Load("1"); ok {
		t.Error("handler ran for a delivery past the cap")
	}
	if _, ok := ran.Load("2"); !ok {
		t.Error("handler did not run on the last attempt")
	}
	settled, _, _ := src.snapshot()
	for _, s := range settled {
		if s.Action != ActDeadLetter || s.DeadLetterKey != "dlq" {
			t.Errorf("delivery %s: %s to %q, want dead letter", s.Delivery.ID, s.Action, s.DeadLetterKey)
		}
		if got, want := s.Copy.Headers[HeaderAttempts], strconv.Itoa(s.Delivery.Attempt); got != want {
			t.Errorf("x-attempts %s, want %s", got, want)
		}
	}
}

func TestRunRuntimeDelayWaitsAtEndOfInput(t *testing.T) {
	src := &fakeSource{caps: Capabilities{}, deliveries: deliveries(1)}
	p := pipeline(src, func(context.Context, *Delivery) Result { return Result{Outcome: RetryAfter(150 * time.Millisecond)} })
	start := time.Now()
	if err := run(t, context.Background(), Options{}, p); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 150*time.Millisecond {
		t.Errorf("returned after %v, before the copy was due", el)
	}
	_, requeued, events := src.snapshot()
	if len(requeued) != 1 || requeued[0].Headers[HeaderRetryCount] != "1" || requeued[0].Key != "in" {
		t.Fatalf("requeued %+v", requeued)
	}
	if want := []string{"settle ack 1", "requeue in 1"}; fmt.Sprint(events) != fmt.Sprint(want) {
		t.Errorf("events %v, want %v", events, want)
	}
}

func TestRunEndOfInputWaitsAtMostShutdownTimeout(t *testing.T) {
	src := &fakeSource{caps: Capabilities{}, deliveries: deliveries(1)}
	p := pipeline(src, func(context.Context, *Delivery) Result { return Result{Outcome: RetryAfter(time.Hour)} })
	p.ShutdownTimeout = 100 * time.Millisecond
	if err := run(t, context.Background(), Options{}, p); err != nil {
		t.Fatal(err)
	}
	if _, requeued, _ := src.snapshot(); len(requeued) != 1 {
		t.Fatalf("held copy not written at the end: %d", len(requeued))
	}
}

func TestRunStopPublishesHeldCopiesAtOnce(t *testing.T) {
	src := &fakeSource{caps: Capabilities{Ack: true}, deliveries: deliveries(3), infinite: true}
	var handled atomic.Int32
	p := pipeline(src, func(context.Context, *Delivery) Result {
		handled.Add(1)
		return Result{Outcome: RetryAfter(time.Hour)}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- New(Options{}, p).Run(ctx) }()
	waitFor(t, func() bool {
		s, _, _ := src.snapshot()
		return len(s) == 3
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	settled, requeued, events := src.snapshot()
	if len(settled) != 3 || len(requeued) != 3 {
		t.Fatalf("settled %d requeued %d, want 3 and 3", len(settled), len(requeued))
	}
	// Copies go out only once reading has stopped, so a read still blocked at the stop cannot
	// take one back in.
	if want := "receive returned"; events[3] != want {
		t.Errorf("events %v: want %q before the copies", events, want)
	}
}

func TestRunGracePeriod(t *testing.T) {
	t.Run("in-flight handler finishes after the stop", func(t *testing.T) {
		src := &fakeSource{caps: Capabilities{Ack: true}, deliveries: deliveries(1), infinite: true}
		started, release := make(chan struct{}), make(chan struct{})
		var ctxErr atomic.Value
		p := pipeline(src, func(ctx context.Context, _ *Delivery) Result {
			close(started)
			<-release
			ctxErr.Store(fmt.Sprint(ctx.Err()))
			return Result{Outcome: Ack()}
		})
		p.ShutdownTimeout = time.Hour
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- New(Options{}, p).Run(ctx) }()
		<-started
		cancel()
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got := ctxErr.Load(); got != "<nil>" {
			t.Errorf("handler context: %v, want alive during the grace period", got)
		}
		if s, _, _ := src.snapshot(); len(s) != 1 || s[0].Action != ActAck {
			t.Fatalf("settled %+v", s)
		}
	})
	t.Run("grace runs out", func(t *testing.T) {
		src := &fakeSource{caps: Capabilities{Ack: true}, deliveries: deliveries(1), infinite: true}
		started := make(chan struct{})
		p := pipeline(src, func(ctx context.Context, _ *Delivery) Result {
			close(started)
			<-ctx.Done()
			return Result{Err: ctx.Err()}
		})
		p.ShutdownTimeout = 50 * time.Millisecond
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- New(Options{}, p).Run(ctx) }()
		<-started
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if s, _, _ := src.snapshot(); len(s) != 1 || s[0].Action != ActRequeue {
			t.Fatalf("settled %+v, want one requeue", s)
		}
	})
}

type recordingSink struct {
	src *fakeSource
	key string
}

func (r recordingSink) Publish(_ context.Context, msgs ...*Message) error {
	for _, m := range msgs {
		r.src.log("emit " + r.key + " " + m.Key)
	}
	return nil
}

func TestRunEmitsBeforeSettling(t *testing.T) {
	src := &fakeSource{caps: Capabilities{Ack: true}, deliveries: deliveries(1)}
	p := pipeline(src, func(context.Context, *Delivery) Result {
		return Result{Outcome: Ack(), Emits: []Emit{
			{Target: Target{Kind: "record"}, Message: &Message{Key: "a"}},
			{Target: Target{Kind: "record"}, Message: &Message{Key: "b"}},
			{Target: Target{Kind: "stream", Redis: "main"}, Message: &Message{Key: "c"}},
		}}
	})
	sinks := func(t Target) (Sink, error) { return recordingSink{src: src, key: t.Kind}, nil }
	if err := run(t, context.Background(), Options{Sinks: sinks}, p); err != nil {
		t.Fatal(err)
	}
	_, _, events := src.snapshot()
	want := []string{"emit record a", "emit record b", "emit stream c", "settle ack 1"}
	if fmt.Sprint(events) != fmt.Sprint(want) {
		t.Errorf("events %v, want %v", events, want)
	}
}

func TestRunEmitFailureIsRetry(t *testing.T) {
	src := &fakeSource{caps: Capabilities{Ack: true}, deliveries: deliveries(1)}
	p := pipeline(src, func(context.Context, *Delivery) Result {
		return Result{Outcome: Ack(), Emits: []Emit{{Target: Target{Kind: "record"}, Message: &Message{Key: "a"}}}}
	})
	sinks := func(Target) (Sink, error) { return nil, errors.New("no such sink") }
	if err := run(t, context.Background(), Options{Sinks: sinks}, p); err != nil {
		t.Fatal(err)
	}
	if s, _, _ := src.snapshot(); len(s) != 1 || s[0].Action != ActRequeue {
		t.Fatalf("settled %+v, want a retry copy", s)
	}
}

func TestRunRetriesFailedSettlement(t *testing.T) {
	src := &fakeSource{caps: Capabilities{Ack: true}, deliveries: deliveries(5), failSettle: 2}
	p := pipeline(src, func(context.Context, *Delivery) Result { return Result{Outcome: Ack()} })
	if err := run(t, context.Background(), Options{}, p); err != nil {
		t.Fatal(err)
	}
	if s, _, _ := src.snapshot(); len(s) != 5 {
		t.Fatalf("settled %d, want 5 after the failures", len(s))
	}
}

func TestRunSourceFailureStopsEveryPipeline(t *testing.T) {
	failing := &fakeSource{caps: Capabilities{Ack: true}, receiveErr: errors.New("auth failed")}
	other := &fakeSource{caps: Capabilities{Ack: true}, infinite: true}
	ack := func(context.Context, *Delivery) Result { return Result{Outcome: Ack()} }
	p1, p2 := pipeline(failing, ack), pipeline(other, ack)
	p1.Name = "failing"
	err := run(t, context.Background(), Options{}, p1, p2)
	if err == nil || err.Error() != "pipeline failing: auth failed" {
		t.Fatalf("err = %v", err)
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type partialErr struct{ failed []int }

func (p partialErr) Error() string        { return "partly failed" }
func (p partialErr) FailedIndexes() []int { return p.failed }

func TestRunResendsOnlyFailedSettlements(t *testing.T) {
	src := &fakeSource{caps: Capabilities{Ack: true}, deliveries: deliveries(50), failSettle: 1, partial: true}
	release := make(chan struct{})
	var n atomic.Int32
	p := pipeline(src, func(context.Context, *Delivery) Result {
		if n.Add(1) == 1 {
			<-release // hold the first back so the rest settle as one batch
		}
		return Result{Outcome: Retry()}
	})
	p.Concurrency = 2
	go func() {
		for n.Load() < 50 {
			time.Sleep(time.Millisecond)
		}
		close(release)
	}()
	if err := run(t, context.Background(), Options{}, p); err != nil {
		t.Fatal(err)
	}
	settled, _, _ := src.snapshot()
	ids := map[string]int{}
	for _, s := range settled {
		ids[s.Delivery.ID]++
	}
	if len(settled) != 50 || len(ids) != 50 {
		t.Fatalf("%d settlements for %d deliveries, want each once: %v", len(settled), len(ids), ids)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A delivery's headers are read-only once received, so a source may share one map among its
// deliveries (the claiming kinds do): whatever the outcome, the engine writes only into copies.
func TestRunLeavesDeliveryHeadersAlone(t *testing.T) {
	shared := map[string]string{"tenant": "a", HeaderDeliveryCount: "2"}
	ds := deliveries(6)
	for _, d := range ds {
		d.Headers = shared
	}
	src := &fakeSource{caps: Capabilities{Ack: true}, deliveries: ds}
	p := pipeline(src, func(_ context.Context, d *Delivery) Result {
		switch d.ID {
		case "1":
			return Result{Outcome: Ack(), Emits: []Emit{{Target: Target{Kind: "record"}, Message: &Message{Key: "out", Headers: map[string]string{}}}}}
		case "2":
			return Result{Outcome: Retry()}
		case "3":
			return Result{Outcome: RetryAfter(time.Millisecond)}
		case "4":
			return Result{Outcome: DeadLetter("bad")}
		case "5":
			panic("boom")
		default:
			return Result{Outcome: Drop()}
		}
	})
	p.MaxAttempts, p.DeadLetter = 3, "dlq"
	p.Tracer = &recordingTracer{} // its spans write a traceparent into what is written
	sinks := func(t Target) (Sink, error) { return recordingSink{src: src, key: t.Kind}, nil }
	if err := run(t, context.Background(), Options{Sinks: sinks}, p); err != nil {
		t.Fatal(err)
	}
	settled, requeued, _ := src.snapshot()
	if len(settled) != 6 {
		t.Fatalf("settled %d, want 6", len(settled))
	}
	copies := 0
	for _, s := range settled {
		if s.Copy != nil {
			copies++
			if s.Copy.Headers["tenant"] != "a" {
				t.Errorf("copy of %s: headers %v, want the delivery's", s.Delivery.ID, s.Copy.Headers)
			}
		}
	}
	if copies+len(requeued) < 4 {
		t.Errorf("%d copies written, want one each for retry, delay, dead letter and the panic", copies+len(requeued))
	}
	if want := map[string]string{"tenant": "a", HeaderDeliveryCount: "2"}; !maps.Equal(shared, want) {
		t.Errorf("the deliveries' shared headers became %v, want %v", shared, want)
	}
}
