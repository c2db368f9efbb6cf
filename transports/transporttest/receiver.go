package transporttest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/flowrun/flowrun/engine"
)

// Timeout bounds every wait of the suite and of Receiver.
const Timeout = 10 * time.Second

// Receiver runs a source's Receive in the background the way the engine does: with a feed of
// limit deliveries (an engine.Queue) and one goroutine that takes them one by one for the test,
// which plays the handlers; like a handler slot, that goroutine holds one delivery while it
// waits to be taken. The feed checks the engine.Feed contract as it goes: a source pushes no
// more than the last Room allowed, and nothing once Receive has returned; Stop (or the test's
// end) fails the test on a breach.
type Receiver struct {
	src     engine.Source
	feed    *checkedFeed
	out     chan *engine.Delivery
	cancel  context.CancelFunc
	ended   chan struct{} // closed once Receive has returned; err is set then
	err     error
	once    sync.Once
	stopErr error
}

// Receive starts src.Receive with a feed of limit deliveries. When the test ends it is stopped
// (Stop) and src closed.
func Receive(t testing.TB, src engine.Source, limit int) *Receiver {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	q := engine.NewQueue(limit)
	r := &Receiver{
		src: src, cancel: cancel,
		feed:  &checkedFeed{q: q},
		out:   make(chan *engine.Delivery),
		ended: make(chan struct{}),
	}
	caps := src.Capabilities()
	go func() {
		defer close(r.out)
		for {
			d, ok := q.Take()
			if !ok {
				return
			}
			caps.Number(d) // as a worker does before the handler runs
			r.out <- d     // Stop drains what nobody took
		}
	}()
	go func() {
		err := src.Receive(ctx, r.feed)
		r.feed.end()
		r.err = err
		close(r.ended)
		q.Close() // the test takes what was pushed before, as the engine's workers would
	}()
	t.Cleanup(func() {
		r.Stop(t)
		src.Close()
	})
	return r
}

// Out is the channel deliveries arrive on, for a test that selects over several receivers. It
// is closed once Receive has returned and every delivery was taken.
func (r *Receiver) Out() <-chan *engine.Delivery { return r.out }

// Next waits for the next delivery. It fails the test when Receive returns first, or after
// Timeout.
func (r *Receiver) Next(t testing.TB) *engine.Delivery {
	t.Helper()
	select {
	case d, ok := <-r.out:
		if !ok {
			t.Fatalf("Receive returned (%v) instead of delivering", r.err)
		}
		return d
	case <-time.After(Timeout):
		t.Fatalf("no delivery within %s", Timeout)
	}
	return nil
}

// Take waits for n deliveries.
func (r *Receiver) Take(t testing.TB, n int) []*engine.Delivery {
	t.Helper()
	ds := make([]*engine.Delivery, n)
	for i := range ds {
		ds[i] = r.Next(t)
	}
	return ds
}

// None asserts that nothing is delivered for d (a negative check has to wait). A Receive that
// returns meanwhile, having handed everything over, delivers nothing.
func (r *Receiver) None(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case got, ok := <-r.out:
		if ok {
			t.Fatalf("unexpected delivery id %q key %q headers %v payload %q", got.ID, got.Key, got.Headers, got.Payload)
		}
	case <-time.After(d):
	}
}

// Running reports whether Receive has not returned yet.
func (r *Receiver) Running() bool {
	select {
	case <-r.ended:
		return false
	default:
		return true
	}
}

// End waits for a finite source's Receive to return by itself, once every delivery it pushed
// was taken, and returns its error. A further delivery fails the test.
func (r *Receiver) End(t testing.TB) error {
	t.Helper()
	select {
	case d, ok := <-r.out:
		if ok {
			t.Fatalf("unexpected delivery id %q key %q payload %q", d.ID, d.Key, d.Payload)
		}
		r.check(t)
		return r.err
	case <-time.After(Timeout):
		t.Fatalf("Receive did not return within %s", Timeout)
	}
	return nil
}

// Rest takes every delivery until Receive returns by itself (a finite source, or a failure)
// and returns them with Receive's error.
func (r *Receiver) Rest(t testing.TB) ([]*engine.Delivery, error) {
	t.Helper()
	var ds []*engine.Delivery
	deadline := time.After(Timeout)
	for {
		select {
		case d, ok := <-r.out:
			if !ok {
				r.check(t)
				return ds, r.err
			}
			ds = append(ds, d)
		case <-deadline:
			t.Fatalf("Receive did not return within %s (%d deliveries)", Timeout, len(ds))
		}
	}
}

// Drain is Rest for a finite source, whose Receive must return nil at the end of its input.
func (r *Receiver) Drain(t testing.TB) []*engine.Delivery {
	t.Helper()
	ds, err := r.Rest(t)
	if err != nil {
		t.Fatalf("Receive = %v, want nil at the end of the input", err)
	}
	return ds
}

// Err is Receive's own error once it has returned (Stop, End, Rest), nil before.
func (r *Receiver) Err() error {
	if r.Running() {
		return nil
	}
	return r.err
}

// Stop ends Receive as a stop signal does, waits for it (failing the test after Timeout) and,
// as the engine does, gives the deliveries it handed over but nobody took back to a source that
// takes them (engine.Returner). It returns Receive's error, nil for a clean stop (nil or the
// context's). It does not close the source: settle first, then close. Stop is idempotent.
func (r *Receiver) Stop(t testing.TB) error {
	t.Helper()
	untaken, err := r.Halt(t)
	if ret, ok := r.src.(engine.Returner); ok && len(untaken) > 0 {
		ret.Return(untaken)
	}
	return err
}

// Halt is Stop without the giving back: it returns the deliveries handed over and never taken,
// for a test to look at the source before it gives them back itself. Only the first call of
// Halt or Stop returns them.
func (r *Receiver) Halt(t testing.TB) ([]*engine.Delivery, error) {
	t.Helper()
	var untaken []*engine.Delivery
	r.once.Do(func() {
		r.cancel()
		select {
		case <-r.ended:
		case <-time.After(Timeout):
			t.Fatalf("Receive did not return within %s of a stop", Timeout)
			return
		}
		for d := range r.out {
			untaken = append(untaken, d)
		}
		if r.err != nil && !errors.Is(r.err, context.Canceled) {
			r.stopErr = r.err
		}
		r.check(t)
	})
	return untaken, r.stopErr
}

// check reports the feed contract's breaches as errors of t.
func (r *Receiver) check(t testing.TB) {
	t.Helper()
	for _, v := range r.feed.breaches() {
		t.Errorf("feed contract: %s", v)
	}
}

// checkedFeed is an engine.Queue that checks what the source does with it (engine.Feed): every
// Push fits in what the last Room allowed, less what was pushed since, and no Push comes after
// Receive returned.
type checkedFeed struct {
	q *engine.Queue

	mu       sync.Mutex
	credit   int
	returned bool
	breach   []string
}

func (f *checkedFeed) Room(ctx context.Context) int {
	n := f.q.Room(ctx)
	f.mu.Lock()
	f.credit = n
	f.mu.Unlock()
	return n
}

func (f *checkedFeed) RoomFor(ctx context.Context, want int) int {
	n := f.q.RoomFor(ctx, want)
	f.mu.Lock()
	f.credit = n
	f.mu.Unlock()
	return n
}

func (f *checkedFeed) Push(ctx context.Context, ds []*engine.Delivery) bool {
	f.mu.Lock()
	switch {
	case f.returned:
		f.breach = append(f.breach, fmt.Sprintf("%d deliveries pushed after Receive returned", len(ds)))
	case len(ds) > f.credit:
		f.breach = append(f.breach, fmt.Sprintf("%d deliveries pushed with room for %d (read more than Room allowed)", len(ds), f.credit))
	}
	f.credit = max(f.credit-len(ds), 0)
	f.mu.Unlock()
	return f.q.Push(ctx, ds)
}

func (f *checkedFeed) end() {
	f.mu.Lock()
	f.returned = true
	f.mu.Unlock()
}

func (f *checkedFeed) breaches() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.breach
	f.breach = nil
	return out
}

var _ engine.Feed = (*checkedFeed)(nil)

// Flatten returns a feed to hand to a source's Receive, holding up to limit deliveries as the
// engine would, and a channel that yields what was pushed one by one, in order: Receiver
// without its checks and its stop, for a benchmark that plays the engine itself. Whoever reads
// the channel plays the handlers; like a handler slot, the goroutine behind it holds one
// delivery while it waits to be read. It stops when ctx ends.
func Flatten(ctx context.Context, limit int) (*engine.Queue, <-chan *engine.Delivery) {
	q := engine.NewQueue(limit)
	out := make(chan *engine.Delivery)
	context.AfterFunc(ctx, q.Close)
	go func() {
		for {
			d, ok := q.Take()
			if !ok {
				return
			}
			select {
			case out <- d:
			case <-ctx.Done():
				return
			}
		}
	}()
	return q, out
}
