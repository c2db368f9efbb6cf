package redisrun

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowrun/flowrun/engine"
)

// fakeRunTracer gives every run the trace context trace and records the run spans ended.
type fakeRunTracer struct {
	trace string
	mu    sync.Mutex
	ended []engine.RunEnd
	of    []string // the trace context each was ended with
}

func (f *fakeRunTracer) RunTrace(context.Context, string, string) string { return f.trace }

func (f *fakeRunTracer) EndRun(trace string, e engine.RunEnd) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ended, f.of = append(f.ended, e), append(f.of, trace)
}

func ackAll(context.Context, *engine.Delivery) engine.Result {
	return engine.Result{Outcome: engine.Ack()}
}

// With tracing, a run keeps its trace context in its record, each step message carries the run
// span's traceparent, and the settlement that ends the run ends its span, with the run's start
// and the trace context read with the run (SPEC §14, §16).
func TestRunTrace(t *testing.T) {
	e := newEnv(t)
	const tp = "00-01020300000000000000000000000000-0405000000000000-01"
	ft := &fakeRunTracer{trace: tp + " -"}
	e.s.Tracer = ft
	d := &engine.Delivery{Message: engine.Message{Key: "orders", ID: "1-0", Headers: map[string]string{
		engine.HeaderTraceparent: "00-0a0b0c00000000000000000000000000-0d0e000000000000-01"}, Payload: []byte(`{}`)}}
	if res := e.s.StartHandler(nil, "fp").Handle(e.ctx, d); res.Err != nil {
		t.Fatal(res.Err)
	}
	id := DefaultRunID(d)
	rec := e.hgetall(e.k.run(id))
	if rec[fTrace] != tp+" -" {
		t.Fatalf("run record's trace %q, want %q", rec[fTrace], tp+" -")
	}
	r := e.stepSource("reserve", "w1", time.Minute)
	d = r.Next(t)
	if got := d.Headers[engine.HeaderTraceparent]; got != tp {
		t.Fatalf("reserve's traceparent = %q, want %q", got, tp)
	}
	r.decide(t, d, handled(e.s.g, d, ackAll).Outcome)
	if f := fields(e.xrange(e.k.step("charge"))[0]); f[engine.HeaderTraceparent] != tp {
		t.Errorf("charge message = %v", f)
	}
	if len(ft.ended) != 0 {
		t.Fatalf("run span ended before the run: %+v", ft.ended)
	}
	c := e.stepSource("charge", "w1", time.Minute)
	d = c.Next(t)
	c.decide(t, d, handled(e.s.g, d, ackAll).Outcome)
	ft.mu.Lock()
	defer ft.mu.Unlock()
	if len(ft.ended) != 1 || ft.of[0] != tp+" -" {
		t.Fatalf("run spans ended %+v with %q; want one, with the run's trace context", ft.ended, ft.of)
	}
	end := ft.ended[0]
	started := timeOfMS(rec[fStartedAt])
	if end.Workflow != "order" || end.Run != id || end.Status != "completed" || end.Visit != 2 ||
		!end.Started.Equal(started) || end.At.Before(started) {
		t.Errorf("run span end %+v; want order/%s completed at visit 2, started %v", end, id, started)
	}
	if st := e.hgetall(e.k.run(id))[fStatus]; st != "completed" {
		t.Errorf("run status %q", st)
	}
}

// Without tracing nothing is added (SPEC §14): no trace field in the record, and no traceparent
// on the step messages, even when the start message had one.
func TestRunTraceOff(t *testing.T) {
	e := newEnv(t)
	d := &engine.Delivery{Message: engine.Message{Key: "orders", ID: "1-0", Headers: map[string]string{
		engine.HeaderTraceparent: "00-0a0b0c00000000000000000000000000-0d0e000000000000-01"}, Payload: []byte(`{}`)}}
	if res := e.s.StartHandler(nil, "fp").Handle(e.ctx, d); res.Err != nil {
		t.Fatal(res.Err)
	}
	rec := e.hgetall(e.k.run(DefaultRunID(d)))
	if _, ok := rec[fTrace]; ok || rec[fStatus] != "running" {
		t.Fatalf("run record %v; want it running without a trace field", rec)
	}
	r := e.stepSource("reserve", "w1", time.Minute)
	d = r.Next(t)
	if _, ok := d.Headers[engine.HeaderTraceparent]; ok {
		t.Fatalf("reserve's message carries a traceparent: %v", d.Headers)
	}
	r.decide(t, d, handled(e.s.g, d, ackAll).Outcome)
	if f := fields(e.xrange(e.k.step("charge"))[0]); f[engine.HeaderTraceparent] != "" {
		t.Errorf("charge message carries a traceparent: %v", f)
	}
}

// A retried run's span ended when it failed; the retry gives it a new run span, the child of the
// first, begun at the retry, which the charge message carries and the run's new end ends.
func TestRunTraceRetry(t *testing.T) {
	e := newEnv(t)
	e.s.g.OnFailure = "stop"
	const tp = "00-01020300000000000000000000000000-0405000000000000-01"
	ft := &fakeRunTracer{trace: tp + " -"}
	e.s.Tracer = ft
	d := &engine.Delivery{Message: engine.Message{Key: "orders", ID: "1-0", Headers: map[string]string{}, Payload: []byte(`{}`)}}
	if res := e.s.StartHandler(nil, "fp").Handle(e.ctx, d); res.Err != nil {
		t.Fatal(res.Err)
	}
	id := DefaultRunID(d)
	r := e.stepSource("reserve", "w1", time.Minute)
	d = r.Next(t)
	r.decide(t, d, handled(e.s.g, d, ackAll).Outcome)
	c := e.stepSource("charge", "w1", time.Minute)
	d = c.Next(t)
	c.decide(t, d, handled(e.s.g, d, func(context.Context, *engine.Delivery) engine.Result {
		return engine.Result{Outcome: engine.DeadLetter("card declined")}
	}).Outcome)
	before := time.Now().Add(-time.Millisecond)
	if err := e.s.Retry(e.ctx, id); err != nil {
		t.Fatal(err)
	}
	tc := e.hgetall(e.k.run(id))[fTrace]
	parts := strings.Fields(tc)
	if len(parts) != 3 || parts[1] != "0405000000000000" || !strings.HasPrefix(parts[0], tp[:36]) || parts[0] == tp ||
		!strings.HasSuffix(parts[0], "-01") || timeOfMS(parts[2]).Before(before.Truncate(time.Millisecond)) {
		t.Fatalf("retried run's trace %q; want a new span of the trace, the child of %s, begun at the retry", tc, tp[36:52])
	}
	d = c.Next(t)
	if got := d.Headers[engine.HeaderTraceparent]; got != parts[0] {
		t.Fatalf("retried charge's traceparent %q, want %q", got, parts[0])
	}
	c.decide(t, d, handled(e.s.g, d, ackAll).Outcome)
	ft.mu.Lock()
	defer ft.mu.Unlock()
	if len(ft.ended) != 2 || ft.ended[0].Status != "failed" || ft.ended[0].Error != "card declined" || ft.of[0] != tp+" -" ||
		ft.ended[1].Status != "completed" || ft.of[1] != tc {
		t.Fatalf("run spans ended %+v with %q; want the failed one, then the retry's", ft.ended, ft.of)
	}
}

func TestRunRetraceNamesNoSpanWithout(t *testing.T) {
	for _, tc := range []string{"", "00-01020300000000000000000000000000-0405000000000000-01", "x y"} {
		if got := engine.RunRetrace(tc, time.Now()); got != "" {
			t.Errorf("RunRetrace(%q) = %q, want \"\"", tc, got)
		}
	}
}
