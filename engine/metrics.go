package engine

import "time"

// Metrics receives what the runtime counts (SPEC §10). The CLI plugs in Prometheus; tests and
// embedders may pass nil.
type Metrics interface {
	Outcome(pipeline, label string) // label: ack, drop, retry, retry_after, dead_letter, rejected
	HandlerDuration(pipeline string, d time.Duration)
	Inflight(pipeline string, delta int)
	DelayedHeld(pipeline string, n int)
	SourceError(pipeline string)
}

type noMetrics struct{}

func (noMetrics) Outcome(string, string)                {}
func (noMetrics) HandlerDuration(string, time.Duration) {}
func (noMetrics) Inflight(string, int)                  {}
func (noMetrics) DelayedHeld(string, int)               {}
func (noMetrics) SourceError(string)                    {}
