package redisrun

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/workflow"
)

// DefaultRunID is the id of a run started without run_id: the start delivery's "KEY/ID" when it
// has an id (a stream entry, a file record), so a redelivered start message is a duplicate
// rather than a second run; else a random id.
func DefaultRunID(d *engine.Delivery) string {
	if d.ID != "" {
		return d.Key + "/" + d.ID
	}
	return NewRunID()
}

var errEmptyRunID = errors.New("run_id is empty")

// StartHandler returns the handler of the workflow's start pipeline: it creates the run named by
// runID (DefaultRunID when runID is nil), with the start message's payload as its input, and
// enters the first step; it answers Duplicate when the run exists (active, or finished within
// retention). A run_id that fails or is empty counts as retry, as a failing rule does.
func (s *Store) StartHandler(runID func(d *engine.Delivery) (string, error), fingerprint string) engine.Handler {
	return engine.HandlerFunc(func(ctx context.Context, d *engine.Delivery) engine.Result {
		id := ""
		if runID == nil {
			id = DefaultRunID(d)
		} else {
			var err error
			if id, err = runID(d); err == nil && id == "" {
				err = errEmptyRunID
			}
			if err != nil {
				return engine.Result{Outcome: engine.Retry(), Err: fmt.Errorf("workflow %s: run_id: %w", s.g.Name, err)}
			}
		}
		st, t := s.g.Start(id, workflow.PayloadJSON(d.Payload), time.Now())
		st.Fingerprint = fingerprint
		st.TraceParent = s.runTrace(ctx, id)
		ok, err := s.Create(ctx, st, t)
		switch {
		case err != nil:
			return engine.Result{Outcome: engine.Retry(), Err: err}
		case !ok:
			return engine.Result{Outcome: engine.Ack(), Duplicate: true}
		}
		return engine.Result{Outcome: engine.Ack()}
	})
}
