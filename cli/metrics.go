package cli

import (
	"context"
	"net/http"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/telemetry"
	"github.com/flowrun/flowrun/workflow"
)

// HandlerBuckets are the upper bounds (le) of flowrun_handler_seconds, in seconds: 1-2-5 steps
// from 1 µs to 60 s, so a rule that takes microseconds (2-4 µs on a current machine, twice that
// on a slow one) and a Go handler that calls a service for seconds both land in buckets of their
// own, and a p99 is a measurement, not an interpolation inside the first bucket.
var HandlerBuckets = []float64{
	0.000001, 0.000002, 0.000005, 0.00001, 0.00002, 0.00005,
	0.0001, 0.0002, 0.0005,
	0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5,
	1, 2, 5, 10, 20, 60,
}

// promMetrics implements engine.Metrics with the metric names of SPEC §10.
type promMetrics struct {
	reg         *prometheus.Registry
	engine      *engineCollector
	seconds     *prometheus.HistogramVec
	delayed     *prometheus.GaugeVec
	srcErrors   *prometheus.CounterVec
	settleFails *prometheus.CounterVec
	ruleErrors  *prometheus.CounterVec
	sources     *sourceGauges
	runs        *prometheus.CounterVec   // flowrun_runs_total{workflow,status}
	runSeconds  *prometheus.HistogramVec // flowrun_run_seconds{workflow}
	active      *activeCollector         // flowrun_runs_active{workflow,step}
}

var _ engine.Metrics = (*promMetrics)(nil)

func newMetrics() *promMetrics {
	m := &promMetrics{
		reg: prometheus.NewRegistry(),
		engine: &engineCollector{
			messages: newDesc(prometheus.Opts{
				Name: "flowrun_messages_total", Help: "Deliveries settled, by outcome.",
			}, "pipeline", "outcome"),
			deadLetters: newDesc(prometheus.Opts{
				Name: "flowrun_dead_letters_total", Help: "Deliveries written to the dead letter.",
			}, "pipeline"),
			inflight: newDesc(prometheus.Opts{Name: "flowrun_inflight", Help: "Handlers running now."}, "pipeline"),
		},
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "flowrun_handler_seconds", Help: "Time a handler took per delivery (buckets from 5 µs to 60 s).",
			Buckets: HandlerBuckets,
		}, []string{"pipeline"}),
		delayed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flowrun_delayed_held", Help: "Runtime delayed copies held in the process.",
		}, []string{"pipeline"}),
		srcErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flowrun_source_errors_total", Help: "Failed reads, malformed records and failed settlement round trips.",
		}, []string{"pipeline"}),
	}
	m.settleFails = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flowrun_settle_failures_total",
		Help: "Deliveries whose settlement failed, by reason (noperm, wrongtype, connection, ...); permanent ones are left unsettled.",
	}, []string{"pipeline", "reason"})
	m.ruleErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flowrun_rule_errors_total",
		Help: "Deliveries whose rule failed at run time (a type mismatch, a bad value), by rule; each is retried, and like failures are logged once per progress interval.",
	}, []string{"pipeline", "rule"})
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "flowrun_build_info", Help: "Always 1; the labels say which flowrun this is.",
	}, []string{"version", "goversion"})
	build.WithLabelValues(Version, runtime.Version()).Set(1)
	m.runs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flowrun_runs_total", Help: "Workflow runs this process ended, by the status they ended with.",
	}, []string{"workflow", "status"})
	m.runSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "flowrun_run_seconds", Help: "Durations of the workflow runs this process ended, from start to end (buckets from 10 ms to 7 days).",
		Buckets: RunBuckets,
	}, []string{"workflow"})
	m.active = &activeCollector{desc: newDesc(prometheus.Opts{
		Name: "flowrun_runs_active", Help: "Active workflow runs at each step, read from Redis at each scrape.",
	}, "workflow", "step")}
	m.reg.MustRegister(m.engine, m.seconds, m.delayed, m.srcErrors, m.settleFails,
		m.ruleErrors, build, m.runs, m.runSeconds, m.active,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.sources = newSourceGauges(m.reg)
	return m
}

// forget drops the gauges of a pipeline a reload removed, so they do not report its last
// values forever; its counters stay, as counters do. The reload has taken it out of the set the
// sampler reads first.
func (m *promMetrics) forget(name string) {
	m.sources.mu.Lock()
	defer m.sources.mu.Unlock()
	for _, g := range []*prometheus.GaugeVec{m.delayed, m.sources.lag, m.sources.pending, m.sources.deadLetters} {
		g.DeleteLabelValues(name)
	}
	delete(m.sources.last, name)
}

func (m *promMetrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Pipeline binds the label values of one pipeline once, so that counting a message is a few
// atomic adds and never a label hash.
func (m *promMetrics) Pipeline(name string) engine.PipelineMetrics {
	return &boundMetrics{
		seconds:     m.seconds.WithLabelValues(name),
		delayed:     m.delayed.WithLabelValues(name),
		srcErrors:   m.srcErrors.WithLabelValues(name),
		settleFails: m.settleFails.MustCurryWith(prometheus.Labels{"pipeline": name}),
		ruleErrors:  m.ruleErrors.MustCurryWith(prometheus.Labels{"pipeline": name}),
	}
}

type boundMetrics struct {
	seconds     prometheus.Observer
	delayed     prometheus.Gauge
	srcErrors   prometheus.Counter
	settleFails *prometheus.CounterVec // curried with the pipeline; reasons are few
	ruleErrors  *prometheus.CounterVec // curried with the pipeline; rules are the config's
}

func (b *boundMetrics) HandlerDuration(d time.Duration) { b.seconds.Observe(d.Seconds()) }
func (b *boundMetrics) DelayedHeld(n int)               { b.delayed.Set(float64(n)) }
func (b *boundMetrics) SourceError()                    { b.srcErrors.Inc() }
func (b *boundMetrics) SettleFailure(reason string)     { b.settleFails.WithLabelValues(reason).Inc() }
func (b *boundMetrics) RuleError(rule string)           { b.ruleErrors.WithLabelValues(rule).Inc() }

var _ engine.RuleErrorCounter = (*boundMetrics)(nil)

// engineCollector serves flowrun_messages_total, flowrun_dead_letters_total and
// flowrun_inflight from the engine's counters, read at each scrape: the counters the progress
// lines and the status page read, so /metrics agrees with them to the message.
type engineCollector struct {
	messages    *prometheus.Desc
	deadLetters *prometheus.Desc
	inflight    *prometheus.Desc
	counts      atomic.Pointer[engineCounts] // nil until readEngine
}

// engineCounts is what the collector reads (*engine.Engine).
type engineCounts interface {
	Totals() []engine.PipelineTotals // the counters, kept for pipelines a reload removed
	Status() []engine.PipelineStatus // the pipelines running now
}

var _ engineCounts = (*engine.Engine)(nil)

// readEngine sets the engine whose counters the collector reads.
func (m *promMetrics) readEngine(e engineCounts) { m.engine.counts.Store(&e) }

// newDesc is the Desc of a metric the collector serves, declared with Opts as the vectors are.
func newDesc(o prometheus.Opts, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(o.Name, o.Help, labels, nil)
}

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.messages
	ch <- c.deadLetters
	ch <- c.inflight
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	e := c.counts.Load()
	if e == nil {
		return
	}
	for _, t := range (*e).Totals() {
		for l, n := range t.Outcomes {
			ch <- prometheus.MustNewConstMetric(c.messages, prometheus.CounterValue, float64(n), t.Name, engine.Label(l).String())
		}
		ch <- prometheus.MustNewConstMetric(c.deadLetters, prometheus.CounterValue,
			float64(t.Outcomes[engine.OutcomeDeadLetter]), t.Name)
	}
	for _, s := range (*e).Status() {
		ch <- prometheus.MustNewConstMetric(c.inflight, prometheus.GaugeValue, float64(s.Inflight), s.Name)
	}
}

// spanCounts is what the trace exporter counts (*telemetry.Provider).
type spanCounts interface {
	Dropped() int64
	Exported() int64
}

var _ spanCounts = (*telemetry.Provider)(nil)

// traces adds the trace exporter's counters (SPEC §14: spans a slow or absent collector could
// not take are dropped and counted, never waited for).
func (m *promMetrics) traces(t spanCounts) {
	m.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "flowrun_trace_spans_dropped_total",
			Help: "Spans dropped: the export queue was full or the collector did not take them.",
		}, func() float64 { return float64(t.Dropped()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "flowrun_trace_spans_exported_total",
			Help: "Spans the OTLP collector accepted.",
		}, func() float64 { return float64(t.Exported()) }),
	)
}

// RunBuckets are the upper bounds (le) of flowrun_run_seconds, in seconds: from 10 ms (three
// rule steps) to 7 days (a run that waits), in 1-3 steps.
var RunBuckets = []float64{
	0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30,
	60, 180, 600, 1800, 3600, 3 * 3600, 12 * 3600,
	86400, 3 * 86400, 7 * 86400,
}

// runDone is a workflow store's OnDone: it counts a run this process ended and its duration.
func (m *promMetrics) runDone(wf string) func(st workflow.Status, took time.Duration) {
	seconds := m.runSeconds.WithLabelValues(wf)
	byStatus := m.runs.MustCurryWith(prometheus.Labels{"workflow": wf})
	return func(st workflow.Status, took time.Duration) {
		byStatus.WithLabelValues(string(st)).Inc()
		seconds.Observe(took.Seconds())
	}
}

// activeScrapeTimeout bounds the Redis reads of a scrape of flowrun_runs_active: a slow Redis
// leaves the gauge out of that scrape rather than holding the scrape.
const activeScrapeTimeout = time.Second

// activeCount is one flowrun_runs_active sample.
type activeCount struct {
	workflow, step string
	n              int64
}

// activeCollector serves flowrun_runs_active from the workflows' stores, read at each scrape
// (one HGETALL-sized read per workflow).
type activeCollector struct {
	desc *prometheus.Desc
	read atomic.Pointer[func(ctx context.Context) []activeCount] // nil: no workflows
}

// readRuns sets what the active gauge reads.
func (m *promMetrics) readRuns(f func(ctx context.Context) []activeCount) { m.active.read.Store(&f) }

func (c *activeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *activeCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.read.Load()
	if f == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), activeScrapeTimeout)
	defer cancel()
	for _, a := range (*f)(ctx) {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(a.n), a.workflow, a.step)
	}
}
