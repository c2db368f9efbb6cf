package telemetry

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/flowrun/flowrun/engine"
)

// Workflow run attributes (SPEC §16): on the run span, and on each step visit's consumer span.
const (
	attrWorkflow  = "flowrun.workflow"
	attrRunID     = "flowrun.run_id"
	attrStep      = "flowrun.step"
	attrVisit     = "flowrun.visit"
	attrRunStatus = "flowrun.status"
)

// A run span is never open in a process: a run lasts as long as it takes, across processes and
// restarts. Its ids are picked when the run is created and kept in the run record, and the
// process that ends the run makes the span then, with the run's start time, through the SDK as
// any span (sampler, processor, resource), its ids forced by idGenerator.

// forcedIDs, in a context, are the ids idGenerator gives the span started in it.
type forcedIDs struct {
	tid trace.TraceID
	sid trace.SpanID
}

type forcedKey struct{}

// idGenerator is the SDK's random one, except for a span started in a context with forcedIDs.
type idGenerator struct{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if f, ok := ctx.Value(forcedKey{}).(forcedIDs); ok {
		return f.tid, f.sid
	}
	return randomTraceID(), randomSpanID()
}

func (idGenerator) NewSpanID(ctx context.Context, tid trace.TraceID) trace.SpanID {
	if f, ok := ctx.Value(forcedKey{}).(forcedIDs); ok && f.tid == tid {
		return f.sid
	}
	return randomSpanID()
}

func randomTraceID() trace.TraceID {
	var t trace.TraceID
	for !t.IsValid() {
		binary.NativeEndian.PutUint64(t[:8], rand.Uint64())
		binary.NativeEndian.PutUint64(t[8:], rand.Uint64())
	}
	return t
}

func randomSpanID() trace.SpanID {
	var s trace.SpanID
	for !s.IsValid() {
		binary.NativeEndian.PutUint64(s[:], rand.Uint64())
	}
	return s
}

// runIDs are a run span's ids, picked before the span is made.
type runIDs struct {
	sc     trace.SpanContext // the run span's
	parent trace.SpanID      // its parent's; invalid for a root
	begun  time.Time         // when they were picked (a start delivery's begin)
	// start is the start delivery's span, when recorded: in flight as the run's visits are
	// (its key and end under inflight's lock: the handler and the settler both touch them).
	start    *span
	startKey string
	ended    bool
}

type runIDsKey struct{}

// pickRun picks the ids of a run span whose parent is the span in ctx (a remote one: the start
// message's traceparent), a root without one, sampled as the provider's sampler decides.
func (p *Provider) pickRun(ctx context.Context, workflow string) *runIDs {
	parent := trace.SpanContextFromContext(ctx)
	tid := parent.TraceID()
	if !parent.IsValid() {
		tid = randomTraceID()
	}
	res := p.sampler.ShouldSample(sdktrace.SamplingParameters{
		ParentContext: ctx, TraceID: tid, Name: "run " + workflow, Kind: trace.SpanKindInternal,
	})
	var flags trace.TraceFlags
	if res.Decision == sdktrace.RecordAndSample {
		flags = trace.FlagsSampled
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: randomSpanID(), TraceFlags: flags, TraceState: res.Tracestate, Remote: true,
	})
	r := &runIDs{sc: sc, begun: time.Now()}
	if parent.IsValid() {
		r.parent = parent.SpanID()
	}
	return r
}

// String is the run's trace context as the run record keeps it (engine.RunTraceparent).
func (r *runIDs) String() string {
	parent := "-"
	if r.parent.IsValid() {
		parent = r.parent.String()
	}
	return "00-" + r.sc.TraceID().String() + "-" + r.sc.SpanID().String() + "-" + r.sc.TraceFlags().String() + " " + parent
}

// parseRun reads a run record's trace context; false for one this version did not write (a
// bare traceparent names no run span of its own).
func (p *Provider) parseRun(s string) (*runIDs, bool) {
	tp, rest, ok := strings.Cut(s, " ")
	if !ok {
		return nil, false
	}
	parent, start, _ := strings.Cut(rest, " ")
	ctx := p.prop.Extract(context.Background(), propagation.MapCarrier{engine.HeaderTraceparent: tp})
	r := &runIDs{sc: trace.SpanContextFromContext(ctx)}
	if !r.sc.IsValid() {
		return nil, false
	}
	if parent != "-" {
		sid, err := trace.SpanIDFromHex(parent)
		if err != nil {
			return nil, false
		}
		r.parent = sid
	}
	if start != "" { // a retried run's span begins at the retry (engine.RunRetrace)
		ms, err := strconv.ParseInt(start, 10, 64)
		if err != nil {
			return nil, false
		}
		r.begun = time.UnixMilli(ms)
	}
	return r, true
}

// start makes the span of r's ids, begun at begin; nil when r is not sampled.
func (p *Provider) start(r *runIDs, name string, begin time.Time, attrs ...attribute.KeyValue) trace.Span {
	if !r.sc.IsSampled() {
		return nil
	}
	ctx := context.WithValue(context.Background(), forcedKey{}, forcedIDs{tid: r.sc.TraceID(), sid: r.sc.SpanID()})
	if r.parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: r.sc.TraceID(), SpanID: r.parent, TraceFlags: r.sc.TraceFlags(), TraceState: r.sc.TraceState(), Remote: true,
		}))
	}
	_, sp := p.tracer.Start(ctx, name, trace.WithTimestamp(begin), trace.WithAttributes(attrs...))
	return sp
}

// Runs is the engine.RunTracer of the process's workflows.
func (p *Provider) Runs() engine.RunTracer { return runTracer{p} }

type runTracer struct{ p *Provider }

// RunTrace implements engine.RunTracer: the ids the start pipeline picked for the run
// (RunStart), else a new run span's, the child of the span in ctx if there is one.
func (t runTracer) RunTrace(ctx context.Context, workflow, run string) string {
	if r, ok := ctx.Value(runIDsKey{}).(*runIDs); ok {
		if r.start != nil {
			t.p.visits.startOf(r, runKey(workflow, run))
		}
		return r.String()
	}
	return t.p.pickRun(ctx, "").String()
}

// EndRun implements engine.RunTracer: the run span, from the run's start to its end; a failed
// run's error is recorded on it.
func (t runTracer) EndRun(s string, e engine.RunEnd) {
	r, ok := t.p.parseRun(s)
	if !ok || !r.sc.IsSampled() {
		return
	}
	if !t.p.visits.hold(runKey(e.Workflow, e.Run), &runDone{p: t.p, ids: r, e: e}) {
		t.p.endRun(r, e)
	}
}

// endRun makes and ends the run span of r's ids.
func (p *Provider) endRun(r *runIDs, e engine.RunEnd) {
	begin := e.Started
	if !r.begun.IsZero() {
		begin = r.begun
	}
	if begin.IsZero() || begin.After(e.At) {
		begin = e.At
	}
	sp := p.start(r, "run "+e.Workflow, begin,
		attribute.String(attrWorkflow, e.Workflow),
		attribute.String(attrRunID, e.Run),
		attribute.String(attrRunStatus, e.Status),
	)
	if sp == nil {
		return
	}
	if e.Status == "failed" || e.Status == "compensation_failed" {
		msg := e.Error
		if msg == "" {
			msg = e.Status
		}
		sp.RecordError(errors.New(msg), trace.WithTimestamp(e.At))
		sp.SetStatus(codes.Error, msg)
	}
	sp.End(trace.WithTimestamp(e.At))
}

// RunStart returns the tracer of a workflow's start pipeline, made by Pipeline: before each
// start delivery's consumer span it picks the ids of the span of the run the delivery creates,
// continuing the delivery's traceparent, and makes the consumer span its child, so the run
// span is the root of the run's trace (or the child of the start message's traceparent) with
// the start delivery's spans under it. A delivery that creates no run (a duplicate, a retry)
// exports the span of those ids itself, named "start <workflow>", so no span names a parent
// that is never exported.
func (p *Provider) RunStart(t engine.Tracer, workflow string) engine.Tracer {
	pt, ok := t.(*pipelineTracer)
	if !ok {
		return t
	}
	return &pipelineTracer{p: pt.p, attrs: pt.attrs, workflow: workflow}
}

// startRun is Start's part for a start pipeline: the run's ids picked, ctx made their child.
func (t *pipelineTracer) startRun(ctx context.Context) (context.Context, *runIDs) {
	r := t.p.pickRun(ctx, t.workflow)
	ctx = context.WithValue(ctx, runIDsKey{}, r)
	return trace.ContextWithRemoteSpanContext(ctx, r.sc), r
}

// noRun exports the span of r's ids for a start delivery that created no run.
func (t *pipelineTracer) noRun(r *runIDs, outcome string) {
	if sp := t.p.start(r, "start "+t.workflow, r.begun,
		attribute.String(attrWorkflow, t.workflow), attribute.String(attrOutcome, outcome)); sp != nil {
		sp.End()
	}
}

// A run ends in the settlement of its last visit, before that visit's consumer span ends (and
// maybe before the previous visit's, whose settlement wrote the message of the last one); the
// run span must end after them. So the span of a run with visits in flight here is made when the
// last of them ends; a run with none (ended by a timeout, runs cancel) gets it at once.

// runDone is a run span waiting for the end of its run's visits in flight.
type runDone struct {
	p   *Provider
	ids *runIDs
	e   engine.RunEnd
}

func runKey(workflow, run string) string { return workflow + "\x00" + run }

// inflight counts the recorded step visits in flight per run.
type inflight struct {
	mu   sync.Mutex
	runs map[string]*inflightRun
}

type inflightRun struct {
	n    int
	done *runDone // the run ended meanwhile
}

// visitStarts marks s a step visit in flight, with the run's attributes on its span.
func (t *pipelineTracer) visitStarts(s *span, r *engine.Run) {
	s.sp.SetAttributes(attribute.String(attrWorkflow, r.Workflow), attribute.String(attrRunID, r.ID),
		attribute.String(attrStep, r.Step), attribute.Int(attrVisit, r.Visit))
	s.visit = runKey(r.Workflow, r.ID)
	f := &t.p.visits
	f.mu.Lock()
	defer f.mu.Unlock()
	f.add(s.visit)
}

// add counts one more in flight for the run key; f.mu held.
func (f *inflight) add(key string) {
	if f.runs == nil {
		f.runs = map[string]*inflightRun{}
	}
	ir := f.runs[key]
	if ir == nil {
		ir = &inflightRun{}
		f.runs[key] = ir
	}
	ir.n++
}

// startOf counts r's start delivery in flight for the run key, unless its span has ended.
func (f *inflight) startOf(r *runIDs, key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !r.ended && r.startKey == "" {
		r.startKey = key
		f.add(key)
	}
}

// startEnds ends r's start delivery's part in flight.
func (f *inflight) startEnds(r *runIDs) {
	f.mu.Lock()
	r.ended = true
	key := r.startKey
	f.mu.Unlock()
	if key != "" {
		f.end(key)
	}
}

// end ends a visit of the run key; the last one in flight makes the run span if the run ended.
func (f *inflight) end(key string) {
	f.mu.Lock()
	ir := f.runs[key]
	var d *runDone
	if ir != nil {
		if ir.n--; ir.n <= 0 {
			delete(f.runs, key)
			d = ir.done
		}
	}
	f.mu.Unlock()
	if d != nil {
		d.e.At = time.Now()
		d.p.endRun(d.ids, d.e)
	}
}

// hold keeps d for the end of the run's last visit in flight; false when there is none.
func (f *inflight) hold(key string, d *runDone) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	ir := f.runs[key]
	if ir == nil {
		return false
	}
	ir.done = d
	return true
}
