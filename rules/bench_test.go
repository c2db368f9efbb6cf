package rules

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
)

// BenchmarkRuleSet runs SPEC §2's three rules on a small JSON payload; the sub-benchmark names
// say which rule decides.
func BenchmarkRuleSet(b *testing.B) {
	rs := specRules(b, "")
	cases := []struct {
		name    string
		payload string
		headers map[string]string
		want    engine.Kind
	}{
		{"too-large/drop", `{"id":7,"amount":20000,"currency":"EUR"}`, map[string]string{"gateway": "up"}, engine.KindDrop},
		{"gateway-down/retry_after", `{"id":7,"amount":120,"currency":"EUR"}`, map[string]string{"gateway": "down"}, engine.KindRetryAfter},
		{"ok/ack+emit", `{"id":7,"amount":120,"currency":"EUR"}`, map[string]string{"gateway": "up"}, engine.KindAck},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			d := delivery(c.payload, c.headers)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				d.Decoded = nil // a fresh delivery: its payload is decoded again
				res := rs.Handle(ctx, d)
				if res.Err != nil || res.Outcome.Kind != c.want {
					b.Fatalf("got %+v", res)
				}
			}
		})
	}
}

// BenchmarkNoPayload is a rule set that never reads the payload: it is never decoded.
func BenchmarkNoPayload(b *testing.B) {
	rs := &RuleSet{Rules: []Rule{
		{Name: "down", When: mustCond(b, "headers['gateway'] == 'down'"), Outcome: mustOutcome(b, "retry_after(backoff('1s', '5m'))")},
		{Name: "late", When: mustCond(b, "attempt > 3"), Outcome: mustOutcome(b, "drop")},
	}}
	d := delivery(`{"id":7,"amount":120,"currency":"EUR"}`, map[string]string{"gateway": "down"})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if res := rs.Handle(ctx, d); res.Outcome.Kind != engine.KindRetryAfter {
			b.Fatalf("got %+v", res)
		}
	}
}

// burstSource pushes bursts of n deliveries at once, each after the last was settled, noting
// when it pushed each: a backlog that reaches a consumer in one read.
type burstSource struct {
	n, bursts int
	settled   chan int
	pushed    []time.Time
}

func (s *burstSource) Receive(ctx context.Context, feed engine.Feed) error {
	for b := range s.bursts {
		ds := make([]*engine.Delivery, s.n)
		for i := range ds {
			ds[i] = &engine.Delivery{Message: engine.Message{Key: "in", ID: strconv.Itoa(i),
				Headers: map[string]string{"sent": "1"}, Payload: []byte(`{"id":1}`)}}
		}
		if feed.Room(ctx) < s.n {
			return ctx.Err()
		}
		s.pushed[b] = time.Now()
		if !feed.Push(ctx, ds) {
			return ctx.Err()
		}
		for got := 0; got < s.n; got += <-s.settled {
		}
	}
	return nil
}

func (s *burstSource) Settle(_ context.Context, batch []engine.Settlement) error {
	s.settled <- len(batch)
	return nil
}
func (s *burstSource) Requeue(context.Context, []*engine.Message) error { return nil }
func (s *burstSource) Capabilities() engine.Capabilities {
	return engine.Capabilities{Ack: true, Batch: 1000}
}
func (s *burstSource) Close() error { return nil }

// stampSink keeps the handled header of each record emitted, in the order they come.
type stampSink struct {
	mu      sync.Mutex
	handled []int64
}

func (k *stampSink) Publish(_ context.Context, ms ...*engine.Message) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, m := range ms {
		v, _ := strconv.ParseInt(m.Headers["handled"], 10, 64)
		k.handled = append(k.handled, v)
	}
	return nil
}

// BenchmarkBurst pushes bursts of 100 deliveries at once through the engine (two workers, the
// settler) with the latency workload's rule (`go run ./e2e/bench -workload latency`): a
// record emit stamped now().UnixMicro(). us-to-last/burst is the time from the push to the
// last delivery's rule, what the last entry of a producer's backlog waits beyond the first.
func BenchmarkBurst(b *testing.B) {
	rs := &RuleSet{Rules: []Rule{{Name: "stamp", Outcome: mustOutcome(b, "ack"), Emits: []EmitSpec{{
		Target: engine.Target{Kind: "record"}, Key: "latency", HeaderOrder: []string{"handled", "sent"},
		Headers: map[string]*Value{"handled": mustValue(b, "now().UnixMicro()"), "sent": mustValue(b, "headers['sent']")},
	}}}}}
	const n = 100
	src := &burstSource{n: n, bursts: b.N, settled: make(chan int, n), pushed: make([]time.Time, b.N)}
	sink := &stampSink{}
	p := &engine.Pipeline{Name: "burst", Source: src, Handler: rs, Concurrency: 2, Logger: zerolog.Nop()}
	b.ResetTimer()
	err := engine.New(engine.Options{Sinks: func(engine.Target) (engine.Sink, error) { return sink, nil }}, p).Run(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	if len(sink.handled) != n*b.N {
		b.Fatalf("%d records, want %d", len(sink.handled), n*b.N)
	}
	var total int64
	for i, at := range src.pushed {
		// A burst's records are all published before the next burst is pushed.
		total += slices.Max(sink.handled[i*n:(i+1)*n]) - at.UnixMicro()
	}
	b.ReportMetric(float64(total)/float64(b.N), "us-to-last/burst")
}
