package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recordingTracer is a Tracer that writes "<span>" traceparents and records what the engine
// asked of it, per delivery.
type recordingTracer struct {
	mu     sync.Mutex
	events []string
}

type ctxKey struct{}
type handlerKey struct{}

func (r *recordingTracer) Start(ctx context.Context, d *Delivery) (context.Context, Span) {
	r.add(d.ID, "start parent="+d.Headers[HeaderTraceparent])
	return context.WithValue(ctx, ctxKey{}, d.ID), &recordingSpan{r: r, id: d.ID}
}

func (r *recordingTracer) add(id, ev string) {
	r.mu.Lock()
	r.events = append(r.events, id+" "+ev)
	r.mu.Unlock()
}

func (r *recordingTracer) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append([]string(nil), r.events...)
	sort.SliceStable(out, func(i, j int) bool { return out[i][:1] < out[j][:1] })
	return out
}

type recordingSpan struct {
	r     *recordingTracer
	id    string
	n     int
	ended bool
}

func (s *recordingSpan) Handler(ctx context.Context) (context.Context, func(error)) {
	if ctx.Value(ctxKey{}) != s.id {
		s.r.add(s.id, "handler without the consumer span's context")
	}
	s.r.add(s.id, "handler")
	return context.WithValue(ctx, handlerKey{}, s.id), func(err error) { s.r.add(s.id, fmt.Sprintf("handler end err=%v", err != nil)) }
}

func (s *recordingSpan) Emit(t Target, m *Message) func(error) {
	s.n++
	name := fmt.Sprintf("emit%d", s.n)
	m.Headers = map[string]string{HeaderTraceparent: name}
	s.r.add(s.id, name+" "+m.Key)
	return func(err error) { s.r.add(s.id, fmt.Sprintf("%s end err=%v", name, err != nil)) }
}

func (s *recordingSpan) Settle(a Action, writes ...*Message) func(error) {
	s.n++
	name := fmt.Sprintf("settle%d", s.n)
	for _, m := range writes {
		m.Headers[HeaderTraceparent] = name
	}
	s.r.add(s.id, fmt.Sprintf("%s %s writes=%d", name, a, len(writes)))
	return func(err error) { s.r.add(s.id, fmt.Sprintf("%s end err=%v", name, err != nil)) }
}

func (s *recordingSpan) End(outcome string, err error) {
	if s.ended {
		s.r.add(s.id, "ended twice")
	}
	s.ended = true
	s.r.add(s.id, fmt.Sprintf("end %s err=%v", outcome, err != nil))
}

// Every delivery's span sees its handler, each emit, each settlement attempt (a failed one too)
// and one end with the final outcome; written copies and emits carry the writing span's
// traceparent.
func TestTracerSpansPerDelivery(t *testing.T) {
	ds := deliveries(4)
	ds[0].Headers[HeaderTraceparent] = "incoming"
	src := &fakeSource{caps: Capabilities{Ack: true}, deliveries: ds, failSettle: 1}
	var badCtx atomic.Int32
	p := pipeline(src, func(ctx context.Context, d *Delivery) Result {
		if ctx.Value(handlerKey{}) != d.ID {
			badCtx.Add(1) // not run in its handler span's context
		}
		switch d.ID {
		case "1":
			return Result{Outcome: Ack(), Emits: []Emit{{Target: Target{Kind: "record"}, Message: &Message{Key: "out"}}}}
		case "2":
			return Result{Outcome: Retry(), Err: errors.New("boom")}
		case "3": // its emit fails: a retry
			return Result{Outcome: Ack(), Emits: []Emit{{Target: Target{Kind: "broken"}, Message: &Message{Key: "x"}}}}
		default: // a runtime delayed copy, held, then written by Requeue
			if d.Headers[HeaderRetryCount] != "" {
				return Result{Outcome: Ack()}
			}
			return Result{Outcome: RetryAfter(time.Millisecond)}
		}
	})
	p.Concurrency = 1
	tr := &recordingTracer{}
	p.Tracer = tr
	sinks := func(t Target) (Sink, error) {
		if t.Kind == "broken" {
			return nil, errors.New("no such sink")
		}
		return recordingSink{src: src, key: t.Kind}, nil
	}
	if err := run(t, context.Background(), Options{Sinks: sinks}, p); err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, ev := range tr.snapshot() {
		got[ev[:1]] = append(got[ev[:1]], ev[2:])
	}
	// Which deliveries share the Settle call that fails (failSettle) depends on batching; each
	// delivery's own story does not.
	type story struct{ parent, handlerErr, emits, end string }
	want := map[string]story{
		"1": {"incoming", "false", "[emit1 out emit1 end err=false]", "end ack err=false"},
		"2": {"", "true", "[]", "end retry err=false"},
		"3": {"", "false", "[emit1 x emit1 end err=true]", "end retry err=false"},
		"4": {"", "false", "[]", "end retry_after err=false"},
	}
	failedSettles := 0
	for id, w := range want {
		evs := got[id]
		if len(evs) < 6 || evs[0] != "start parent="+w.parent || evs[1] != "handler" || evs[2] != "handler end err="+w.handlerErr {
			t.Fatalf("delivery %s: %v", id, evs)
		}
		var emits []string
		rest := evs[3:]
		for len(rest) > 0 && strings.HasPrefix(rest[0], "emit") {
			emits, rest = append(emits, rest[0]), rest[1:]
		}
		if fmt.Sprint(emits) != w.emits {
			t.Errorf("delivery %s: emits %v, want %s", id, emits, w.emits)
		}
		if last := rest[len(rest)-1]; last != w.end {
			t.Errorf("delivery %s: last event %q, want %q", id, last, w.end)
		}
		settles := rest[:len(rest)-1]
		if len(settles)%2 != 0 || len(settles) == 0 || !strings.HasSuffix(settles[len(settles)-1], "end err=false") {
			t.Errorf("delivery %s: settlement spans %v; want begin/end pairs, the last one successful", id, settles)
		}
		for _, ev := range settles {
			if !strings.HasPrefix(ev, "settle") {
				t.Errorf("delivery %s: %q among its settlement spans", id, ev)
			}
			if strings.HasSuffix(ev, "end err=true") {
				failedSettles++
			}
		}
	}
	if failedSettles == 0 {
		t.Error("the failed Settle call ended no settlement span with an error")
	}
	settled, requeued, _ := src.snapshot()
	for _, s := range settled {
		if s.Copy != nil && !strings.HasPrefix(s.Copy.Headers[HeaderTraceparent], "settle") {
			t.Errorf("copy of %s written with traceparent %q, not its settle span's", s.Delivery.ID, s.Copy.Headers[HeaderTraceparent])
		}
	}
	if n := badCtx.Load(); n != 0 {
		t.Errorf("%d handlers did not run in their handler span's context", n)
	}
	if len(requeued) != 1 || !strings.HasPrefix(requeued[0].Headers[HeaderTraceparent], "settle") {
		t.Errorf("held copy written as %+v; want one with its settle span's traceparent", requeued)
	}
}
