package telemetry

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/flowrun/flowrun/engine"
)

// Attribute names: OpenTelemetry's messaging semantic conventions, and flowrun's own.
const (
	attrSystem      = "messaging.system"
	attrDestination = "messaging.destination.name"
	attrMessageID   = "messaging.message.id"
	attrOperation   = "messaging.operation.type"
	attrPipeline    = "flowrun.pipeline"
	attrAttempt     = "flowrun.attempt"
	attrOutcome     = "flowrun.outcome"
	attrAction      = "flowrun.action"
	attrEmitKind    = "flowrun.emit.kind"
)

// Pipeline returns the tracer of one pipeline whose source speaks system ("redis" for the
// Redis sources, "file" or "pipe" otherwise).
func (p *Provider) Pipeline(name, system string) engine.Tracer {
	return &pipelineTracer{p: p, attrs: []attribute.KeyValue{
		attribute.String(attrSystem, system),
		attribute.String(attrPipeline, name),
	}}
}

type pipelineTracer struct {
	p        *Provider
	attrs    []attribute.KeyValue // on every span of the pipeline
	last     atomic.Pointer[spanName]
	workflow string // a workflow's start pipeline (RunStart): each delivery's run span ids picked
}

// Start implements engine.Tracer: the consumer span continues the delivery's traceparent.
// Attributes are set only on a span that records: an unsampled delivery costs a span context and
// the traceparents it writes, little more.
func (t *pipelineTracer) Start(ctx context.Context, d *engine.Delivery) (context.Context, engine.Span) {
	if d.Headers[engine.HeaderTraceparent] != "" {
		ctx = t.p.prop.Extract(ctx, propagation.MapCarrier(d.Headers))
	}
	var run *runIDs
	if t.workflow != "" {
		ctx, run = t.startRun(ctx)
	}
	ctx, sp := t.p.tracer.Start(ctx, t.name(d.Key), trace.WithSpanKind(trace.SpanKindConsumer))
	if sp.IsRecording() {
		sp.SetAttributes(t.attrs...)
		sp.SetAttributes(
			attribute.String(attrDestination, d.Key),
			attribute.String(attrOperation, "process"),
			attribute.Int(attrAttempt, d.Attempt),
		)
		if d.ID != "" {
			sp.SetAttributes(attribute.String(attrMessageID, d.ID))
		}
	}
	s := &span{t: t, ctx: ctx, sp: sp, rec: sp.IsRecording(), run: run}
	if run != nil && s.rec {
		run.start = s
	}
	if d.Run != nil && s.rec {
		t.visitStarts(s, d.Run)
	}
	return ctx, s
}

// name is the consumer span's name for key, kept for the last key seen: a source reads one key
// (or a few), and the name is asked for per delivery.
func (t *pipelineTracer) name(key string) string {
	if n := t.last.Load(); n != nil && n.key == key {
		return n.name
	}
	n := &spanName{key: key, name: "process " + key}
	t.last.Store(n)
	return n.name
}

type spanName struct{ key, name string }

// span is one delivery's consumer span.
type span struct {
	t   *pipelineTracer
	ctx context.Context // carries sp: the parent of the children
	sp  trace.Span
	rec bool    // sampled: children are made; otherwise they would not be recorded either
	run *runIDs // a start delivery's: the ids of the span of the run it creates

	visit string // a step visit's: its run's key in Provider.visits (run.go)
}

// noEnd ends a child span that was not made.
func noEnd(error) {}

func (s *span) Handler(ctx context.Context) (context.Context, func(error)) {
	if !s.rec {
		return ctx, noEnd
	}
	ctx, sp := s.t.p.tracer.Start(ctx, "handler", trace.WithAttributes(s.t.attrs...))
	return ctx, func(err error) { end(sp, err) }
}

func (s *span) Emit(t engine.Target, m *engine.Message) func(error) {
	if !s.rec {
		s.inject(s.ctx, m) // the trace goes on downstream, unsampled as here
		return noEnd
	}
	attrs := make([]attribute.KeyValue, 0, len(s.t.attrs)+3)
	attrs = append(attrs, s.t.attrs...)
	attrs = append(attrs,
		attribute.String(attrDestination, m.Key),
		attribute.String(attrOperation, "send"),
		attribute.String(attrEmitKind, t.Kind),
	)
	ctx, sp := s.t.p.tracer.Start(s.ctx, "send "+m.Key,
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	s.inject(ctx, m)
	return func(err error) { end(sp, err) }
}

func (s *span) Settle(action engine.Action, writes ...*engine.Message) func(error) {
	if !s.rec {
		for _, m := range writes {
			s.inject(s.ctx, m)
		}
		return noEnd
	}
	attrs := make([]attribute.KeyValue, 0, len(s.t.attrs)+1)
	attrs = append(attrs, s.t.attrs...)
	attrs = append(attrs, attribute.String(attrAction, action.String()))
	kind := trace.SpanKindInternal
	if len(writes) > 0 {
		kind = trace.SpanKindProducer // it writes a copy or a dead letter
	}
	ctx, sp := s.t.p.tracer.Start(s.ctx, "settle "+action.String(),
		trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
	for _, m := range writes {
		s.inject(ctx, m)
	}
	return func(err error) { end(sp, err) }
}

func (s *span) End(outcome string, err error) {
	if s.rec {
		s.sp.SetAttributes(attribute.String(attrOutcome, outcome))
	}
	end(s.sp, err)
	if s.run != nil {
		switch outcome {
		case engine.OutcomeAck.String(), engine.OutcomeRetry.String(), engine.OutcomeRetryAfter.String():
			// Created, or maybe (a retry after a reply that was lost may find the run written
			// with these ids): its span is the run's, exported when the run ends.
		default:
			s.t.noRun(s.run, outcome) // no run was created: its span is this delivery's
		}
		s.t.p.visits.startEnds(s.run)
	}
	if s.visit != "" {
		s.t.p.visits.end(s.visit)
	}
}

// inject sets m's traceparent (and tracestate, when there is one) to the span in ctx.
func (s *span) inject(ctx context.Context, m *engine.Message) {
	if m.Headers == nil {
		m.Headers = map[string]string{}
	}
	delete(m.Headers, "tracestate") // the writer's own state, or none
	s.t.p.prop.Inject(ctx, propagation.MapCarrier(m.Headers))
}

func end(sp trace.Span, err error) {
	if err != nil {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
}
