package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// headerKey is a KeyFunc reading one header; a missing header fails, as a key expression may.
type headerKey string

func (h headerKey) FlowKey(d *Delivery) (string, error) {
	v, ok := d.Headers[string(h)]
	if !ok {
		return "", errors.New("no " + string(h))
	}
	return v, nil
}

func keyed(n int, keys ...string) []*Delivery {
	ds := deliveries(n)
	for i, d := range ds {
		d.Headers["k"] = keys[i%len(keys)]
	}
	return ds
}

func TestFlowConcurrencyKeyLimitOneKeepsOrderAndNeverOverlaps(t *testing.T) {
	src := &fakeSource{deliveries: keyed(60, "a", "b", "c"), batch: 10}
	var mu sync.Mutex
	running := map[string]int{}
	order := map[string][]int{}
	overlap := atomic.Bool{}
	p := pipeline(src, func(_ context.Context, d *Delivery) Result {
		k := d.Headers["k"]
		mu.Lock()
		running[k]++
		if running[k] > 1 {
			overlap.Store(true)
		}
		n, _ := strconv.Atoi(d.ID)
		order[k] = append(order[k], n)
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		running[k]--
		mu.Unlock()
		return Result{Outcome: Ack()}
	})
	p.Concurrency = 8
	p.Flow = &Flow{Concurrency: &ConcurrencyKey{Key: headerKey("k"), Limit: 1}}
	if err := run(t, context.Background(), Options{}, p); err != nil {
		t.Fatal(err)
	}
	if overlap.Load() {
		t.Fatal("two handlers of one key ran at once")
	}
	settled, _, _ := src.snapshot()
	if len(settled) != 60 {
		t.Fatalf("settled %d, want 60", len(settled))
	}
	for k, ids := range order {
		for i := 1; i < len(ids); i++ {
			if ids[i] < ids[i-1] {
				t.Fatalf("key %s handled out of read order: %v", k, ids)
			}
		}
	}
}

func TestFlowConcurrencyKeyLimitBoundsPerKey(t *testing.T) {
	src := &fakeSource{deliveries: keyed(40, "a"), batch: 10}
	var g gauge
	p := pipeline(src, func(_ context.Context, d *Delivery) Result {
		leave := g.enter()
		time.Sleep(2 * time.Millisecond)
		leave()
		return Result{Outcome: Ack()}
	})
	p.Concurrency = 8
	p.Flow = &Flow{Concurrency: &ConcurrencyKey{Key: headerKey("k"), Limit: 3}}
	if err := run(t, context.Background(), Options{}, p); err != nil {
		t.Fatal(err)
	}
	if got := g.most(); got > 3 || got < 2 {
		t.Fatalf("peak handlers of one key = %d, want at most 3 (and more than 1)", got)
	}
}

func TestFlowThrottleStartsPerPeriod(t *testing.T) {
	src := &fakeSource{deliveries: keyed(12, "x"), batch: 12}
	var mu sync.Mutex
	var starts []time.Time
	p := pipeline(src, func(_ context.Context, d *Delivery) Result {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		return Result{Outcome: Ack()}
	})
	period := 100 * time.Millisecond
	p.Flow = &Flow{Throttle: &Throttle{Limit: 4, Period: period}}
	begin := time.Now()
	if err := run(t, context.Background(), Options{}, p); err != nil {
		t.Fatal(err)
	}
	if len(starts) != 12 {
		t.Fatalf("%d starts, want 12", len(starts))
	}
	// Any window of one period holds at most 4 starts; 12 starts need at least two periods.
	for i := 4; i < len(starts); i++ {
		if starts[i].Sub(starts[i-4]) < period-5*time.Millisecond {
			t.Fatalf("start %d came %v after start %d: more than 4 per %v", i, starts[i].Sub(starts[i-4]), i-4, period)
		}
	}
	if el := time.Since(begin); el < 2*period-10*time.Millisecond {
		t.Fatalf("12 starts at 4 per %v took only %v", period, el)
	}
}

func TestFlowDedupe(t *testing.T) {
	ds := keyed(6, "a", "b", "a", "c", "b", "a")
	ds = append(ds, &Delivery{Message: Message{Key: "in", ID: "7", Headers: map[string]string{}}}) // no key: retry
	src := &fakeSource{deliveries: ds, batch: 7}
	var handled sync.Map
	p := pipeline(src, func(_ context.Context, d *Delivery) Result {
		if _, dup := handled.LoadOrStore(d.Headers["k"], d.ID); dup {
			return Result{Err: fmt.Errorf("key %s handled twice", d.Headers["k"])}
		}
		if d.Headers["k"] == "c" {
			return Result{Outcome: Drop()}
		}
		return Result{Outcome: Ack()}
	})
	p.Flow = &Flow{Dedupe: &Dedupe{Key: headerKey("k"), Window: time.Minute}}
	e := New(Options{}, p)
	if err := runEngine(t, context.Background(), e); err != nil {
		t.Fatal(err)
	}
	got := e.Status()[0].Totals
	if got["ack"] != 2 || got["drop"] != 1 || got[LabelDuplicate] != 3 || got["retry"] != 1 {
		t.Fatalf("outcomes %v, want 2 ack, 1 drop, 3 duplicate, 1 retry (the key that failed)", got)
	}
}

func TestFlowDedupeReleasedOnRetry(t *testing.T) {
	// The first delivery of key a retries: its key is released, so the second is handled.
	ds := keyed(2, "a")
	src := &fakeSource{deliveries: ds, batch: 2, caps: Capabilities{Ack: true}}
	var calls atomic.Int32
	p := pipeline(src, func(_ context.Context, d *Delivery) Result {
		if calls.Add(1) == 1 {
			return Result{Outcome: Retry()}
		}
		return Result{Outcome: Ack()}
	})
	p.Flow = &Flow{Dedupe: &Dedupe{Key: headerKey("k"), Window: time.Minute}}
	if err := run(t, context.Background(), Options{}, p); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2 (a retry releases the key)", calls.Load())
	}
}

func TestMemFlowStoreLeaseExpires(t *testing.T) {
	m := NewMemFlowStore()
	now := time.Now()
	m.now = func() time.Time { return now }
	r := &FlowRound{Lease: time.Second, Max: 2, Admits: []FlowAdmit{{Token: "1", Conc: "c:a", ConcLimit: 1}, {Token: "2", Conc: "c:a", ConcLimit: 1}}}
	_ = m.Round(context.Background(), r)
	if r.Verdicts[0].Kind != FlowAdmitted || r.Verdicts[1].Kind != FlowWait || r.Verdicts[1].RetryIn != time.Second {
		t.Fatalf("verdicts %+v", r.Verdicts)
	}
	now = now.Add(time.Second) // the holder crashed: its lease runs out
	r = &FlowRound{Lease: time.Second, Max: 1, Admits: []FlowAdmit{{Token: "2", Conc: "c:a", ConcLimit: 1}}}
	_ = m.Round(context.Background(), r)
	if r.Verdicts[0].Kind != FlowAdmitted {
		t.Fatalf("after the lease expired: %+v", r.Verdicts)
	}
}

// At a stop, deliveries waiting for a key go back to a source that can take them back, and
// every lease is released: nothing is run twice, nothing is lost, nothing stays held.
func TestFlowStopReturnsWaitingAndReleases(t *testing.T) {
	src := &releasingSource{fakeSource: fakeSource{caps: Capabilities{Ack: true}, deliveries: keyed(20, "a"), batch: 20, infinite: true}}
	started := make(chan struct{}, 20)
	release := make(chan struct{})
	p := pipeline(src, func(context.Context, *Delivery) Result {
		started <- struct{}{}
		<-release
		return Result{Outcome: Ack()}
	})
	store := NewMemFlowStore()
	p.Flow = &Flow{Concurrency: &ConcurrencyKey{Key: headerKey("k"), Limit: 1}, Dedupe: &Dedupe{Key: headerKey("id"), Window: time.Hour}, Store: store}
	for _, d := range src.deliveries {
		d.Headers["id"] = d.ID
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- New(Options{}, p).Run(ctx) }()
	<-started // one runs; 19 wait for key a
	cancel()
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	settled, _, _ := src.snapshot()
	src.mu.Lock()
	returned := len(src.released)
	src.mu.Unlock()
	if len(settled) != 1 || returned != 19 {
		t.Fatalf("settled %d, returned %d; want 1 and 19", len(settled), returned)
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	if len(store.leases) != 0 {
		t.Fatalf("leases left held: %v", store.leases)
	}
	if c := store.claims["d:"+settled[0].Delivery.ID]; c.token != "" {
		t.Fatalf("the settled delivery's claim is %+v, want done", c)
	}
}

// endlessSource pushes deliveries of one key for as long as the engine takes them, counting.
type endlessSource struct {
	fakeSource
	pushed atomic.Int64
}

func (e *endlessSource) Receive(ctx context.Context, feed Feed) error {
	for i := 0; ; i++ {
		n := feed.Room(ctx)
		if n == 0 {
			return ctx.Err()
		}
		ds := make([]*Delivery, n)
		for j := range ds {
			ds[j] = &Delivery{Message: Message{Key: "in", ID: strconv.Itoa(i*1000 + j), Headers: map[string]string{"k": "hot"}}}
		}
		if !feed.Push(ctx, ds) {
			return ctx.Err()
		}
		e.pushed.Add(int64(n))
	}
}

// Waiting deliveries count against the read-ahead bound: with one hot key whose handler never
// finishes, reading stops at the source's batch, however long the backlog.
func TestFlowWaitingCountsAgainstReadAhead(t *testing.T) {
	src := &endlessSource{fakeSource: fakeSource{batch: 50}}
	release := make(chan struct{})
	p := pipeline(src, func(ctx context.Context, d *Delivery) Result {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return Result{Outcome: Ack()}
	})
	p.Concurrency = 8
	p.Flow = &Flow{Concurrency: &ConcurrencyKey{Key: headerKey("k"), Limit: 1}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- New(Options{}, p).Run(ctx) }()
	for deadline := time.Now().Add(5 * time.Second); src.pushed.Load() < 50; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("read only %d", src.pushed.Load())
		}
	}
	time.Sleep(100 * time.Millisecond) // it must not read on: nothing frees the hot key
	if n := src.pushed.Load(); n > 50+1 {
		t.Fatalf("read %d deliveries with one running and the rest waiting; the bound is the batch (50) plus the one running", n)
	}
	cancel()
	close(release)
	<-done
}

// flakyStore fails its first rounds, as a Redis that is down for a while.
type flakyStore struct {
	*MemFlowStore
	fails atomic.Int32
}

func (f *flakyStore) Round(ctx context.Context, r *FlowRound) error {
	if f.fails.Add(-1) >= 0 {
		return errors.New("connection refused")
	}
	return f.MemFlowStore.Round(ctx, r)
}

// A store that fails is tried again with backoff; nothing is handled without its admission and
// nothing is lost.
func TestFlowStoreFailureIsRetried(t *testing.T) {
	src := &fakeSource{deliveries: keyed(10, "a", "b"), batch: 10}
	store := &flakyStore{MemFlowStore: NewMemFlowStore()}
	store.fails.Store(3)
	var handled atomic.Int32
	p := pipeline(src, func(context.Context, *Delivery) Result {
		handled.Add(1)
		return Result{Outcome: Ack()}
	})
	p.Flow = &Flow{Dedupe: &Dedupe{Key: headerKey("k"), Window: time.Hour}, Store: store}
	if err := run(t, context.Background(), Options{}, p); err != nil {
		t.Fatal(err)
	}
	settled, _, _ := src.snapshot()
	if handled.Load() != 2 || len(settled) != 10 {
		t.Fatalf("handled %d (want 2: keys a and b), settled %d (want 10: the rest are duplicates)", handled.Load(), len(settled))
	}
}

// timedStore fails its first rounds and notes when each failing round came.
type timedStore struct {
	*MemFlowStore
	mu    sync.Mutex
	fails int
	at    []time.Time
}

func (f *timedStore) Round(ctx context.Context, r *FlowRound) error {
	f.mu.Lock()
	if len(f.at) < f.fails {
		f.at = append(f.at, time.Now())
		f.mu.Unlock()
		return errors.New("connection refused")
	}
	f.mu.Unlock()
	return f.MemFlowStore.Round(ctx, r)
}

// Whole rounds that keep failing are sent again after a growing backoff (200ms, 400ms, 800ms,
// … up to 5s), even while new deliveries arrive and wake the stage in between.
func TestFlowStoreFailureBacksOff(t *testing.T) {
	src := &fakeSource{deliveries: keyed(40, "a", "b", "c", "d"), batch: 2}
	store := &timedStore{MemFlowStore: NewMemFlowStore(), fails: 4}
	p := pipeline(src, func(context.Context, *Delivery) Result { return Result{Outcome: Ack()} })
	p.Flow = &Flow{Concurrency: &ConcurrencyKey{Key: headerKey("k"), Limit: 1}, Store: store}
	if err := run(t, context.Background(), Options{}, p); err != nil {
		t.Fatal(err)
	}
	if settled, _, _ := src.snapshot(); len(settled) != 40 {
		t.Fatalf("settled %d, want 40", len(settled))
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	for i := 1; i < len(store.at); i++ {
		gap, want := store.at[i].Sub(store.at[i-1]), flowRetryMin<<(i-1)
		if gap < want*9/10 {
			t.Errorf("failed round %d came %s after the one before; want at least %s", i+1, gap, want)
		}
	}
}

// countingStore counts the admissions a store grants.
type countingStore struct {
	*MemFlowStore
	admitted atomic.Int32
}

func (c *countingStore) Round(ctx context.Context, r *FlowRound) error {
	err := c.MemFlowStore.Round(ctx, r)
	for _, v := range r.Verdicts {
		if v.Kind == FlowAdmitted {
			c.admitted.Add(1)
		}
	}
	return err
}

// A throttle admits for busy handlers too, each to start within the slack (period/32) of its
// round; one still waiting for a handler then does not start late: it asks for its start again,
// keeping its lease and claim, and the extra admissions stop while handlers are slow.
func TestFlowThrottleLateStartAsksAgain(t *testing.T) {
	ds := keyed(8, "a", "b", "c", "d", "e", "f", "g", "h")
	src := &fakeSource{deliveries: ds, batch: 8}
	store := &countingStore{MemFlowStore: NewMemFlowStore()}
	var g gauge
	var mu sync.Mutex
	handled := map[string]int{}
	p := pipeline(src, func(_ context.Context, d *Delivery) Result {
		leave := g.enter()
		time.Sleep(40 * time.Millisecond) // longer than the 10ms slack
		leave()
		mu.Lock()
		handled[d.Headers["k"]]++
		mu.Unlock()
		return Result{Outcome: Ack()}
	})
	p.Concurrency = 2
	p.Flow = &Flow{
		Throttle:    &Throttle{Limit: 1000, Period: 320 * time.Millisecond},
		Concurrency: &ConcurrencyKey{Key: headerKey("k"), Limit: 1},
		Dedupe:      &Dedupe{Key: headerKey("k"), Window: time.Hour},
		Store:       store,
	}
	if err := run(t, context.Background(), Options{}, p); err != nil {
		t.Fatal(err)
	}
	settled, _, _ := src.snapshot()
	if len(settled) != 8 || len(handled) != 8 {
		t.Fatalf("settled %d, handled %v: want each of 8 once", len(settled), handled)
	}
	for k, n := range handled {
		if n != 1 {
			t.Fatalf("key %s handled %d times", k, n)
		}
	}
	if g.most() > 2 {
		t.Fatalf("%d handlers at once, concurrency 2", g.most())
	}
	// The first round admitted 8 for 2 handlers: 6 came too late and asked again, and the
	// extra admissions stopped.
	if n := store.admitted.Load(); n <= 8 || n > 14 {
		t.Fatalf("%d admissions for 8 starts: want the late ones counted again, and not many", n)
	}
}

// A period under 32ms has no slack: only free handlers are admitted (a stage waits up to a
// round trip for its handlers before a round) and the window is exactly the period.
func TestFlowThrottleShortPeriod(t *testing.T) {
	src := &fakeSource{deliveries: keyed(10, "x"), batch: 10}
	var mu sync.Mutex
	var starts []time.Time
	p := pipeline(src, func(_ context.Context, d *Delivery) Result {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		return Result{Outcome: Ack()}
	})
	period := 20 * time.Millisecond
	p.Flow = &Flow{Throttle: &Throttle{Limit: 2, Period: period}}
	begin := time.Now()
	if err := run(t, context.Background(), Options{}, p); err != nil {
		t.Fatal(err)
	}
	if len(starts) != 10 {
		t.Fatalf("%d starts, want 10", len(starts))
	}
	for i := 2; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-2]); gap < period-5*time.Millisecond {
			t.Fatalf("starts %d and %d only %v apart: more than 2 per %v", i-2, i, gap, period)
		}
	}
	if el := time.Since(begin); el < 4*period-5*time.Millisecond {
		t.Fatalf("10 starts at 2 per %v took only %v", period, el)
	}
}

// badKeyStore is an in-process store whose one key can never be written, as Redis reports it:
// a permanent fault per release, renewal or admission that needs it, the rest carried out.
type badKeyStore struct {
	*MemFlowStore
	bad       string
	renewOnly bool // only renewals fail (the key went bad after its admission)
}

func (b *badKeyStore) fault(i int, key string) Fault {
	return Fault{Index: i, Command: "evalsha", Key: key, Reason: "noperm", Permanent: true,
		Err: errors.New("NOPERM this user has no permissions to access the '" + key + "' key")}
}

func (b *badKeyStore) Round(ctx context.Context, r *FlowRound) error {
	in := *r
	in.Releases, in.Renews, in.Admits = nil, nil, nil
	var relIdx, admIdx []int
	var relF, renF, admF []Fault
	for i, x := range r.Releases {
		if !b.renewOnly && (x.Dedupe == b.bad || x.Conc == b.bad) {
			relF = append(relF, b.fault(i, b.bad))
			continue
		}
		relIdx = append(relIdx, i)
		in.Releases = append(in.Releases, x)
	}
	for i, x := range r.Renews {
		if x.Dedupe == b.bad || x.Conc == b.bad {
			renF = append(renF, b.fault(i, b.bad))
			continue
		}
		in.Renews = append(in.Renews, x)
	}
	for i, a := range r.Admits {
		if !b.renewOnly && (a.Dedupe == b.bad || a.Conc == b.bad) {
			admF = append(admF, b.fault(i, b.bad))
			continue
		}
		admIdx = append(admIdx, i)
		in.Admits = append(in.Admits, a)
	}
	if err := b.MemFlowStore.Round(ctx, &in); err != nil {
		return err
	}
	r.Verdicts = make([]FlowVerdict, len(r.Admits))
	for j, i := range admIdx {
		r.Verdicts[i] = in.Verdicts[j]
	}
	r.Lost = nil
	r.ReleaseFaults, r.RenewFaults, r.AdmitFaults = relF, renF, admF
	return nil
}

// A dedupe key whose done mark can never be written (SPEC §10 "Settlement failures"): its
// deliveries are left unsettled (released to the source, not acknowledged), logged at error
// once, counted; every other key goes on. The mark goes before the acknowledgement.
func TestFlowUnwritableDoneMarkLeavesTheDeliveryUnsettled(t *testing.T) {
	src := &faultySource{fakeSource: fakeSource{caps: Capabilities{Ack: true}, deliveries: keyed(30, "a", "b", "c"), batch: 10}}
	store := &badKeyStore{MemFlowStore: NewMemFlowStore(), bad: "d:b"}
	p := pipeline(src, func(context.Context, *Delivery) Result { return Result{Outcome: Ack()} })
	// The claim of "b" is made, the mark fails: the in-process store takes the claim, only the
	// release of it with a window is refused.
	p.Flow = &Flow{Dedupe: &Dedupe{Key: headerKey("k"), Window: time.Hour}, Store: &markFails{badKeyStore: store}, Lease: 30 * time.Millisecond}
	var logs syncBuf
	p.Logger = zerolog.New(&logs)
	m := &failMetrics{}
	if err := run(t, context.Background(), Options{Metrics: m}, p); err != nil {
		t.Fatal(err)
	}
	settled, _, _ := src.snapshot()
	for _, s := range settled {
		if s.Delivery.Headers["k"] == "b" {
			t.Fatalf("a delivery whose done mark failed was settled (%v)", s.Action)
		}
	}
	if len(settled) != 20 {
		t.Fatalf("settled %d, want the 20 of a and c (handled once each, the rest duplicates)", len(settled))
	}
	src.rmu.Lock()
	released := len(src.released)
	src.rmu.Unlock()
	if released == 0 || m.count("noperm") != released {
		t.Fatalf("released %d, counted %d: want every unmarked delivery left unsettled and counted", released, m.count("noperm"))
	}
	if c := strings.Count(logs.String(), "marking a dedupe key done failed permanently"); c < 1 ||
		strings.Count(logs.String(), `"level":"error","error":"NOPERM`) != 1 {
		t.Fatalf("want one error line with Redis's text:\n%s", logs.String())
	}
}

// markFails refuses only the release that marks its bad key done.
type markFails struct{ *badKeyStore }

func (m *markFails) Round(ctx context.Context, r *FlowRound) error {
	bad := m.bad
	var relF []Fault
	rels := r.Releases
	in := *r
	in.Releases = nil
	var idx []int
	for i, x := range rels {
		if x.Dedupe == bad && x.Window > 0 {
			relF = append(relF, m.fault(i, bad))
			// Its claim is let go as a failed mark leaves it in Redis: until the lease ends.
			continue
		}
		idx = append(idx, i)
		in.Releases = append(in.Releases, x)
	}
	if err := m.MemFlowStore.Round(ctx, &in); err != nil {
		return err
	}
	r.Verdicts, r.Lost, r.ReleaseFaults = in.Verdicts, in.Lost, relF
	return nil
}

// A delivery whose admission fails for good (a flow key it needs can never be written) counts
// as retry: handled by the policy (here a dead letter at max_attempts 1), logged once, counted;
// the other keys run.
func TestFlowUnwritableKeyCountsAsRetry(t *testing.T) {
	src := &faultySource{fakeSource: fakeSource{caps: Capabilities{Ack: true}, deliveries: keyed(30, "a", "b", "c"), batch: 10}}
	var handled sync.Map
	p := pipeline(src, func(_ context.Context, d *Delivery) Result {
		handled.Store(d.Headers["k"], true)
		return Result{Outcome: Ack()}
	})
	p.MaxAttempts = 1
	p.DeadLetter = "dlq"
	p.Flow = &Flow{Concurrency: &ConcurrencyKey{Key: headerKey("k"), Limit: 1}, Store: &badKeyStore{MemFlowStore: NewMemFlowStore(), bad: "c:b"}}
	var logs syncBuf
	p.Logger = zerolog.New(&logs)
	m := &failMetrics{}
	if err := run(t, context.Background(), Options{Metrics: m}, p); err != nil {
		t.Fatal(err)
	}
	if _, ok := handled.Load("b"); ok {
		t.Fatal("a delivery ran without its admission")
	}
	settled, _, _ := src.snapshot()
	acks, dead := 0, 0
	for _, s := range settled {
		switch {
		case s.Delivery.Headers["k"] == "b" && s.Action == ActDeadLetter:
			dead++
		case s.Delivery.Headers["k"] != "b" && s.Action == ActAck:
			acks++
		}
	}
	if acks != 20 || dead != 10 {
		t.Fatalf("acked %d (want 20), dead-lettered %d of b (want 10)", acks, dead)
	}
	if m.count("noperm") != 10 {
		t.Fatalf("counted %d, want 10", m.count("noperm"))
	}
	if c := strings.Count(logs.String(), `"level":"error","error":"NOPERM`); c != 1 {
		t.Fatalf("logged at error %d times, want once:\n%s", c, logs.String())
	}
}

// downAfterAdmit admits, then fails every round (Redis went away while handlers ran).
type downAfterAdmit struct {
	*MemFlowStore
	down atomic.Bool
}

func (s *downAfterAdmit) Round(ctx context.Context, r *FlowRound) error {
	if s.down.Load() {
		return errors.New("dial tcp: connection refused")
	}
	err := s.MemFlowStore.Round(ctx, r)
	for _, v := range r.Verdicts {
		if v.Kind == FlowAdmitted {
			s.down.Store(true)
		}
	}
	return err
}

// A store that stays down until the grace period ends: an ack whose dedupe key was not marked
// done is not sent (the mark goes before the acknowledgement); the delivery is left unsettled.
func TestFlowDoneMarkNeverWrittenWithholdsTheAck(t *testing.T) {
	src := &faultySource{fakeSource: fakeSource{caps: Capabilities{Ack: true}, deliveries: keyed(1, "a"), infinite: true}}
	store := &downAfterAdmit{MemFlowStore: NewMemFlowStore()}
	ran := make(chan struct{})
	p := pipeline(src, func(context.Context, *Delivery) Result {
		close(ran)
		return Result{Outcome: Ack()}
	})
	p.ShutdownTimeout = 300 * time.Millisecond
	p.Flow = &Flow{Dedupe: &Dedupe{Key: headerKey("k"), Window: time.Hour}, Store: store}
	var logs syncBuf
	p.Logger = zerolog.New(&logs)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-ran
		// The stop comes once the release round has failed.
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end) && !strings.Contains(logs.String(), "store round failed"); {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if err := run(t, ctx, Options{}, p); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	settled, _, _ := src.snapshot()
	src.rmu.Lock()
	released := len(src.released)
	src.rmu.Unlock()
	if len(settled) != 0 || released != 1 {
		t.Fatalf("settled %d, released %d: want the ack withheld and the delivery left unsettled", len(settled), released)
	}
	for _, want := range []string{"store round failed; retrying with backoff", "not marked done by the end of the grace period"} {
		if !strings.Contains(logs.String(), want) {
			t.Fatalf("log lacks %q:\n%s", want, logs.String())
		}
	}
}

// A renewal that fails for good is logged once and counted; the handler goes on and its
// decision is settled.
func TestFlowUnrenewableLeaseIsLogged(t *testing.T) {
	src := &faultySource{fakeSource: fakeSource{caps: Capabilities{Ack: true}, deliveries: keyed(4, "a", "b"), batch: 4}}
	p := pipeline(src, func(_ context.Context, d *Delivery) Result {
		time.Sleep(100 * time.Millisecond) // several renewals (lease 60ms: every 20ms)
		return Result{Outcome: Ack()}
	})
	p.Flow = &Flow{Concurrency: &ConcurrencyKey{Key: headerKey("k"), Limit: 1}, Lease: 60 * time.Millisecond,
		Store: &badKeyStore{MemFlowStore: NewMemFlowStore(), bad: "c:b", renewOnly: true}}
	var logs syncBuf
	p.Logger = zerolog.New(&logs)
	m := &failMetrics{}
	if err := run(t, context.Background(), Options{Metrics: m}, p); err != nil {
		t.Fatal(err)
	}
	if settled, _, _ := src.snapshot(); len(settled) != 4 {
		t.Fatalf("settled %d, want 4", len(settled))
	}
	if m.count("noperm") == 0 {
		t.Fatal("renewal failures not counted")
	}
	lines := logs.String()
	if c := strings.Count(lines, `"level":"error","error":"NOPERM`); c != 1 || !strings.Contains(lines, "renewing a running delivery's lease failed permanently") {
		t.Fatalf("want one error line for the renewal:\n%s", lines)
	}
}
