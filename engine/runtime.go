package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/internal/faultlog"
)

// Pipeline is one source and one handler with the settlement settings of SPEC §2 and §5.
type Pipeline struct {
	Name            string
	Source          Source
	Handler         Handler
	Concurrency     int           // handlers running at once; default runtime.NumCPU()
	MaxAttempts     int           // 0: no cap
	DeadLetter      string        // "": none
	ShutdownTimeout time.Duration // grace for in-flight handlers after a stop; default 30s
	MaxHeld         int           // runtime delayed copies held at once; 0: 10000
	Flow            *Flow         // per-key flow control (SPEC §13); nil: none
	Tracer          Tracer        // nil: no spans (SPEC §14)
	Logger          zerolog.Logger
}

// Options are shared by every pipeline of an Engine.
type Options struct {
	Sinks   SinkResolver // where emits go; nil: emitting is an error
	Metrics Metrics      // nil: not counted
	// Progress is how often a pipeline that handles anything logs a progress line at info
	// (SPEC §10); 0: never. A finite source ends with a summary line either way.
	Progress time.Duration
	// DeadLettered, when set, is called by a pipeline's settler right after Redis took one or
	// more of its dead letters (once per settle call, with the pipeline's name), so a reader of
	// the dead-letter length (the status page) can look again at once. It must not block.
	DeadLettered func(pipeline string)
}

// Engine runs pipelines: a set given to New, changed while it runs by Start and Stop (a reload,
// SPEC §10).
type Engine struct {
	opts    Options
	initial []*Pipeline // started by Run

	// mu guards the registry of pipelines and Run's state; never held across I/O.
	mu sync.Mutex
	// pipes is every pipeline started, in start order: running, stopping, or ended on its own
	// (failed, or its input done), which Status shows until Stop or a Start of its name.
	pipes []*running
	// retired holds, by name, the outcome totals of the pipelines of that name that have
	// drained: the metrics count over the process's life, across reloads.
	retired map[string]*Outcomes
	ran     bool               // Run was called: it runs once
	ctx     context.Context    // Run's; nil outside Run
	fail    context.CancelFunc // stops every pipeline: one failed
	errs    []error
	ended   bool          // the last pipeline to end ended on its own, not by Stop
	changed chan struct{} // a pipeline ended; Run looks again
	started chan struct{} // closed once Run has started the initial set

	sinkMu sync.Mutex
	sinks  map[Target]*sinkEntry
}

// running is one pipeline of the registry; its fields are guarded by Engine.mu.
type running struct {
	p       *Pipeline
	r       *runner // set by register once the pipeline runs; nil before
	stop    context.CancelFunc
	done    chan struct{} // closed once it has drained
	err     error         // set before done is closed
	stopped bool          // Stop asked
	drained bool          // its runPipeline returned
}

// sinkEntry is one target's sink, created once. Its own lock is held while it is created (which
// may dial), so a slow first emit to one target never stalls emits to the others.
type sinkEntry struct {
	mu   sync.Mutex
	sink Sink
}

// New prepares an engine; nothing runs before Run.
func New(opts Options, pipelines ...*Pipeline) *Engine {
	if opts.Metrics == nil {
		opts.Metrics = noMetrics{}
	}
	for _, p := range pipelines {
		withDefaults(p)
	}
	return &Engine{
		opts: opts, initial: pipelines, retired: map[string]*Outcomes{}, ended: true,
		changed: make(chan struct{}, 1), started: make(chan struct{}), sinks: map[Target]*sinkEntry{},
	}
}

func withDefaults(p *Pipeline) {
	if p.Concurrency <= 0 {
		p.Concurrency = DefaultConcurrency()
	}
	if p.ShutdownTimeout <= 0 {
		p.ShutdownTimeout = DefaultShutdownTimeout
	}
}

// Ready reports whether Run has started and every running source that can tell is connected.
func (e *Engine) Ready() bool {
	select {
	case <-e.started:
	default:
		return false
	}
	for _, p := range e.Pipelines() {
		if !sourceReady(p.Source) {
			return false
		}
	}
	return true
}

// Pipelines returns the pipelines running now (stopping ones included), in start order.
func (e *Engine) Pipelines() []*Pipeline {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*Pipeline, 0, len(e.pipes))
	for _, x := range e.pipes {
		if !x.drained {
			out = append(out, x.p)
		}
	}
	return out
}

// Run runs every pipeline until ctx is cancelled (a stop signal) or every finite source is done,
// then drains: in-flight handlers finish within shutdown_timeout, settlements go out, held
// delayed copies are written. A pipeline that fails stops the others; Run returns its error.
// While Run runs, Start and Stop change the set; a set emptied by Stop keeps Run waiting.
func (e *Engine) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	e.mu.Lock()
	if e.ran {
		e.mu.Unlock()
		return errors.New("engine: Run called twice")
	}
	e.ran = true
	e.ctx, e.fail = ctx, cancel
	for _, p := range e.initial {
		if err := e.startLocked(p); err != nil {
			e.errs = append(e.errs, err)
			cancel()
		}
	}
	e.initial = nil
	e.mu.Unlock()
	close(e.started)

	stopped := ctx.Done()
	for {
		e.mu.Lock()
		if e.live("") == nil && (ctx.Err() != nil || e.ended) {
			e.ctx = nil // in the same step: no Start comes in after the last end
			err := errors.Join(e.errs...)
			e.mu.Unlock()
			return err
		}
		e.mu.Unlock()
		select {
		case <-e.changed:
		case <-stopped:
			stopped = nil // now only the pipelines' ends matter
		}
	}
}

// Started is closed once Run has started the pipelines given to New: from then on Start and
// Stop change the set.
func (e *Engine) Started() <-chan struct{} { return e.started }

// Start starts a pipeline while Run runs. Its name must not be running (a changed pipeline is
// stopped first).
func (e *Engine) Start(p *Pipeline) error {
	withDefaults(p)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ctx == nil || e.ctx.Err() != nil {
		return fmt.Errorf("pipeline %s: engine is not running", p.Name)
	}
	return e.startLocked(p)
}

func (e *Engine) startLocked(p *Pipeline) error {
	if e.live(p.Name) != nil {
		return fmt.Errorf("pipeline %s: already running", p.Name)
	}
	e.forget(func(x *running) bool { return x.p.Name == p.Name }) // one that ended on its own
	stop, cancel := context.WithCancel(e.ctx)
	x := &running{p: p, stop: cancel, done: make(chan struct{})}
	e.pipes = append(e.pipes, x)
	e.ended = false
	go func() {
		err := e.runPipeline(stop, p)
		cancel()
		e.end(x, err)
	}()
	return nil
}

// Stop stops one pipeline as a stop signal would (in-flight handlers finish within its
// shutdown_timeout, settlements go out, held copies are written) and returns once it has
// drained, with its error if it failed. The others run on. A name not running is no error.
func (e *Engine) Stop(name string) error {
	e.mu.Lock()
	x := e.live(name)
	if x == nil {
		e.mu.Unlock()
		return nil
	}
	x.stopped = true
	e.ended = false // an emptied set waits for a Start
	e.mu.Unlock()
	x.stop()
	<-x.done
	return x.err
}

// DropSinks forgets the cached sinks drop returns true for (their Redis block changed in a
// reload), so the next emit to such a target resolves a new one.
func (e *Engine) DropSinks(drop func(Target) bool) {
	e.sinkMu.Lock()
	defer e.sinkMu.Unlock()
	for t := range e.sinks {
		if drop(t) {
			delete(e.sinks, t)
		}
	}
}

func (e *Engine) sink(t Target) (Sink, error) {
	if e.opts.Sinks == nil {
		return nil, fmt.Errorf("engine: no sink for %s emits", t.Kind)
	}
	e.sinkMu.Lock()
	en, ok := e.sinks[t]
	if !ok {
		en = &sinkEntry{}
		e.sinks[t] = en
	}
	e.sinkMu.Unlock()

	en.mu.Lock()
	defer en.mu.Unlock()
	if en.sink != nil {
		return en.sink, nil
	}
	s, err := e.opts.Sinks(t)
	if err != nil {
		return nil, err // not kept: the next emit tries again
	}
	en.sink = s
	return s, nil
}

// runner is one running pipeline.
type runner struct {
	e       *Engine
	p       *Pipeline
	policy  Policy
	log     zerolog.Logger
	metrics PipelineMetrics
	tally   tally
	rates   rateRing
	gate    *holdGate
	stopped atomic.Bool
	// permanent decides which permanent faults (settlement, flow-control store) are logged at
	// error: the first of each command, key and reason, the rest at debug (SPEC §10).
	permanent *faultlog.Log[faultKey]
	// grouped decides which GroupedError deliveries are logged at warn (grouped.go).
	grouped *faultlog.Log[string]
}

func (e *Engine) runPipeline(stop context.Context, p *Pipeline) error {
	caps := p.Source.Capabilities()
	r := &runner{
		e:       e,
		p:       p,
		policy:  Policy{MaxAttempts: p.MaxAttempts, DeadLetter: p.DeadLetter, Caps: caps},
		log:     p.Logger,
		metrics: e.opts.Metrics.Pipeline(p.Name),
		// Interval 0: once for the life of the run.
		permanent: faultlog.New[faultKey](0),
		grouped:   faultlog.New[string](refusedInterval(e.opts.Progress)),
	}

	r.tally.start = time.Now()
	r.rates.add(r.tally.start, &r.tally)
	r.gate = newHoldGate(p.MaxHeld)
	e.register(r)
	defer r.stopped.Store(true)
	progressCtx, endProgress := context.WithCancel(context.Background())
	defer endProgress()
	go r.progress(progressCtx, e.opts.Progress)
	go r.snapshots(progressCtx.Done())

	if h, ok := p.Source.(interface{ SetErrorHook(func()) }); ok {
		h.SetErrorHook(r.metrics.SourceError)
	}

	grace, endGrace := graceAfter(stop, p.ShutdownTimeout)
	defer endGrace()

	q := NewQueue(caps.Batch)
	// Decided deliveries queue for the settler while it is busy with a round trip, so the next
	// settle takes them all in one batch: one XACK for many ids, not one per message.
	settleMax := settleBatch(caps.Batch)
	decisions := newHandoff(settleMax)
	returner, _ := p.Source.(Returner)
	w := &workers{r: r, q: q, in: plainIntake{decisions}, gate: r.gate, returner: returner, stop: stop, grace: grace}
	if p.Flow != nil {
		// Flow control admits deliveries in the queue, and releases their leases (flow.go).
		w.in = newFlowGate(r, p.Flow, q, returner, decisions, stop, grace)
	}
	if in, ok := p.Handler.(Inliner); ok && in.Inline() {
		q.SetInline(p.Concurrency, w.inline)
	}

	received := make(chan error, 1)
	go func() {
		err := p.Source.Receive(stop, q)
		q.Close()
		received <- err
	}()

	s := newSettler(r, stop, grace, r.gate, settleMax)
	settled := make(chan struct{})
	go func() {
		s.run(decisions)
		close(settled)
	}()

	w.run(p.Concurrency)
	decisions.close()
	<-settled

	err := <-received
	if cerr := p.Source.Close(); cerr != nil {
		r.log.Error().Err(cerr).Msg("closing source")
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("pipeline %s: %w", p.Name, err)
	}
	if err == nil && stop.Err() == nil {
		r.summary() // the input is done
	}
	r.log.Info().Msg("pipeline stopped")
	return nil
}

// graceAfter returns a context that ends shutdown_timeout after stop, never before: handlers
// and settlements use it.
func graceAfter(stop context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	grace, endGrace := context.WithCancel(context.WithoutCancel(stop))
	go func() {
		select {
		case <-stop.Done():
			t := time.NewTimer(timeout)
			defer t.Stop()
			select {
			case <-t.C:
				endGrace()
			case <-grace.Done():
			}
		case <-grace.Done():
		}
	}()
	return grace, endGrace
}

// handle runs the handler for one delivery and decides its settlement. With a tracer, the
// decision carries the delivery's consumer span for the settler to end.
func (r *runner) handle(ctx context.Context, d *Delivery) Decision {
	if d.Headers == nil {
		d.Headers = map[string]string{}
	}
	r.policy.Caps.Number(d)
	if r.p.Tracer == nil {
		return r.decide(ctx, d, nil)
	}
	ctx, span := r.p.Tracer.Start(ctx, d)
	dec := r.decide(ctx, d, span)
	dec.Span = span
	return dec
}

func (r *runner) decide(ctx context.Context, d *Delivery, span Span) Decision {
	// Two clock reads per delivery, both of the monotonic clock (time.Since the pipeline's
	// start), around the handler: time.Now reads the wall clock too, a third read (each a vDSO
	// call, a system call on some virtual machines; three were 5 % of a no-op takeover's CPU).
	// The wall clock is read only where the policy uses the time: a delivery past the cap, an
	// outcome other than ack or drop.
	if r.policy.pastCap(d) {
		dec, _ := r.policy.Before(d, time.Now())
		r.logDecision(d, &dec, nil)
		return dec
	}

	r.tally.inflight.Add(1)
	began := time.Since(r.tally.start)
	var res Result
	if span == nil {
		res = safeHandle(ctx, r.p.Handler, d)
	} else {
		hctx, end := span.Handler(ctx)
		res = safeHandle(hctx, r.p.Handler, d)
		end(res.Err)
	}
	took := time.Since(r.tally.start) - began
	d.Decoded = nil // not needed after the handler: freed before the settlement, not after
	r.metrics.HandlerDuration(took)
	r.tally.inflight.Add(-1)

	if res.Err != nil && (res.Outcome.Kind == KindAck || res.Outcome.Kind == KindDrop) {
		res.Outcome = Retry()
	}
	var now time.Time // Decide reads it for neither ack nor drop
	if k := res.Outcome.Kind; k != KindAck && k != KindDrop {
		now = time.Now()
	}
	dec := r.policy.Decide(d, res.Outcome, res.Err, now)
	if res.Duplicate && res.Err == nil {
		dec = Decision{Settlement: Settlement{Delivery: d, Action: ActAck}, Label: OutcomeDuplicate}
	}
	if res.Err == nil && len(res.Emits) > 0 {
		// The settler writes the emits, batched with other deliveries', before settling; it
		// logs and counts the decision once it knows they were written.
		dec.Emits = res.Emits
		return dec
	}
	dec.Cause = res.Err
	r.logDecision(d, &dec, res.Err)
	return dec
}

// logDecision counts a decision and logs it: at warn when the handler failed or the delivery was
// dead-lettered or rejected, else at debug.
func (r *runner) logDecision(d *Delivery, dec *Decision, err error) {
	r.logDecisionAt(d, dec, err, false)
}

// logDecisionAt is logDecision; refused says err is a write Redis refused, already logged once
// per interval (settler.refusedWrite): the delivery's own line is then at debug, unless it was
// dead-lettered.
func (r *runner) logDecisionAt(d *Delivery, dec *Decision, err error, refused bool) {
	r.tally.outcome(dec.Label)
	var ev *zerolog.Event
	grouped := false
	if !refused {
		ev, grouped = r.groupedEvent(err, dec)
	}
	switch {
	case grouped:
	case refused && err != nil && dec.Label != OutcomeDeadLetter:
		ev = r.log.Debug().Err(err)
	case err != nil:
		ev = r.log.Warn().Err(err)
		if pe := (*PanicError)(nil); errors.As(err, &pe) {
			ev = ev.Str("stack", pe.Stack)
		}
	case dec.Label == OutcomeDeadLetter || dec.Label == OutcomeRejected || dec.Note != "":
		ev = r.log.Warn()
	default:
		ev = r.log.Debug()
	}
	if !ev.Enabled() {
		return
	}
	ev = ev.Str(FieldKey, d.Key).Int(FieldAttempt, d.Attempt).Str(FieldOutcome, dec.Label.String())
	if d.ID != "" {
		ev = ev.Str(FieldID, d.ID)
	}
	if dec.Note != "" {
		ev = ev.Str("note", dec.Note)
	}
	if !dec.HoldDue.IsZero() {
		ev = ev.Time("due", dec.HoldDue)
	}
	switch {
	case err != nil:
		ev.Msg("handler failed")
	case dec.Label == OutcomeDeadLetter:
		ev.Msg("dead-lettered")
	case dec.Label == OutcomeRejected:
		ev.Msg("rejected")
	default:
		ev.Msg("settled")
	}
}

// PanicError is a handler panic turned into an error; the stack is logged once.
type PanicError struct {
	Value any
	Stack string
}

func (p *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", p.Value) }

func safeHandle(ctx context.Context, h Handler, d *Delivery) (res Result) {
	defer func() {
		if v := recover(); v != nil {
			res = Result{Outcome: Retry(), Err: &PanicError{Value: v, Stack: string(debug.Stack())}}
		}
	}()
	return h.Handle(ctx, d)
}
