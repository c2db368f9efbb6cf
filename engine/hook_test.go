package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

type hookedSource struct {
	fakeSource
	ErrorHook
}

func (h *hookedSource) Receive(ctx context.Context, feed Feed) error {
	h.ReportError() // a malformed record, say
	h.ReportError()
	return h.fakeSource.Receive(ctx, feed)
}

type countingMetrics struct {
	noMetrics
	errors atomic.Int32
}

func (c *countingMetrics) Pipeline(string) PipelineMetrics { return c }
func (c *countingMetrics) SourceError()                    { c.errors.Add(1) }

func TestSourceErrorsAreCounted(t *testing.T) {
	src := &hookedSource{fakeSource: fakeSource{caps: Capabilities{}}}
	m := &countingMetrics{}
	p := &Pipeline{Name: "p", Source: src, Handler: HandlerFunc(func(context.Context, *Delivery) Result { return Result{} }), ShutdownTimeout: time.Second}
	if err := New(Options{Metrics: m}, p).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := m.errors.Load(); got != 2 {
		t.Fatalf("source errors counted %d, want 2", got)
	}
}

// DeadLettered is called after the settle call that wrote dead letters, with the pipeline's
// name, and never for a settle that failed or wrote none.
func TestDeadLetteredHookAfterTheWrite(t *testing.T) {
	ds := deliveries(4)
	src := &fakeSource{caps: Capabilities{Ack: true}, deliveries: ds, failSettle: 1}
	p := pipeline(src, func(_ context.Context, d *Delivery) Result {
		if d.ID == "2" || d.ID == "4" {
			return Result{Outcome: DeadLetter("bad")}
		}
		return Result{Outcome: Ack()}
	})
	p.MaxAttempts, p.DeadLetter = 3, "dlq"
	var calls atomic.Int32
	hook := func(name string) {
		if name != "p" {
			t.Errorf("hook called for %q", name)
		}
		settled, _, _ := src.snapshot()
		dead := 0
		for _, s := range settled {
			if s.Action == ActDeadLetter {
				dead++
			}
		}
		if dead == 0 {
			t.Errorf("hook called before a dead letter was written")
		}
		calls.Add(1)
	}
	if err := run(t, context.Background(), Options{DeadLettered: hook}, p); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n < 1 || n > 2 {
		t.Fatalf("hook called %d times for 2 dead letters, want 1 or 2", n)
	}
}
