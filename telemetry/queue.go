package telemetry

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// queueProcessor batches ended spans for the exporter through a bounded queue. It differs from
// the SDK's batch processor in one way that matters here: what it cannot queue or export it
// drops and counts (Provider.Dropped, flowrun_trace_spans_dropped_total), and a failing
// collector is logged once per state change.
type queueProcessor struct {
	exp  sdktrace.SpanExporter
	log  zerolog.Logger
	ch   chan sdktrace.ReadOnlySpan
	stop chan struct{}
	done chan struct{}
	once sync.Once

	dropped  atomic.Int64
	exported atomic.Int64
	closed   atomic.Bool
}

func newQueueProcessor(exp sdktrace.SpanExporter, log zerolog.Logger) *queueProcessor {
	q := &queueProcessor{
		exp:  exp,
		log:  log,
		ch:   make(chan sdktrace.ReadOnlySpan, queueSize),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	go q.run()
	return q
}

func (q *queueProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd queues a sampled span, or drops it when the queue is full: never a wait.
func (q *queueProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	if q.closed.Load() {
		q.dropped.Add(1)
		return
	}
	select {
	case q.ch <- s:
	default:
		q.dropped.Add(1)
	}
}

func (q *queueProcessor) run() {
	defer close(q.done)
	t := time.NewTicker(exportEvery)
	defer t.Stop()
	batch := make([]sdktrace.ReadOnlySpan, 0, exportBatch)
	failing := false
	flush := func() {
		if len(batch) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), exportTimeout)
		err := q.exp.ExportSpans(ctx, batch)
		cancel()
		switch {
		case err != nil:
			q.dropped.Add(int64(len(batch)))
			if !failing {
				failing = true
				q.log.Warn().Err(err).Int("spans", len(batch)).Msg("trace export failed; spans are dropped and counted until the collector answers")
			}
		default:
			q.exported.Add(int64(len(batch)))
			if failing {
				failing = false
				q.log.Info().Msg("trace export recovered")
			}
		}
		clear(batch)
		batch = batch[:0]
	}
	add := func(s sdktrace.ReadOnlySpan) {
		if batch = append(batch, s); len(batch) == exportBatch {
			flush()
		}
	}
	for {
		select {
		case s := <-q.ch:
			add(s)
		case <-t.C:
			flush()
		case <-q.stop:
			for {
				select {
				case s := <-q.ch:
					add(s)
				default:
					flush()
					return
				}
			}
		}
	}
}

// Shutdown exports what is queued, then closes the exporter; spans ended later are dropped.
func (q *queueProcessor) Shutdown(ctx context.Context) error {
	q.once.Do(func() {
		q.closed.Store(true)
		close(q.stop)
	})
	select {
	case <-q.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return q.exp.Shutdown(ctx)
}

// ForceFlush is a no-op beyond what Shutdown does: spans go out within exportEvery.
func (q *queueProcessor) ForceFlush(context.Context) error { return nil }
