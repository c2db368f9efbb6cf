package cli

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/transports/redisflow"
	"github.com/flowrun/flowrun/transports/redisrun"
	"github.com/flowrun/flowrun/workflow"
)

// liveWorkflow is one workflow as this process runs it (SPEC §16): its store in its Redis, its
// engine pipelines (the start pipeline "WF" and one "WF/STEP" per step) and its timers.
type liveWorkflow struct {
	cfg       *config.Workflow
	client    redis.UniversalClient // its redis block's, the wiring's
	store     *redisrun.Store
	pipelines []*engine.Pipeline

	stopTimers context.CancelFunc // nil until its timers run
	timersDone chan struct{}
}

// names are the engine pipelines of the workflow.
func (r *liveWorkflow) names() []string {
	out := make([]string, len(r.pipelines))
	for i, p := range r.pipelines {
		out[i] = p.Name
	}
	return out
}

// workflows are the workflows this process runs, by name: run builds them at start, a reload
// replaces the changed ones.
type workflows struct {
	w        *wiring
	metrics  *promMetrics
	consumer string // the step sources' consumer name: --consumer, else the host's name
	log      zerolog.Logger

	mu      sync.Mutex
	running map[string]*liveWorkflow
	timers  sync.WaitGroup
	eng     atomic.Pointer[engine.Engine] // set once the engine exists: what counts a wait's rejected events
}

func newWorkflows(w *wiring, m *promMetrics, consumer string, log zerolog.Logger) *workflows {
	if consumer == "" {
		// as a source's consumer defaults (config's parser)
		h, err := os.Hostname()
		if err != nil || h == "" {
			h = "flowrun"
		}
		consumer = h
	}
	return &workflows{w: w, metrics: m, consumer: consumer, log: log, running: map[string]*liveWorkflow{}}
}

// build builds the selected workflows and returns their engine pipelines; their timers start
// with startTimers.
func (ws *workflows) build(ctx context.Context, selected []*config.Workflow) ([]*engine.Pipeline, error) {
	var out []*engine.Pipeline
	for _, wf := range selected {
		r, err := ws.w.workflow(ctx, wf, ws.consumer, ws.metrics)
		if err != nil {
			return nil, err
		}
		r.store.OnRejected = ws.countRejected(wf.Name)
		ws.mu.Lock()
		ws.running[wf.Name] = r
		ws.mu.Unlock()
		out = append(out, r.pipelines...)
	}
	return out, nil
}

// list returns the workflows running now.
func (ws *workflows) list() []*liveWorkflow {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	out := make([]*liveWorkflow, 0, len(ws.running))
	for _, r := range ws.running {
		out = append(out, r)
	}
	return out
}

// startTimers runs the workflow's timers (due timeouts, due delayed step messages) until ctx
// ends or stopTimers stops them.
func (ws *workflows) startTimers(ctx context.Context, r *liveWorkflow) {
	ctx, cancel := context.WithCancel(ctx)
	r.stopTimers, r.timersDone = cancel, make(chan struct{})
	log := ws.log.With().Str("workflow", r.cfg.Name).Logger()
	ws.timers.Add(1)
	go func() {
		defer ws.timers.Done()
		defer close(r.timersDone)
		for ctx.Err() == nil {
			err := r.store.RunTimers(ctx, log)
			if err == nil || ctx.Err() != nil {
				return
			}
			// a timer must not stop for good on one failure: runs would never time out
			log.Error().Err(err).Msg("workflow timers failed; starting them again in a second")
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
}

// startAllTimers starts the timers of every workflow built.
func (ws *workflows) startAllTimers(ctx context.Context) {
	for _, r := range ws.list() {
		ws.startTimers(ctx, r)
	}
}

// wait waits for every timer loop to end (their context cancelled).
func (ws *workflows) wait() { ws.timers.Wait() }

// workflow builds one workflow's store and pipelines. On an error nothing it built is left
// open.
func (w *wiring) workflow(ctx context.Context, wf *config.Workflow, consumer string, m *promMetrics) (r *liveWorkflow, err error) {
	g, err := graphOf(wf)
	if err != nil {
		return nil, err
	}
	c, err := w.client(wf.Redis)
	if err != nil {
		return nil, fmt.Errorf("workflow %s: %w", wf.Name, err)
	}
	r = &liveWorkflow{cfg: wf, client: c, store: redisrun.NewStore(c, g)}
	r.store.DeadLetter = wf.DeadLetter
	if m != nil {
		r.store.OnDone = m.runDone(wf.Name)
	}
	defer func() {
		if err != nil {
			for _, p := range r.pipelines {
				p.Source.Close()
				w.release(p.Name)
			}
		}
	}()
	start, err := w.sourcePipeline(ctx, wf.Start, wf.Name, r.store.StartHandler(runIDFunc(wf.RunID), wf.Fingerprint()))
	if err != nil {
		return nil, fmt.Errorf("workflow %s: start: %w", wf.Name, err)
	}
	if w.tel != nil { // a run is one trace (SPEC §16), its span's ids picked as it starts
		start.Tracer = w.tel.RunStart(start.Tracer, wf.Name)
		r.store.Tracer = w.tel.Runs()
	}
	r.pipelines = append(r.pipelines, start)
	for _, s := range wf.Steps {
		if s.Wait != nil {
			ps, err := w.waitPipelines(ctx, wf, r.store, s, consumer)
			if err != nil {
				return nil, err
			}
			r.pipelines = append(r.pipelines, ps...)
			continue
		}
		p, err := w.stepPipeline(ctx, wf, g, r.store, s, consumer)
		if err != nil {
			return nil, err
		}
		r.pipelines = append(r.pipelines, p)
	}
	return r, nil
}

// stepPipeline builds the pipeline "WF/STEP": the step's stream read by the store, the step's
// rules or handler wrapped by workflow.NewStepHandler, and the step's pipeline attributes.
func (w *wiring) stepPipeline(ctx context.Context, wf *config.Workflow, g *workflow.Graph, store *redisrun.Store, s *config.Step, consumer string) (*engine.Pipeline, error) {
	name := stepPipelineName(wf.Name, s.Name)
	p := s.Pipeline
	log := w.log.With().Str(engine.FieldPipeline, name).Str(engine.FieldSource, "workflow").Logger()
	flow, err := buildFlow(p, func() (engine.FlowStore, error) {
		return redisflow.Reader{}.FlowStore(w.env(log, wf.Redis), name)
	})
	if err != nil {
		return nil, fmt.Errorf("workflow %s: %w", wf.Name, err)
	}
	inner, err := w.handler(ctx, p, name, wf.Redis, log)
	if err != nil {
		return nil, fmt.Errorf("workflow %s: %w", wf.Name, err)
	}
	h := stepHandler(g, s, inner)
	reads := s.RunReads()
	src := store.StepSource(s.Name, redisrun.StepOptions{Consumer: consumer, SkipInput: !reads.Input, SkipSteps: !reads.Steps, Pure: s.Pure()}, log)
	var tracer engine.Tracer
	if w.tel != nil {
		tracer = w.tel.Pipeline(name, "redis")
	}
	ep := assemble(p, name, src, h, flow, tracer, log)
	if ep.DeadLetter == "" {
		ep.DeadLetter = workflowDeadLetter(wf)
	}
	return ep, nil
}

// workflowDeadLetter is where a workflow's failed steps' messages go (SPEC §16).
func workflowDeadLetter(wf *config.Workflow) string {
	if wf.DeadLetter != "" {
		return wf.DeadLetter
	}
	return config.DefaultDeadLetter(wf.Name)
}

// selectWorkflows applies --pipeline to the workflows: a name that is a workflow's selects it
// (all its pipelines); without names every workflow runs.
func selectWorkflows(cfg *config.Config, names []string) []*config.Workflow {
	if len(names) == 0 {
		return cfg.Workflows
	}
	var out []*config.Workflow
	for _, wf := range cfg.Workflows {
		for _, n := range names {
			if n == wf.Name {
				out = append(out, wf)
				break
			}
		}
	}
	return out
}

// activeCounts reads each running workflow's active runs per step, every step listed (0 when
// none); a workflow whose Redis does not answer within ctx is left out. It reads the active
// hash the scripts keep and nothing else (store.Counts would scan every run kept): one HGETALL
// per workflow, cheap enough for every scrape.
func (ws *workflows) activeCounts(ctx context.Context) []activeCount {
	var out []activeCount
	for _, r := range ws.list() {
		h, err := r.client.HGetAll(ctx, redisrun.Prefix(r.cfg.Name)+"active").Result()
		if err != nil {
			continue
		}
		for _, s := range r.cfg.Steps {
			n, _ := strconv.ParseInt(h[s.Name], 10, 64)
			out = append(out, activeCount{workflow: r.cfg.Name, step: s.Name, n: n})
		}
	}
	return out
}

// workflowPlan is what a reload does with each workflow, by name.
type workflowPlan struct {
	added, changed, kept, removed []string
	stop                          []*liveWorkflow    // the removed and changed, to stop
	start                         []*config.Workflow // the added and changed, to start
	next                          []*config.Workflow // what runs after the reload
}

// plan compares the workflows to run with those running by their fingerprints.
func (ws *workflows) plan(next []*config.Workflow) workflowPlan {
	var pl workflowPlan
	old := map[string]*liveWorkflow{}
	for _, r := range ws.list() {
		old[r.cfg.Name] = r
	}
	for _, wf := range next {
		o := old[wf.Name]
		delete(old, wf.Name)
		switch {
		case o == nil && readsStdin(wf.Start):
			ws.log.Error().Str("workflow", wf.Name).Msg("cannot start a workflow that reads standard input on a reload: it starts at the next start of flowrun")
			continue
		case o == nil:
			pl.added = append(pl.added, wf.Name)
			pl.start = append(pl.start, wf)
		case o.cfg.Fingerprint() != wf.Fingerprint() && (readsStdin(o.cfg.Start) || readsStdin(wf.Start)):
			// its reader has read ahead of what it handed over: a new run would lose those lines
			ws.log.Warn().Str("workflow", wf.Name).Msg("workflow reads standard input and is not restarted by a reload: its change applies at the next start of flowrun")
			pl.kept = append(pl.kept, wf.Name)
			wf = o.cfg
		case o.cfg.Fingerprint() != wf.Fingerprint():
			pl.changed = append(pl.changed, wf.Name)
			pl.stop = append(pl.stop, o)
			pl.start = append(pl.start, wf)
		default:
			pl.kept = append(pl.kept, wf.Name)
			wf = o.cfg // it runs on as it was
		}
		pl.next = append(pl.next, wf)
	}
	for name, o := range old {
		pl.removed = append(pl.removed, name)
		pl.stop = append(pl.stop, o)
	}
	sort.Strings(pl.removed)
	return pl
}

// reloadCheckTimeout bounds the Redis reads of a reload's check of active runs.
const reloadCheckTimeout = 5 * time.Second

// refuse says why the reload must not happen (SPEC §16): it would remove a step where runs
// are active (a changed workflow without the step, or a workflow removed). nil: it may.
func (ws *workflows) refuse(ctx context.Context, pl workflowPlan) error {
	next := map[string]*config.Workflow{}
	for _, wf := range pl.next {
		next[wf.Name] = wf
	}
	ctx, cancel := context.WithTimeout(ctx, reloadCheckTimeout)
	defer cancel()
	for _, o := range pl.stop {
		var gone []string
		for _, s := range o.cfg.Steps {
			if n := next[o.cfg.Name]; n == nil || n.Step(s.Name) == nil {
				gone = append(gone, s.Name)
			}
		}
		if len(gone) == 0 {
			continue
		}
		h, err := o.client.HGetAll(ctx, redisrun.Prefix(o.cfg.Name)+"active").Result()
		if err != nil {
			return fmt.Errorf("workflow %s: cannot read its active runs to check the steps it loses: %w", o.cfg.Name, err)
		}
		for _, s := range gone {
			if n, _ := strconv.ParseInt(h[s], 10, 64); n > 0 {
				return fmt.Errorf("workflow %s: step %q is removed, but %d runs are active there; finish or cancel them (flowrun runs list %s --status running) before removing it", o.cfg.Name, s, n, o.cfg.Name)
			}
		}
	}
	return nil
}

// stop stops the workflows' timers and pipelines (each pipeline drains as on SIGTERM) and
// releases what they owned; it returns once all have stopped.
func (ws *workflows) stop(eng *engine.Engine, rs []*liveWorkflow) {
	var wg sync.WaitGroup
	for _, r := range rs {
		ws.mu.Lock()
		delete(ws.running, r.cfg.Name)
		ws.mu.Unlock()
		if r.stopTimers != nil {
			r.stopTimers()
			<-r.timersDone
		}
		for _, name := range r.names() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := eng.Stop(name); err != nil {
					ws.log.Error().Err(err).Str(engine.FieldPipeline, name).Msg("pipeline failed while stopping")
				}
				ws.w.release(name)
			}()
		}
	}
	wg.Wait()
}

// start builds and starts the workflows with their timers, and returns the names of those that
// failed to start (nothing of them is left running).
func (ws *workflows) start(ctx context.Context, eng *engine.Engine, wfs []*config.Workflow) []string {
	var failed []string
	for _, wf := range wfs {
		if err := ws.startOne(ctx, eng, wf); err != nil {
			ws.log.Error().Err(err).Str("workflow", wf.Name).Msg("cannot start workflow")
			failed = append(failed, wf.Name)
			continue
		}
		ws.log.Info().Str("workflow", wf.Name).Msg("workflow started")
	}
	return failed
}

func (ws *workflows) startOne(ctx context.Context, eng *engine.Engine, wf *config.Workflow) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r, err := ws.w.workflow(ctx, wf, ws.consumer, ws.metrics)
	if err != nil {
		return err
	}
	r.store.OnRejected = ws.countRejected(wf.Name)
	for i, p := range r.pipelines {
		if err := eng.Start(p); err != nil {
			for _, q := range r.pipelines[i:] {
				q.Source.Close()
				ws.w.release(q.Name)
			}
			r.pipelines = r.pipelines[:i]
			ws.stop(eng, []*liveWorkflow{r})
			return err
		}
	}
	ws.mu.Lock()
	ws.running[wf.Name] = r
	ws.mu.Unlock()
	ws.startTimers(ctx, r)
	return nil
}
