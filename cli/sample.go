package cli

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/transports"
)

// sampleEvery is how often the source gauges are read (SPEC §10 "More metrics").
const sampleEvery = 15 * time.Second

// sourceGauges are the numbers `flowrun inspect` prints, kept for Prometheus and autoscalers.
// The last sample of each pipeline is kept for the status page (SPEC §15), which reads it
// rather than asking Redis on every refresh.
type sourceGauges struct {
	lag, pending, deadLetters *prometheus.GaugeVec

	// mu guards last, and orders a sample's writes with a reload's forget: a pipeline
	// removed while it was being read is not written back.
	mu   sync.Mutex
	last map[string]sourceSample // by pipeline
	poke chan struct{}           // a sample soon, out of turn (after a redrive or purge)

	// A dead letter written asks for a sample at once, at most one a second (resampleEvery):
	// one asked for within the second after the last is taken when that second is over.
	dlMu     sync.Mutex
	dlLast   time.Time
	dlQueued bool
}

// resampleEvery bounds the samples dead letters ask for.
const resampleEvery = time.Second

// sourceSample is one pipeline's numbers and when they were read.
type sourceSample struct {
	stats transports.Stats
	at    time.Time
}

func newSourceGauges(reg *prometheus.Registry) *sourceGauges {
	g := &sourceGauges{
		last: map[string]sourceSample{},
		poke: make(chan struct{}, 1),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flowrun_source_lag",
			Help: "Entries of the source not yet delivered to its consumer group (an upper bound where Redis cannot tell), sampled every 15 s.",
		}, []string{"pipeline"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flowrun_source_pending",
			Help: "Deliveries read and not yet settled (pending entries, or a reliable list's processing list), sampled every 15 s.",
		}, []string{"pipeline"}),
		deadLetters: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flowrun_dead_letter_length", Help: "Length of the pipeline's dead-letter key, sampled every 15 s.",
		}, []string{"pipeline"}),
	}
	reg.MustRegister(g.lag, g.pending, g.deadLetters)
	return g
}

// latest returns the last sample of a pipeline's source (false before the first).
func (g *sourceGauges) latest(pipeline string) (transports.Stats, time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s, ok := g.last[pipeline]
	return s.stats, s.at, ok
}

// refresh asks for a sample now rather than at the next tick; asks that come while one is
// pending are one.
func (g *sourceGauges) refresh() {
	select {
	case g.poke <- struct{}{}:
	default:
	}
}

// deadLettered is the engine's hook after a dead letter was written (engine.Options): a sample
// now, or at the end of the second since the last one it asked for. It never blocks.
func (g *sourceGauges) deadLettered(string) {
	g.dlMu.Lock()
	defer g.dlMu.Unlock()
	if g.dlQueued {
		return // the one already due will see this letter too
	}
	wait := time.Until(g.dlLast.Add(resampleEvery))
	if wait <= 0 {
		g.dlLast = time.Now()
		g.refresh()
		return
	}
	g.dlQueued = true
	time.AfterFunc(wait, func() {
		g.dlMu.Lock()
		g.dlQueued, g.dlLast = false, time.Now()
		g.dlMu.Unlock()
		g.refresh()
	})
}

// sample reads every pipeline whose source can tell (transports.Inspector) once the sources are
// ready (their groups exist then), and then every `every` (or when refresh asks) until ctx
// ends: one cheap round trip or two per source. pipelines is asked each time, since a reload
// changes them. A failed read keeps the last values and is logged at debug (the source's own
// read loop reports an outage).
func (g *sourceGauges) sample(ctx context.Context, every time.Duration, ready func() bool, pipelines func() []*config.Pipeline, env func(redisBlock string) *transports.Env, log zerolog.Logger) {
	wait := time.NewTicker(100 * time.Millisecond)
	for start := time.Now(); !ready() && time.Since(start) < every; {
		select {
		case <-ctx.Done():
			wait.Stop()
			return
		case <-wait.C:
		}
	}
	wait.Stop()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		for _, p := range pipelines() {
			in, ok := p.Source.Config.(transports.Inspector)
			if !ok {
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, every)
			st, err := in.Inspect(rctx, env(p.Source.Redis))
			cancel()
			if err != nil {
				log.Debug().Err(err).Str("pipeline", p.Name).Msg("sampling source gauges")
				continue
			}
			set := func(v *prometheus.GaugeVec, n *int64) {
				if n != nil {
					v.WithLabelValues(p.Name).Set(float64(*n))
				}
			}
			lag := st.LagBound
			if lag == nil {
				lag = st.Lag
			}
			g.mu.Lock()
			if slices.Contains(pipelines(), p) {
				set(g.lag, lag)
				set(g.pending, st.Pending)
				set(g.deadLetters, st.DeadLetters)
				g.last[p.Name] = sourceSample{stats: st, at: time.Now()}
			}
			g.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-g.poke:
		}
	}
}
