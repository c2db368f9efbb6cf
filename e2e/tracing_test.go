package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/internal/otlptest"
	"github.com/flowrun/flowrun/internal/redistest"
)

const (
	incomingTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	incomingSpan  = "00f067aa0ba902b7"
)

// chainPipelines is the tracing tests' chain: "ingest" emits each entry of "in" into "mid",
// where "work" retries it once and dead-letters it to "mid.dlq".
const chainPipelines = `
pipeline "ingest" {
  source "stream" {
    stream = "in"
    block  = "100ms"
  }
  rule "forward" {
    emit "stream" { key = "mid" }
    outcome = "ack"
  }
}

pipeline "work" {
  source "stream" {
    stream = "mid"
    block  = "100ms"
  }
  max_attempts = 2
  dead_letter  = "mid.dlq"
  rule "fail" {
    outcome = "retry"
  }
}
`

// runChainToDeadLetter runs cfg (a chainPipelines config) until the entry added to "in" is
// dead-lettered and nothing is pending, then stops it; it must exit 0.
func runChainToDeadLetter(t *testing.T, rdb *redis.Client, cfg string) {
	t.Helper()
	ctx := context.Background()
	p := start(t, "run", cfg)
	eventually(t, 15*time.Second, "the dead letter", func() bool {
		pend, err := rdb.XPending(ctx, "mid", "work").Result()
		return rdb.XLen(ctx, "mid.dlq").Val() == 1 && err == nil && pend.Count == 0
	})
	p.signal(syscall.SIGTERM)
	if code := p.wait(15 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// TestTraceAcrossPipelines (SPEC §14): a message with a traceparent goes through a pipeline that
// emits it into a second one, which retries it once and dead-letters it. Every span is in the
// incoming trace, each consumer span's parent is the span that wrote the message it read, and
// every message written (the emit, the retry copy, the dead letter) carries its writer's
// traceparent.
func TestTraceAcrossPipelines(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	rcv := otlptest.Start(t)
	dir := t.TempDir()
	cfg := writeFile(t, dir, "chain.hcl", fmt.Sprintf(`redis "main" {
  url = %q
}

telemetry {
  otlp_endpoint = %q
}
`, srv.URL, rcv.URL)+chainPipelines)
	err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "in", Values: []string{
		"payload", `{"id":1}`, "traceparent", "00-" + incomingTrace + "-" + incomingSpan + "-01"}}).Err()
	if err != nil {
		t.Fatal(err)
	}
	runChainToDeadLetter(t, rdb, cfg)
	spans := rcv.WaitFor(t, "the chain's spans", 10*time.Second, func(s []otlptest.Span) bool { return len(s) >= 10 })
	byID := map[string]otlptest.Span{}
	for _, s := range spans {
		if s.TraceID != incomingTrace {
			t.Errorf("span %q (%s) in trace %s, want the incoming %s", s.Name, s.Attrs["flowrun.pipeline"], s.TraceID, incomingTrace)
		}
		byID[s.SpanID] = s
	}
	find := func(name, pipeline, attempt string) otlptest.Span {
		t.Helper()
		for _, s := range spans {
			if s.Name == name && s.Attrs["flowrun.pipeline"] == pipeline && (attempt == "" || s.Attrs["flowrun.attempt"] == attempt) {
				return s
			}
		}
		t.Fatalf("no span %q of %s (attempt %q) among %d", name, pipeline, attempt, len(spans))
		return otlptest.Span{}
	}
	// The writer of a message is the span its traceparent names.
	writer := func(fields map[string]any) otlptest.Span {
		t.Helper()
		tp, _ := fields["traceparent"].(string)
		tid, sid := otlptest.Traceparent(tp)
		if tid != incomingTrace {
			t.Fatalf("message %v: traceparent %q not in the incoming trace", fields, tp)
		}
		s, ok := byID[sid]
		if !ok {
			t.Fatalf("message %v: traceparent names span %s, which was not exported", fields, sid)
		}
		return s
	}

	ingest := find("process in", "ingest", "1")
	if ingest.ParentID != incomingSpan || ingest.Attrs["messaging.system"] != "redis" || ingest.Attrs["flowrun.outcome"] != "ack" ||
		ingest.Attrs["messaging.destination.name"] != "in" || ingest.Attrs["messaging.message.id"] == "" {
		t.Fatalf("ingest consumer span %+v", ingest)
	}
	send := find("send mid", "ingest", "")
	if send.ParentID != ingest.SpanID {
		t.Fatalf("emit span's parent %s, want the ingest consumer %s", send.ParentID, ingest.SpanID)
	}
	mid := rdb.XRange(ctx, "mid", "-", "+").Val()
	if len(mid) != 2 {
		t.Fatalf("mid holds %d entries, want the emit and the retry copy", len(mid))
	}
	if w := writer(mid[0].Values); w.SpanID != send.SpanID {
		t.Fatalf("the emitted entry was written by %q, want the emit span", w.Name)
	}
	first := find("process mid", "work", "1")
	if first.ParentID != send.SpanID || first.Attrs["flowrun.outcome"] != "retry" {
		t.Fatalf("work attempt 1 span %+v; want child of the emit span %s, outcome retry", first, send.SpanID)
	}
	copyWriter := writer(mid[1].Values)
	if copyWriter.ParentID != first.SpanID || !strings.HasPrefix(copyWriter.Name, "settle") {
		t.Fatalf("the retry copy was written by %+v; want a settle span of attempt 1", copyWriter)
	}
	second := find("process mid", "work", "2")
	if second.ParentID != copyWriter.SpanID || second.Attrs["flowrun.outcome"] != "dead_letter" {
		t.Fatalf("work attempt 2 span %+v; want child of %s, outcome dead_letter", second, copyWriter.SpanID)
	}
	dlq := rdb.XRange(ctx, "mid.dlq", "-", "+").Val()
	if dw := writer(dlq[0].Values); dw.ParentID != second.SpanID || dw.Name != "settle dead_letter" {
		t.Fatalf("the dead letter was written by %+v; want attempt 2's settle dead_letter span", dw)
	}
	for _, s := range []otlptest.Span{ingest, first, second} {
		if h := find("handler", s.Attrs["flowrun.pipeline"], ""); h.TraceID != incomingTrace {
			t.Fatalf("handler span %+v", h)
		}
	}
}

// TestTraceparentToHTTPHandler: the http handler sends its span's traceparent with the request,
// in the trace the message started. The collector is named by the standard variable alone.
func TestTraceparentToHTTPHandler(t *testing.T) {
	var mu sync.Mutex
	var got []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("traceparent"))
		mu.Unlock()
	}))
	t.Cleanup(hook.Close)
	rcv := otlptest.Start(t)
	dir := t.TempDir()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	cfg := writeFile(t, dir, "hook.hcl", fmt.Sprintf(`pipeline "hook" {
  source "pipe" {}
  out_retry = "retries"
  handler "http" {
    url = %q
  }
}
`, hook.URL))
	in := fmt.Sprintf(`{"key":"orders","headers":{"traceparent":"00-%s-%s-01"},"payload":{"id":1}}`+"\n", incomingTrace, incomingSpan)
	if r := flowrun(t, in, "run", cfg); r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	spans := rcv.WaitFor(t, "the handler span", 10*time.Second, func(s []otlptest.Span) bool { return len(s) >= 3 })
	var handler otlptest.Span
	for _, s := range spans {
		if s.Name == "handler" {
			handler = s
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 {
		t.Fatalf("%d requests", len(got))
	}
	if tid, sid := otlptest.Traceparent(got[0]); tid != incomingTrace || sid != handler.SpanID {
		t.Fatalf("request traceparent %q; want trace %s, the handler span %s", got[0], incomingTrace, handler.SpanID)
	}
}

// TestTracingCollectorDown: a collector that does not answer never slows or stops a pipeline;
// its spans are dropped and counted.
func TestTracingCollectorDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	var in strings.Builder
	for i := 0; i < 2000; i++ {
		fmt.Fprintf(&in, `{"key":"k","payload":{"n":%d}}`+"\n", i)
	}
	dir := t.TempDir()
	cfg := writeFile(t, dir, "down.hcl", fmt.Sprintf(`telemetry {
  otlp_endpoint = "http://%s"
}

pipeline "p" {
  source "pipe" {}
  out_retry = "retries"
  rule "all" {
    emit "record" { key = "out" }
    outcome = "ack"
  }
}
`, dead))
	r := flowrun(t, in.String(), "run", cfg)
	if r.code != 0 || strings.Count(r.stdout, "\n") != 2000 {
		t.Fatalf("exit %d, %d records out\n%s", r.code, strings.Count(r.stdout, "\n"), r.stderr)
	}
	if !strings.Contains(r.stderr, "trace export failed") {
		t.Fatalf("the failing collector was not logged:\n%s", r.stderr)
	}
	// Messages still carry a traceparent: propagation does not depend on the collector.
	if !strings.Contains(strings.SplitN(r.stdout, "\n", 2)[0], `"traceparent":"00-`) {
		t.Fatalf("emitted record without a traceparent: %s", strings.SplitN(r.stdout, "\n", 2)[0])
	}
}

// TestNoTelemetryAddsNothing (SPEC §14): with neither a telemetry block nor the variables, the
// emit, the retry copy and the dead letter carry no traceparent.
func TestNoTelemetryAddsNothing(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	dir := t.TempDir()
	cfg := writeFile(t, dir, "chain.hcl", fmt.Sprintf(`redis "main" {
  url = %q
}
`, srv.URL)+chainPipelines)
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "in", Values: []string{"payload", `{"id":1}`}}).Err(); err != nil {
		t.Fatal(err)
	}
	runChainToDeadLetter(t, rdb, cfg)
	for _, key := range []string{"mid", "mid.dlq"} {
		for _, m := range rdb.XRange(ctx, key, "-", "+").Val() {
			if _, ok := m.Values["traceparent"]; ok {
				t.Errorf("%s entry %s carries a traceparent without telemetry: %v", key, m.ID, m.Values)
			}
		}
	}
}
