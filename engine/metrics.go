package engine

import "time"

// Metrics receives what the runtime counts (SPEC §10) beside the outcomes and the handlers in
// flight, which the engine counts itself and serves from Totals and Status (so every view
// agrees). The CLI plugs in
// Prometheus; tests and embedders may pass nil. Pipeline is called once per pipeline, so an
// implementation can bind its label values once instead of on every message.
type Metrics interface {
	Pipeline(name string) PipelineMetrics
}

// PipelineMetrics counts for one pipeline.
type PipelineMetrics interface {
	HandlerDuration(d time.Duration)
	DelayedHeld(n int)
	SourceError()
	// SettleFailure counts one delivery whose settlement failed, by reason ("noperm",
	// "wrongtype", "connection", …): flowrun_settle_failures_total.
	SettleFailure(reason string)
}

type noMetrics struct{}

func (noMetrics) Pipeline(string) PipelineMetrics { return noMetrics{} }
func (noMetrics) HandlerDuration(time.Duration)   {}
func (noMetrics) DelayedHeld(int)                 {}
func (noMetrics) SourceError()                    {}
func (noMetrics) SettleFailure(string)            {}
