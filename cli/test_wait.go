package cli

import (
	"context"
	"time"

	"github.com/flowrun/flowrun/workflow"
)

// waitVisit is a visit of a wait step in a workflow test: the step's next `event` block (the
// n-th for its n-th visit) finishes it with its payload; without one, the step's timeout fires
// (the test's clock moves to it), and without a timeout the run is left waiting.
func (r *workflowRun) waitVisit(ctx context.Context, st *workflow.State, e workflow.Entry, deadline time.Time) error {
	events := r.test.Events[e.Step]
	if n := r.calls[e.Step]; n < len(events) {
		r.calls[e.Step]++
		return r.apply(ctx, r.g.Arrive(st, workflow.PayloadJSON(events[n]), 1, r.now))
	}
	if !deadline.IsZero() {
		r.now = deadline
		return r.apply(ctx, r.g.TimedOut(st, r.now))
	}
	return r.apply(ctx, r.g.Park(st, r.now))
}
