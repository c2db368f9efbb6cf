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
	"github.com/flowrun/flowrun/transports/file"
	"github.com/flowrun/flowrun/transports/pipe"
)

// wiring turns a validated configuration into running parts: sources, handlers, sinks and the
// Redis clients behind them. It owns what it creates and closes it last.
type wiring struct {
	cfg    *config.Config
	stdio  Stdio
	log    zerolog.Logger
	stdout *codec.LineWriter

	// mu guards the maps and closers only, never network I/O: a slow first connection to one
	// redis block must not stall the pipelines and emits that use another (clientSlot).
	mu      sync.Mutex
	clients map[string]*clientSlot // by redis block name
	closers []func() error
	closed  bool
}

// clientSlot is one redis block's client, opened once by whoever asks first; others asking for
// the same block wait for that, and nobody else does.
type clientSlot struct {
	once sync.Once
	c    redis.UniversalClient
	err  error
}

func newWiring(cfg *config.Config, stdio Stdio, log zerolog.Logger) *wiring {
	return &wiring{cfg: cfg, stdio: stdio, log: log, stdout: codec.NewLineWriter(stdio.Out), clients: map[string]*clientSlot{}}
}

func (w *wiring) pipelines(ctx context.Context, selected []*config.Pipeline) ([]*engine.Pipeline, error) {
	out := make([]*engine.Pipeline, 0, len(selected))
	for _, p := range selected {
		log := w.log.With().Str(engine.FieldPipeline, p.Name).Str(engine.FieldSource, p.Source.Kind).Logger()
		src, err := w.source(p, log)
		if err != nil {
			return nil, fmt.Errorf("pipeline %s: %w", p.Name, err)
		}
		var h engine.Handler = p.Rules
		if p.Handler != nil {
			if h, err = w.goHandler(ctx, p, log); err != nil {
				return nil, err
			}
		}
		out = append(out, &engine.Pipeline{
			Name:            p.Name,
			Source:          src,
			Handler:         h,
			Concurrency:     p.Concurrency,
			MaxAttempts:     p.MaxAttempts,
			DeadLetter:      p.DeadLetter,
			ShutdownTimeout: p.ShutdownTimeout,
			MaxHeld:         p.MaxHeld,
			Logger:          log,
		})
	}
	return out, nil
}

// goHandler provisions and starts a pipeline's compiled Go handler. Its Redis emits that name
// no redis block go through the source's own block, else the only one (rules have theirs
// resolved at load time).
func (w *wiring) goHandler(ctx context.Context, p *config.Pipeline, log zerolog.Logger) (engine.Handler, error) {
	hc := p.Handler
	redisName := p.Source.Redis
	if redisName == "" && len(w.cfg.Redis) == 1 {
		redisName = w.cfg.Redis[0].Name
	}
	h, err := hc.Config.Provision(ctx, handlers.Env{Pipeline: p.Name, Logger: log.With().Str("handler", hc.Name).Logger(), Redis: redisName})
	if err != nil {
		return nil, fmt.Errorf("pipeline %s: handler %s: %w", p.Name, hc.Name, err)
	}
	w.onClose(h.Close)
	if err := h.Start(ctx); err != nil {
		return nil, fmt.Errorf("pipeline %s: handler %s: start: %w", p.Name, hc.Name, err)
	}
	return h, nil
}

func (w *wiring) source(p *config.Pipeline, log zerolog.Logger) (engine.Source, error) {
	s := p.Source
	switch s.Kind {
	case config.KindFile:
		return file.New(file.Options{Path: s.Path, Key: s.Key, DeadLetter: p.DeadLetter, Follow: s.Follow, Checkpoint: s.Checkpoint, Batch: s.Batch}, log)
	case config.KindPipe:
		return pipe.New(pipe.Options{Key: s.Key, OutRetry: p.OutRetry, Batch: s.Batch}, w.stdio.In, w.stdout, log), nil
	}
	return w.redisSource(p, log)
}

// sink resolves an emit target (engine.SinkResolver); the engine caches the result.
func (w *wiring) sink(t engine.Target) (engine.Sink, error) {
	if t.Kind == "record" {
		if t.Path == "" {
			return codec.NewRecordSink(w.stdout), nil
		}
		a, err := codec.OpenFileAppender(t.Path)
		if err != nil {
			return nil, err
		}
		w.onClose(a.Close)
		return a, nil
	}
	return w.redisSink(t)
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
	closers := w.closers
	w.closers, w.closed = nil, true
	w.mu.Unlock()
	for i := len(closers) - 1; i >= 0; i-- {
		if err := closers[i](); err != nil {
			w.log.Warn().Err(err).Msg("closing")
		}
	}
}
