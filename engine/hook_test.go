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
