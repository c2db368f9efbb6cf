package cli

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/flowrun/flowrun/engine"
)

// promMetrics implements engine.Metrics with the metric names of SPEC §10.
type promMetrics struct {
	reg         *prometheus.Registry
	messages    *prometheus.CounterVec
	seconds     *prometheus.HistogramVec
	deadLetters *prometheus.CounterVec
	inflight    *prometheus.GaugeVec
	delayed     *prometheus.GaugeVec
	srcErrors   *prometheus.CounterVec
}

var _ engine.Metrics = (*promMetrics)(nil)

func newMetrics() *promMetrics {
	m := &promMetrics{
		reg: prometheus.NewRegistry(),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flowrun_messages_total", Help: "Deliveries settled, by outcome.",
		}, []string{"pipeline", "outcome"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "flowrun_handler_seconds", Help: "Time a handler took per delivery.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"pipeline"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flowrun_dead_letters_total", Help: "Deliveries written to the dead letter.",
		}, []string{"pipeline"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flowrun_inflight", Help: "Handlers running now.",
		}, []string{"pipeline"}),
		delayed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flowrun_delayed_held", Help: "Runtime delayed copies held in the process.",
		}, []string{"pipeline"}),
		srcErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flowrun_source_errors_total", Help: "Failed reads and settlements.",
		}, []string{"pipeline"}),
	}
	m.reg.MustRegister(m.messages, m.seconds, m.deadLetters, m.inflight, m.delayed, m.srcErrors)
	return m
}

func (m *promMetrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

func (m *promMetrics) Outcome(pipeline, label string) {
	m.messages.WithLabelValues(pipeline, label).Inc()
	if label == engine.LabelDeadLetter {
		m.deadLetters.WithLabelValues(pipeline).Inc()
	}
}

func (m *promMetrics) HandlerDuration(pipeline string, d time.Duration) {
	m.seconds.WithLabelValues(pipeline).Observe(d.Seconds())
}

func (m *promMetrics) Inflight(pipeline string, delta int) {
	m.inflight.WithLabelValues(pipeline).Add(float64(delta))
}

func (m *promMetrics) DelayedHeld(pipeline string, n int) {
	m.delayed.WithLabelValues(pipeline).Set(float64(n))
}

func (m *promMetrics) SourceError(pipeline string) {
	m.srcErrors.WithLabelValues(pipeline).Inc()
}
