package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// faultySource settles like a transport whose one key can never be written: a settlement whose
// copy goes to badKey fails permanently, reported per delivery (perDelivery) or, like an aborted
// MULTI, as one error for the whole call. transientLeft calls fail transiently first.
type faultySource struct {
	fakeSource
	badKey        string
	perDelivery   bool
	transientLeft atomic.Int32
	requeueFail   map[string]int // copy key → transient failures left for Requeue

	rmu      sync.Mutex
	calls    int
	released []string
}

func (f *faultySource) Settle(ctx context.Context, batch []Settlement) error {
	f.rmu.Lock()
	f.calls++
	f.rmu.Unlock()
	if f.transientLeft.Load() > 0 {
		f.transientLeft.Add(-1)
		return errors.New("dial tcp: connection refused")
	}
	var se SettleError
	var ok []Settlement
	for i, s := range batch {
		if s.Copy != nil && s.Copy.Key == f.badKey {
			se.Add(Fault{Index: i, Command: "xadd", Key: f.badKey, Reason: "wrongtype", Permanent: true,
				Err: errors.New("WRONGTYPE Operation against a key holding the wrong kind of value")})
			continue
		}
		ok = append(ok, s)
	}
	if se.Err() != nil && !f.perDelivery && len(batch) > 1 {
		// Nothing of the call was carried out, and the transport cannot tell who is at fault
		// until the delivery is sent alone.
		return errors.Join(ErrPermanent, errors.New("EXECABORT Transaction discarded because of previous errors"))
	}
	if err := f.fakeSource.Settle(ctx, ok); err != nil {
		return err
	}
	return se.Err()
}

func (f *faultySource) Requeue(ctx context.Context, msgs []*Message) error {
	var se SettleError
	var ok []*Message
	f.rmu.Lock()
	for i, m := range msgs {
		if f.requeueFail[m.Headers["k"]] > 0 {
			f.requeueFail[m.Headers["k"]]--
			se.Add(Fault{Index: i, Command: "xadd", Key: m.Key, Reason: "connection", Err: errors.New("i/o timeout")})
			continue
		}
		ok = append(ok, m)
	}
	f.rmu.Unlock()
	if err := f.fakeSource.Requeue(ctx, ok); err != nil {
		return err
	}
	return se.Err()
}

func (f *faultySource) Release(s Settlement) {
	f.rmu.Lock()
	defer f.rmu.Unlock()
	f.released = append(f.released, s.Delivery.ID)
}

type failMetrics struct {
	noMetrics
	mu      sync.Mutex
	reasons map[string]int
	held    atomic.Int64
	peak    atomic.Int64
}

func (m *failMetrics) Pipeline(string) PipelineMetrics { return m }
func (m *failMetrics) SettleFailure(r string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.reasons == nil {
		m.reasons = map[string]int{}
	}
	m.reasons[r]++
}
func (m *failMetrics) DelayedHeld(n int) {
	m.held.Store(int64(n))
	for {
		p := m.peak.Load()
		if int64(n) <= p || m.peak.CompareAndSwap(p, int64(n)) {
			return
		}
	}
}

func (m *failMetrics) count(r string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reasons[r]
}

// Every fourth delivery is dead-lettered to a key that can never be written; the rest must all
// be settled, the bad ones left unsettled (released), logged once, counted per delivery.
func TestPermanentFaultIsolatesOneDelivery(t *testing.T) {
	for _, perDelivery := range []bool{true, false} {
		name := "transport names the delivery"
		if !perDelivery {
			name = "whole call aborted"
		}
		t.Run(name, func(t *testing.T) {
			src := &faultySource{fakeSource: fakeSource{caps: Capabilities{Ack: true}, deliveries: deliveries(200)},
				badKey: "dlq", perDelivery: perDelivery}
			p := pipeline(src, func(_ context.Context, d *Delivery) Result {
				if d.Payload[len(d.Payload)-1]%4 == 0 {
					return Result{Outcome: Outcome{Kind: KindDeadLetter, Reason: "bad"}}
				}
				return Result{Outcome: Ack()}
			})
			p.DeadLetter = "dlq"
			var logs syncBuf
			p.Logger = zerolog.New(&logs)
			m := &failMetrics{}
			if err := run(t, context.Background(), Options{Metrics: m}, p); err != nil {
				t.Fatal(err)
			}
			settled, _, _ := src.snapshot()
			bad := 0
			for _, d := range src.deliveries {
				if d.Payload[len(d.Payload)-1]%4 == 0 {
					bad++
				}
			}
			if len(settled) != 200-bad {
				t.Errorf("settled %d, want %d", len(settled), 200-bad)
			}
			for _, s := range settled {
				if s.Action != ActAck {
					t.Errorf("settled %s %s", s.Action, s.Delivery.ID)
				}
			}
			if len(src.released) != bad {
				t.Errorf("released %d, want %d", len(src.released), bad)
			}
			if got := m.count("wrongtype"); got != bad {
				t.Errorf("settle failures counted %d, want %d", got, bad)
			}
			out := logs.String()
			if n := strings.Count(out, "settlement failed permanently:"); n != 1 {
				t.Errorf("logged %d times at error, want once:\n%s", n, out)
			}
			if !strings.Contains(out, `"command":"xadd","key":"dlq"`) || !strings.Contains(out, "WRONGTYPE Operation") {
				t.Errorf("log lacks command, key or the server's text:\n%s", out)
			}
		})
	}
}

func TestTransientFaultIsResent(t *testing.T) {
	src := &faultySource{fakeSource: fakeSource{caps: Capabilities{Ack: true}, deliveries: deliveries(50)}}
	src.transientLeft.Store(3)
	p := pipeline(src, func(context.Context, *Delivery) Result { return Result{Outcome: Ack()} })
	m := &failMetrics{}
	if err := run(t, context.Background(), Options{Metrics: m}, p); err != nil {
		t.Fatal(err)
	}
	settled, _, _ := src.snapshot()
	seen := map[string]int{}
	for _, s := range settled {
		seen[s.Delivery.ID]++
	}
	if len(seen) != 50 {
		t.Fatalf("%d deliveries settled, want 50", len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("delivery %s settled %d times", id, n)
		}
	}
	if len(src.released) != 0 || m.count("error") == 0 {
		t.Errorf("released %v, transient failures counted %d", src.released, m.count("error"))
	}
}

// A delivery whose settlement was abandoned must not have its delayed copy written: the original
// comes back by its source's rules, and a copy as well would double it.
func TestAbandonedSettlementWritesNoHeldCopy(t *testing.T) {
	src := &faultySource{fakeSource: fakeSource{caps: Capabilities{Ack: true}, deliveries: deliveries(1)}, perDelivery: true}
	src.badKey = "in" // the ack of a runtime delay carries no copy; make the ack fail instead
	p := pipeline(src, func(context.Context, *Delivery) Result { return Result{Outcome: RetryAfter(10 * time.Millisecond)} })
	wrapped := &ackFails{faultySource: src}
	p.Source = wrapped
	if err := run(t, context.Background(), Options{}, p); err != nil {
		t.Fatal(err)
	}
	if _, requeued, _ := src.snapshot(); len(requeued) != 0 {
		t.Fatalf("held copy written for an abandoned delivery: %d", len(requeued))
	}
	if len(src.released) != 1 {
		t.Fatalf("released %v", src.released)
	}
}

type ackFails struct{ *faultySource }

func (a *ackFails) Settle(_ context.Context, batch []Settlement) error {
	var se SettleError
	for i := range batch {
		se.Add(Fault{Index: i, Command: "xack", Key: "in", Reason: "noperm", Permanent: true, Err: errors.New("NOPERM")})
	}
	return se.Err()
}

func TestRequeueResendsOnlyFailedCopies(t *testing.T) {
	ds := deliveries(3)
	for i, d := range ds {
		d.Headers["k"] = string(rune('a' + i))
	}
	src := &faultySource{fakeSource: fakeSource{caps: Capabilities{}, deliveries: ds}, requeueFail: map[string]int{"b": 2}}
	p := pipeline(src, func(context.Context, *Delivery) Result { return Result{Outcome: RetryAfter(5 * time.Millisecond)} })
	if err := run(t, context.Background(), Options{}, p); err != nil {
		t.Fatal(err)
	}
	_, requeued, _ := src.snapshot()
	got := map[string]int{}
	for _, m := range requeued {
		got[m.Headers["k"]]++
	}
	if len(requeued) != 3 || got["a"] != 1 || got["b"] != 1 || got["c"] != 1 {
		t.Fatalf("requeued %v, want each copy once", got)
	}
}

// max_held bounds the copies held at once: reading pauses at the bound until copies come due.
func TestMaxHeldPausesReading(t *testing.T) {
	const n, maxHeld, conc = 400, 20, 4
	src := &fakeSource{caps: Capabilities{Ack: true}, deliveries: deliveries(n)}
	p := pipeline(src, func(context.Context, *Delivery) Result { return Result{Outcome: RetryAfter(20 * time.Millisecond)} })
	p.MaxHeld, p.Concurrency = maxHeld, conc
	m := &failMetrics{}
	if err := run(t, context.Background(), Options{Metrics: m}, p); err != nil {
		t.Fatal(err)
	}
	settled, requeued, _ := src.snapshot()
	if len(settled) != n || len(requeued) != n {
		t.Fatalf("settled %d requeued %d, want %d", len(settled), len(requeued), n)
	}
	if peak := m.peak.Load(); peak > maxHeld+conc {
		t.Fatalf("held %d copies at once, max_held is %d (+%d in flight)", peak, maxHeld, conc)
	}
}

type nopSink struct{}

func (nopSink) Publish(context.Context, ...*Message) error { return nil }

// A slow first connection for one emit target never stalls emits to another.
func TestSlowSinkCreationBlocksOnlyItsTarget(t *testing.T) {
	slow := make(chan struct{})
	e := New(Options{Sinks: func(t Target) (Sink, error) {
		if t.Redis == "slow" {
			<-slow
		}
		return nopSink{}, nil
	}})
	go e.sink(Target{Kind: "stream", Redis: "slow"})
	time.Sleep(10 * time.Millisecond) // let the slow one take its lock first
	done := make(chan error, 1)
	go func() {
		_, err := e.sink(Target{Kind: "stream", Redis: "fast"})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a sink for another target waited for the slow one")
	}
	close(slow)
}

// batchSink fails the message whose key is "bad" and counts Publish calls.
type batchSink struct {
	mu    sync.Mutex
	calls int
	msgs  []string
}

func (b *batchSink) Publish(_ context.Context, msgs ...*Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls++
	var se SettleError
	for i, m := range msgs {
		if m.Key == "bad" {
			se.Add(Fault{Index: i, Command: "xadd", Key: "bad", Reason: "noperm", Permanent: true, Err: errors.New("NOPERM")})
			continue
		}
		b.msgs = append(b.msgs, m.Key)
	}
	return se.Err()
}

// Emits go out with the settlements: one Publish per target for many deliveries, written before
// any of them is settled; an emit that fails makes only its delivery a retry.
func TestEmitsAreBatchedAndFailPerDelivery(t *testing.T) {
	const n = 300
	src := &fakeSource{caps: Capabilities{Ack: true}, deliveries: deliveries(n), batch: 100}
	p := pipeline(src, func(_ context.Context, d *Delivery) Result {
		key := "out"
		if d.ID == "7" {
			key = "bad"
		}
		return Result{Outcome: Ack(), Emits: []Emit{{Target: Target{Kind: "stream"}, Message: &Message{Key: key}}}}
	})
	p.Concurrency = 8
	sink := &batchSink{}
	if err := run(t, context.Background(), Options{Sinks: func(Target) (Sink, error) { return sink, nil }}, p); err != nil {
		t.Fatal(err)
	}
	settled, _, _ := src.snapshot()
	if len(settled) != n {
		t.Fatalf("settled %d, want %d", len(settled), n)
	}
	for _, s := range settled {
		want := ActAck
		if s.Delivery.ID == "7" {
			want = ActRequeue
		}
		if s.Action != want {
			t.Errorf("delivery %s: %s, want %s", s.Delivery.ID, s.Action, want)
		}
	}
	if len(sink.msgs) != n-1 {
		t.Errorf("emitted %d, want %d", len(sink.msgs), n-1)
	}
	t.Logf("%d deliveries emitted in %d Publish calls", n, sink.calls)
	if sink.calls >= n/2 {
		t.Errorf("%d Publish calls for %d deliveries: emits are not batched", sink.calls, n)
	}
}

// slowSettleSource's first Settle call waits for release, as a settle round trip that waits in
// Redis behind a long read does; it notes the size of every call.
type slowSettleSource struct {
	fakeSource
	entered, release chan struct{}
	sizes            []int
}

func (s *slowSettleSource) Settle(ctx context.Context, batch []Settlement) error {
	s.mu.Lock()
	s.sizes = append(s.sizes, len(batch))
	first := len(s.sizes) == 1
	s.mu.Unlock()
	if first {
		close(s.entered)
		<-s.release
	}
	return s.fakeSource.Settle(ctx, batch)
}

// While a settle round trip is slow, the decisions of a whole read wait for the settler rather
// than the workers waiting for it, and they go out in one call: the settler's bound follows the
// source's batch (here 2000, four times the least bound).
func TestSettleBatchFollowsSourceBatch(t *testing.T) {
	const n = 2000
	src := &slowSettleSource{
		fakeSource: fakeSource{caps: Capabilities{Ack: true, Batch: n}, deliveries: deliveries(n), batch: n},
		entered:    make(chan struct{}), release: make(chan struct{}),
	}
	var handled atomic.Int32
	p := pipeline(src, func(_ context.Context, d *Delivery) Result {
		if d.ID != "1" {
			<-src.entered // the first call carries delivery 1 alone
		}
		handled.Add(1)
		return Result{Outcome: Ack()}
	})
	done := make(chan error, 1)
	go func() { done <- run(t, context.Background(), Options{}, p) }()
	<-src.entered
	deadline := time.Now().Add(5 * time.Second)
	for handled.Load() < n {
		if time.Now().After(deadline) {
			close(src.release)
			t.Fatalf("%d of %d handled while a settle call was in flight: the workers waited for the settler", handled.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
	close(src.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	settled, _, _ := src.snapshot()
	if len(settled) != n {
		t.Fatalf("settled %d, want %d", len(settled), n)
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if len(src.sizes) != 2 || src.sizes[0] != 1 || src.sizes[1] != n-1 {
		t.Fatalf("settle call sizes %v, want [1 %d]: the rest in one call", src.sizes, n-1)
	}
}

// oomSink refuses every write the way a Redis at maxmemory does.
type oomSink struct{}

func (oomSink) Publish(_ context.Context, msgs ...*Message) error {
	var se SettleError
	for i, m := range msgs {
		se.Add(Fault{Index: i, Command: "xadd", Key: m.Key, Reason: "oom",
			Err: errors.New("OOM command not allowed when used memory > 'maxmemory'.")})
	}
	return se.Err()
}

// A write Redis refuses for an emit (SPEC §10 "Settlement failures") makes its delivery a retry,
// counted per message, and is logged once per command, key and reason per interval with Redis's
// own text, never a line per message. (e2e TestFullRedis: the retries are written once memory
// is freed.)
func TestRefusedEmitsAreLoggedOncePerInterval(t *testing.T) {
	const n = 300
	src := &fakeSource{caps: Capabilities{Ack: true}, deliveries: deliveries(n), batch: 50}
	sink := oomSink{}
	p := pipeline(src, func(_ context.Context, d *Delivery) Result {
		return Result{Outcome: Ack(), Emits: []Emit{{Target: Target{Kind: "stream"}, Message: &Message{Key: "out"}}}}
	})
	var logs syncBuf
	p.Logger = zerolog.New(&logs).Level(zerolog.InfoLevel)
	m := &failMetrics{}
	err := run(t, context.Background(), Options{Metrics: m, Progress: time.Hour, Sinks: func(Target) (Sink, error) { return sink, nil }}, p)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.count("oom"); got < n {
		t.Errorf("refused emits counted %d, want at least %d (one per message)", got, n)
	}
	out := logs.String()
	if c := strings.Count(out, "emit refused"); c != 1 {
		t.Errorf("refused emits logged %d times, want once per interval:\n%.2000s", c, out)
	}
	if c := strings.Count(out, "handler failed"); c != 0 {
		t.Errorf(`%d "handler failed" lines for refused emits, want none`, c)
	}
	if !strings.Contains(out, `"command":"xadd","key":"out","reason":"oom"`) || !strings.Contains(out, "OOM command not allowed") {
		t.Errorf("log lacks the command, key, reason or Redis's text:\n%.2000s", out)
	}
	settled, _, _ := src.snapshot()
	for _, st := range settled {
		if st.Action == ActAck {
			t.Fatalf("delivery %s acknowledged although its emit was refused", st.Delivery.ID)
		}
	}
}
