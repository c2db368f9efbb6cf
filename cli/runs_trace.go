package cli

import (
	"context"

	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/transports/redisrun"
)

// traceRuns traces what `runs start`, `cancel` and `retry` do to runs when the files (or the
// standard variables) turn tracing on (SPEC §14): a run started here keeps its trace context, and
// a run ended here (a cancel under on_failure = "stop") has its span exported here. The
// returned function flushes the spans, at most telemetryFlush; nil when not tracing.
func traceRuns(ctx context.Context, sub string, cfg *config.Config, store *redisrun.Store) func() {
	if sub != "start" && sub != "cancel" && sub != "retry" {
		return nil
	}
	tel, err := startTelemetry(ctx, cfg, zerolog.Nop())
	if err != nil || tel == nil {
		return nil // a collector is never a reason for a command to fail
	}
	store.Tracer = tel.Runs()
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), telemetryFlush)
		defer cancel()
		_ = tel.Shutdown(ctx)
	}
}
