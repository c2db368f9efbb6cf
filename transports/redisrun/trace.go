package redisrun

import (
	"context"
	"time"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/workflow"
)

// runTrace is the trace context run, created in ctx, keeps; "" without tracing, so nothing is
// added to the record or the step messages (SPEC §14).
func (s *Store) runTrace(ctx context.Context, run string) string {
	if s.Tracer == nil {
		return ""
	}
	return s.Tracer.RunTrace(ctx, s.g.Name, run)
}

// endRun exports the span of a run this process ended (t.Done), whose trace context is trace
// (read with the run's record, or written by its create: no round trip of its own).
func (s *Store) endRun(t workflow.Transition, started time.Time, trace string) {
	if s.Tracer == nil || trace == "" {
		return
	}
	s.Tracer.EndRun(trace, engine.RunEnd{
		Workflow: s.g.Name, Run: t.Run, Visit: t.Visit, Status: string(t.Status), Error: t.Error, Started: started, At: t.At,
	})
}
