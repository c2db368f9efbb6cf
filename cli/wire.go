package cli

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/handlers"
	"github.com/flowrun/flowrun/registry"
	"github.com/flowrun/flowrun/telemetry"
	"github.com/flowrun/flowrun/transports"
)

// wiring turns a validated configuration into running parts: sources, handlers, sinks and the
// Redis clients behind them. It owns what it creates and closes it last.
type wiring struct {
	cfg    *config.Config
	stdio  Stdio
	log    zerolog.Logger
	stdout *codec.LineWriter
	tel    *telemetry.Provider // nil: no tracing

	// mu guards the maps and closers only, never network I/O: a slow first connection to one
	// redis block must not stall the pipelines and emits that use another (clientSlot).
	mu      sync.Mutex
	clients map[string]*clientSlot // by redis block name
	closers []func() error
	owned   map[string][]func() error // a pipeline's own closers (its Go handler), by its name
	closed  bool
	// evictionSeen: the servers whose maxmemory-policy was looked at (checkEviction).
	evictionSeen map[string]bool
}

// clientSlot is one redis block's client, opened once by whoever asks first; others asking for
// the same block wait for that, and nobody else does.
type clientSlot struct {
	once  sync.Once
	c     redis.UniversalClient
	err   error
	close func() error // closes c once, whoever asks first (a reload or the end)
}

func newWiring(cfg *config.Config, stdio Stdio, log zerolog.Logger) *wiring {
	return &wiring{
		cfg: cfg, stdio: stdio, log: log, stdout: codec.NewLineWriter(stdio.Out),
		clients: map[string]*clientSlot{}, owned: map[string][]func() error{},
	}
}

// config is the configuration pipelines are built from now (a reload replaces it).
func (w *wiring) config() *config.Config {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cfg
}

func (w *wiring) pipelines(ctx context.Context, selected []*config.Pipeline) ([]*engine.Pipeline, error) {
	out := make([]*engine.Pipeline, 0, len(selected))
	for _, p := range selected {
		ep, err := w.pipeline(ctx, p)
		if err != nil {
			return nil, err
		}
		out = append(out, ep)
	}
	return out, nil
}

// pipeline builds one pipeline. What only it uses (its Go handler) is closed by release, after
// a reload stopped it, or at the end.
func (w *wiring) pipeline(ctx context.Context, p *config.Pipeline) (*engine.Pipeline, error) {
	return w.sourcePipeline(ctx, p, p.Name, nil)
}

// sourcePipeline builds the engine pipeline name reading p's source; h, when not nil, handles
// instead of p's rules or Go handler (a workflow's start pipeline).
func (w *wiring) sourcePipeline(ctx context.Context, p *config.Pipeline, name string, h engine.Handler) (*engine.Pipeline, error) {
	log := w.log.With().Str(engine.FieldPipeline, name).Str(engine.FieldSource, p.Source.Kind).Logger()
	flow, err := w.flow(p)
	if err != nil {
		return nil, err
	}
	src, err := w.source(ctx, p, name, log)
	if err != nil {
		return nil, err
	}
	if h == nil {
		if h, err = w.handler(ctx, p, name, p.Source.Redis, log); err != nil {
			src.Close()
			return nil, err
		}
	}
	var tracer engine.Tracer
	if w.tel != nil {
		system := p.Source.Kind // file, pipe
		if tc, ok := p.Source.Config.(transports.TraceCarrier); ok {
			system = tc.TraceSystem() // redis
		}
		tracer = w.tel.Pipeline(name, system)
	}
	return assemble(p, name, src, h, flow, tracer, log), nil
}

// handler is p's rules, or its Go handler started and owned by the pipeline name (its Redis emits going through redisBlock's
// client when they name none).
func (w *wiring) handler(ctx context.Context, p *config.Pipeline, name, redisBlock string, log zerolog.Logger) (engine.Handler, error) {
	if p.Handler != nil {
		return w.goHandler(ctx, p, name, redisBlock, log)
	}
	return p.Rules, nil
}

// assemble is the engine pipeline of p's attributes with its parts.
func assemble(p *config.Pipeline, name string, src engine.Source, h engine.Handler, flow *engine.Flow, tracer engine.Tracer, log zerolog.Logger) *engine.Pipeline {
	return &engine.Pipeline{
		Name:            name,
		Tracer:          tracer,
		Source:          src,
		Handler:         h,
		Concurrency:     p.Concurrency,
		MaxAttempts:     p.MaxAttempts,
		DeadLetter:      p.DeadLetter,
		ShutdownTimeout: p.ShutdownTimeout,
		MaxHeld:         p.MaxHeld,
		Flow:            flow,
		Logger:          log,
	}
}

// flow builds a pipeline's flow control (SPEC §13): its state lives in the source's Redis, so
// every process running the pipeline shares it, or in the process for file and pipe sources.
func (w *wiring) flow(p *config.Pipeline) (*engine.Flow, error) {
	var store func() (engine.FlowStore, error)
	if fp, ok := p.Source.Config.(transports.FlowStoreProvider); ok {
		store = func() (engine.FlowStore, error) { return fp.FlowStore(w.env(w.log, p.Source.Redis), p.Name) }
	}
	return buildFlow(p, store)
}

// buildFlow is p's flow control with its state in store's, or in the process when store is nil.
func buildFlow(p *config.Pipeline, store func() (engine.FlowStore, error)) (*engine.Flow, error) {
	f := p.Flow
	if f.Blocks() == 0 {
		return nil, nil
	}
	ef := &engine.Flow{Lease: f.Lease()}
	if c := f.Concurrency; c != nil {
		ef.Concurrency = &engine.ConcurrencyKey{Key: c.Key, Limit: c.Limit}
	}
	if t := f.Throttle; t != nil {
		ef.Throttle = &engine.Throttle{Limit: t.Limit, Period: t.Period}
		if t.Key != nil {
			ef.Throttle.Key = t.Key
		}
	}
	if d := f.Dedupe; d != nil {
		ef.Dedupe = &engine.Dedupe{Key: d.Key, Window: d.Window}
	}
	ef.Store = engine.NewMemFlowStore()
	if store != nil {
		s, err := store()
		if err != nil {
			return nil, fmt.Errorf("pipeline %s: flow control: %w", p.Name, err)
		}
		ef.Store = s
	}
	return ef, nil
}

// source provisions the pipeline's source Config (registry.Provisioner), builds the source from
// it, and has its Cleanup (registry.CleanerUpper) run when the pipeline name is released.
func (w *wiring) source(ctx context.Context, p *config.Pipeline, name string, log zerolog.Logger) (engine.Source, error) {
	cfg := p.Source.Config
	if err := registry.Provision(ctx, cfg); err != nil {
		return nil, fmt.Errorf("pipeline %s: provision: %w", p.Name, err)
	}
	src, err := cfg.Build(ctx, w.env(log, p.Source.Redis))
	if err != nil {
		if cerr := registry.Cleanup(cfg); cerr != nil {
			log.Warn().Err(cerr).Msg("cleanup")
		}
		return nil, fmt.Errorf("pipeline %s: %w", p.Name, err)
	}
	if _, ok := cfg.(registry.CleanerUpper); ok {
		w.own(name, func() error { return registry.Cleanup(cfg) })
	}
	return src, nil
}

// goHandler provisions and starts a pipeline's compiled Go handler. Its Redis emits that name
// no redis block go through redisName (the source's own block), else the only one (rules have theirs
// resolved at load time).
func (w *wiring) goHandler(ctx context.Context, p *config.Pipeline, name, redisName string, log zerolog.Logger) (engine.Handler, error) {
	hc := p.Handler
	if cfg := w.config(); redisName == "" && len(cfg.Redis) == 1 {
		redisName = cfg.Redis[0].Name
	}
	h, err := hc.Config.Provision(ctx, handlers.Env{Pipeline: p.Name, Logger: log.With().Str("handler", hc.Name).Logger(), Redis: redisName})
	if err != nil {
		return nil, fmt.Errorf("pipeline %s: handler %s: %w", p.Name, hc.Name, err)
	}
	w.own(name, h.Close)
	if err := h.Start(ctx); err != nil {
		w.release(name)
		return nil, fmt.Errorf("pipeline %s: handler %s: start: %w", p.Name, hc.Name, err)
	}
	return h, nil
}

// own registers f to run when the pipeline is released, or at close.
func (w *wiring) own(pipeline string, f func() error) {
	w.mu.Lock()
	if !w.closed {
		w.owned[pipeline] = append(w.owned[pipeline], f)
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	if err := f(); err != nil {
		w.log.Warn().Err(err).Msg("closing")
	}
}

// release closes what the pipeline owned, once it has stopped.
func (w *wiring) release(pipeline string) {
	w.mu.Lock()
	fs := w.owned[pipeline]
	delete(w.owned, pipeline)
	w.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		if err := fs[i](); err != nil {
			w.log.Warn().Err(err).Str(engine.FieldPipeline, pipeline).Msg("closing")
		}
	}
}

// env is what a source's kind or an emit kind gets to build with: the standard streams (stdout
// shared by every writer of records), the Redis clients of this wiring, and its closers.
func (w *wiring) env(log zerolog.Logger, redisBlock string) *transports.Env {
	return &transports.Env{
		Logger:     log,
		Stdin:      w.stdio.In,
		Stdout:     w.stdout,
		RedisBlock: redisBlock,
		Redis:      w.client,
		OnClose:    w.onClose,
	}
}

// sink resolves an emit target (engine.SinkResolver) through its emit kind; the engine caches
// the result.
func (w *wiring) sink(t engine.Target) (engine.Sink, error) {
	ek, ok := transports.LookupEmit(t.Kind)
	if !ok {
		return nil, fmt.Errorf("unknown emit kind %q", t.Kind)
	}
	return ek.Sink(t, w.env(w.log, ""))
}

// onClose registers f to run at close. After close (a client whose slow first connection
// finished during shutdown) f runs at once.
func (w *wiring) onClose(f func() error) {
	w.mu.Lock()
	if !w.closed {
		w.closers = append(w.closers, f)
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	if err := f(); err != nil {
		w.log.Warn().Err(err).Msg("closing")
	}
}

// close releases everything in reverse order of creation: Redis clients last.
func (w *wiring) close() {
	w.mu.Lock()
	var closers []func() error
	for _, fs := range w.owned {
		closers = append(closers, fs...)
	}
	closers = append(w.closers, closers...) // pipelines' own first
	w.closers, w.owned, w.closed = nil, nil, true
	w.mu.Unlock()
	for i := len(closers) - 1; i >= 0; i-- {
		if err := closers[i](); err != nil {
			w.log.Warn().Err(err).Msg("closing")
		}
	}
}
