package telemetry

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/otlptest"
)

func newProvider(t testing.TB, endpoint string) *Provider {
	t.Helper()
	p, err := New(context.Background(), Config{Endpoint: endpoint, SampleRatio: 1, Version: "test"}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Shutdown(context.Background()) })
	return p
}

// One delivery's spans: a consumer span continuing the incoming traceparent, children for the
// handler, an emit (producer) and the settlement; the emitted message and the retry copy carry
// the traceparent of the span that wrote them.
func TestDeliverySpans(t *testing.T) {
	rcv := otlptest.Start(t)
	p := newProvider(t, rcv.URL)
	tr := p.Pipeline("orders", "redis")

	const incomingTrace, incomingSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	d := &engine.Delivery{Message: engine.Message{Key: "orders", ID: "1-0", Headers: map[string]string{
		engine.HeaderTraceparent: "00-" + incomingTrace + "-" + incomingSpan + "-01",
	}}, Attempt: 2}
	ctx, sp := tr.Start(context.Background(), d)
	hctx, endHandler := sp.Handler(ctx)
	if hctx == ctx {
		t.Fatal("the handler's context carries no span of its own")
	}
	endHandler(errors.New("boom"))
	emitted := &engine.Message{Key: "out"}
	sp.Emit(engine.Target{Kind: "stream"}, emitted)(nil)
	cp := d.RetryCopy()
	sp.Settle(engine.ActRequeue, cp)(nil)
	sp.End("retry", nil)
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	spans := rcv.WaitFor(t, "4 spans", 5*time.Second, func(s []otlptest.Span) bool { return len(s) == 4 })
	by := map[string]otlptest.Span{}
	for _, s := range spans {
		by[s.Name] = s
		if s.TraceID != incomingTrace {
			t.Fatalf("span %q in trace %s, want the incoming %s", s.Name, s.TraceID, incomingTrace)
		}
	}
	consumer := by["process orders"]
	if consumer.Kind != tracepb.Span_SPAN_KIND_CONSUMER || consumer.ParentID != incomingSpan {
		t.Fatalf("consumer span %+v; want kind consumer, parent %s", consumer, incomingSpan)
	}
	for k, v := range map[string]string{
		"messaging.system": "redis", "messaging.destination.name": "orders", "messaging.message.id": "1-0",
		"flowrun.pipeline": "orders", "flowrun.attempt": "2", "flowrun.outcome": "retry",
	} {
		if consumer.Attrs[k] != v {
			t.Errorf("consumer span %s = %q, want %q", k, consumer.Attrs[k], v)
		}
	}
	handler := by["handler"]
	if handler.ParentID != consumer.SpanID || !handler.Error {
		t.Fatalf("handler span %+v; want child of %s with error status", handler, consumer.SpanID)
	}
	send := by["send out"]
	if send.Kind != tracepb.Span_SPAN_KIND_PRODUCER || send.ParentID != consumer.SpanID {
		t.Fatalf("emit span %+v; want a producer child of %s", send, consumer.SpanID)
	}
	if tid, sid := otlptest.Traceparent(emitted.Headers[engine.HeaderTraceparent]); tid != incomingTrace || sid != send.SpanID {
		t.Fatalf("emitted message traceparent %q; want trace %s span %s", emitted.Headers[engine.HeaderTraceparent], incomingTrace, send.SpanID)
	}
	settle := by["settle requeue"]
	if settle.ParentID != consumer.SpanID {
		t.Fatalf("settle span %+v; want child of %s", settle, consumer.SpanID)
	}
	if tid, sid := otlptest.Traceparent(cp.Headers[engine.HeaderTraceparent]); tid != incomingTrace || sid != settle.SpanID {
		t.Fatalf("retry copy traceparent %q; want trace %s span %s", cp.Headers[engine.HeaderTraceparent], incomingTrace, settle.SpanID)
	}
}

// A collector that is down never slows a pipeline: spans are dropped and counted.
func TestCollectorDownDropsAndCounts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	p := newProvider(t, "http://"+addr)
	tr := p.Pipeline("orders", "redis")
	start := time.Now()
	const n = queueSize + 1000
	for i := 0; i < n; i++ {
		_, sp := tr.Start(context.Background(), &engine.Delivery{Message: engine.Message{Key: "orders", Headers: map[string]string{}}})
		sp.End("ack", nil)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("%d spans took %s with the collector down", n, took)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.Shutdown(sctx)
	if got := p.Dropped(); got != n {
		t.Fatalf("dropped %d spans, want all %d (exported %d)", got, n, p.Exported())
	}
}

func TestTracesURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:4318":        "http://127.0.0.1:4318/v1/traces",
		"http://127.0.0.1:4318/":       "http://127.0.0.1:4318/v1/traces",
		"https://otel.example/collect": "https://otel.example/collect/v1/traces",
	} {
		if got, err := tracesURL(in); err != nil || got != want {
			t.Errorf("tracesURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := tracesURL("127.0.0.1:4318"); err == nil {
		t.Error("a URL without scheme was taken")
	}
}

// With sample_ratio 0 nothing is recorded, but the trace still goes on: written messages carry a
// traceparent with the sampled flag off, and an incoming sampled one is honoured (parent-based).
func TestUnsampledStillPropagates(t *testing.T) {
	rcv := otlptest.Start(t)
	p, err := New(context.Background(), Config{Endpoint: rcv.URL, SampleRatio: 0}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	tr := p.Pipeline("orders", "pipe")
	d := &engine.Delivery{Message: engine.Message{Key: "orders", Headers: map[string]string{}}}
	_, sp := tr.Start(context.Background(), d)
	out := &engine.Message{Key: "out"}
	sp.Emit(engine.Target{Kind: "record"}, out)(nil)
	sp.End("ack", nil)
	tp := out.Headers[engine.HeaderTraceparent]
	if tid, _ := otlptest.Traceparent(tp); tid == "" || !strings.HasSuffix(tp, "-00") {
		t.Fatalf("unsampled emit traceparent %q; want one with the sampled flag off", tp)
	}

	const sampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	d = &engine.Delivery{Message: engine.Message{Key: "orders", Headers: map[string]string{engine.HeaderTraceparent: sampled}}}
	_, sp = tr.Start(context.Background(), d)
	sp.End("ack", nil)
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if spans := rcv.Spans(); len(spans) != 1 || spans[0].ParentID != "00f067aa0ba902b7" {
		t.Fatalf("exported %+v; want only the span of the sampled incoming trace", spans)
	}
}
