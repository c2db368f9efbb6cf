package telemetry

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/otlptest"
)

// A run span is made where the run ends, with the ids its trace context keeps, from the run's
// start; a failed run's error is recorded on it. An unsampled run, or a trace context that
// names no run span (a bare traceparent), exports nothing.
func TestRunSpan(t *testing.T) {
	rcv := otlptest.Start(t)
	p := newProvider(t, rcv.URL)
	runs := p.Runs()
	tc := runs.RunTrace(context.Background(), "order", "o-1")
	tp, parent, _ := strings.Cut(tc, " ")
	tid, sid := otlptest.Traceparent(tp)
	if tid == "" || parent != "-" || !strings.HasSuffix(tp, "-01") {
		t.Fatalf("trace context %q; want a sampled root's", tc)
	}
	started := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	at := time.Now()
	runs.EndRun(tc, engine.RunEnd{Workflow: "order", Run: "o-1", Visit: 3, Status: "failed", Error: "declined", Started: started, At: at})
	runs.EndRun(tp, engine.RunEnd{Workflow: "order", Run: "legacy", Status: "completed", At: at})
	unsampled := strings.Replace(tc, "-01 ", "-00 ", 1)
	runs.EndRun(unsampled, engine.RunEnd{Workflow: "order", Run: "unsampled", Status: "completed", At: at})
	child := "00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01 00f067aa0ba902b7"
	runs.EndRun(child, engine.RunEnd{Workflow: "order", Run: "o-2", Status: "cancelled", Started: started, At: at})
	retried := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	runs.EndRun(engine.RunRetrace(tc, retried), engine.RunEnd{Workflow: "order", Run: "o-1", Status: "completed", Started: started, At: at})
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := rcv.WaitFor(t, "3 run spans", 5*time.Second, func(s []otlptest.Span) bool { return len(s) >= 3 })
	if len(spans) != 3 {
		t.Fatalf("exported %+v; want o-1's, o-2's and o-1's retry's run spans only", spans)
	}
	if rs := spans[2]; rs.TraceID != tid || rs.ParentID != sid || rs.SpanID == sid || !rs.Start.Equal(retried) || rs.Error {
		t.Errorf("retried run span %+v; want the child of %s begun at %v", rs, sid, retried)
	}
	r := spans[0]
	if r.Name != "run order" || r.TraceID != tid || r.SpanID != sid || r.ParentID != "" ||
		!r.Start.Equal(started) || !r.End.Equal(at) {
		t.Fatalf("run span %+v; want run order %s/%s, a root, %v..%v", r, tid, sid, started, at)
	}
	for k, v := range map[string]string{"flowrun.workflow": "order", "flowrun.run_id": "o-1", "flowrun.status": "failed"} {
		if r.Attrs[k] != v {
			t.Errorf("run span %s = %q, want %q", k, r.Attrs[k], v)
		}
	}
	if !r.Error || !slices.Contains(r.Events, "exception") {
		t.Errorf("run span %+v; want the error recorded", r)
	}
	c := spans[1]
	if c.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || c.SpanID != "1111111111111111" || c.ParentID != "00f067aa0ba902b7" || c.Error {
		t.Errorf("child run span %+v", c)
	}
}

// With sample_ratio 0 a run's trace context says unsampled, and its start delivery's span
// continues it unsampled.
func TestRunTraceUnsampled(t *testing.T) {
	p, err := New(context.Background(), Config{Endpoint: "http://127.0.0.1:1", SampleRatio: 0}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	tr := p.RunStart(p.Pipeline("order", "redis"), "order")
	ctx, sp := tr.Start(context.Background(), &engine.Delivery{Message: engine.Message{Key: "orders", Headers: map[string]string{}}})
	tc := p.Runs().RunTrace(ctx, "order", "o-1")
	sp.End("ack", nil)
	if !strings.Contains(tc, "-00 ") {
		t.Fatalf("trace context %q; want the sampled flag off", tc)
	}
}

// A run ended while visits of it are in flight here (the last one, settling; the one before,
// whose settlement wrote the last one's message) gets its span when the last of them ends, so
// the run span ends after every visit span.
func TestRunSpanAfterVisitsInFlight(t *testing.T) {
	rcv := otlptest.Start(t)
	p := newProvider(t, rcv.URL)
	runs := p.Runs()
	tc := runs.RunTrace(context.Background(), "order", "o-1")
	tr := p.Pipeline("order/reserve", "redis")
	visit := func(step string, n int) engine.Span {
		d := &engine.Delivery{Message: engine.Message{Key: "flowrun:{order}:s:" + step, Headers: map[string]string{
			engine.HeaderTraceparent: engine.RunTraceparent(tc)}},
			Run: &engine.Run{ID: "o-1", Workflow: "order", Step: step, Visit: n}}
		_, sp := tr.Start(context.Background(), d)
		return sp
	}
	first, last := visit("reserve", 1), visit("charge", 2)
	runs.EndRun(tc, engine.RunEnd{Workflow: "order", Run: "o-1", Visit: 2, Status: "completed", Started: time.Now().Add(-time.Second), At: time.Now()})
	last.End("ack", nil)
	first.End("ack", nil)
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := rcv.WaitFor(t, "3 spans", 5*time.Second, func(s []otlptest.Span) bool { return len(s) >= 3 })
	run := spans[len(spans)-1]
	if run.Name != "run order" {
		t.Fatalf("spans %+v; want the run span last", spans)
	}
	for _, s := range spans[:2] {
		if s.ParentID != run.SpanID || s.End.After(run.End) || s.Attrs["flowrun.run_id"] != "o-1" {
			t.Errorf("visit span %+v; want the run span's child, ended before it (%v)", s, run.End)
		}
	}
}
