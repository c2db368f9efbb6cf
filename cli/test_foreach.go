package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/flowrun/flowrun/config"
	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/workflow"
)

// visitForEach delivers a for_each step's visit offline as the step's stream would (SPEC §16
// "Fan-out"): the fan message (the list evaluated; no mock is taken), then each element in
// order, attempt after attempt until it settles (the n-th mock of the step answers its n-th
// element call, retries included), then the join. An element that reaches the dead letter
// fails the run; a timeout fires between calls as on any step.
func (r *workflowRun) visitForEach(ctx context.Context, e workflow.Entry, step *config.Step, policy engine.Policy, deadline time.Time) error {
	items, done, err := r.fanOut(ctx, e, step, policy, deadline)
	if err != nil || done {
		return err
	}
	outputs := make([]json.RawMessage, len(items))
	for i, item := range items {
		out, done, err := r.element(ctx, e, step, policy, deadline, i, item)
		if err != nil || done {
			return err
		}
		outputs[i] = out
	}
	st, err := r.store.Get(ctx, e.Run)
	if err != nil {
		return err
	}
	return r.apply(ctx, r.g.Join(st, outputs, 1, r.now))
}

// fanOut delivers the fan message: the elements, or done when the visit settled already (an
// empty list finished the step, too many elements failed the run, a timeout fired).
func (r *workflowRun) fanOut(ctx context.Context, e workflow.Entry, step *config.Step, policy engine.Policy, deadline time.Time) ([]json.RawMessage, bool, error) {
	h := stepHandler(r.g, step, nil) // the fan delivery never calls the handler
	for attempt := 1; ; attempt++ {
		st, done, err := r.current(ctx, e, deadline)
		if err != nil || done {
			return nil, true, err
		}
		d := r.delivery(st, e, attempt)
		res := h.Handle(ctx, d)
		dec := policy.Decide(d, res.Outcome, res.Err, r.now)
		v := d.Run.State.(*workflow.Visit)
		switch dec.Settlement.Action {
		case engine.ActAck:
			if v.Fan == nil || len(v.Fan.Items) == 0 {
				return nil, true, r.apply(ctx, r.g.Finish(st, d.Run, attempt, v.Label, r.now))
			}
			return v.Fan.Items, false, nil
		case engine.ActDeadLetter:
			return nil, true, r.apply(ctx, r.g.Fail(st, attempt, dec.Note, r.now))
		case engine.ActDelay:
			r.now = dec.Settlement.Due
		}
		if res.Err != nil && attempt >= maxTestCalls {
			return nil, true, fmt.Errorf("step %q: for_each: %w", step.Name, res.Err)
		}
	}
}

// element delivers element index until it settles: its output, or done when the run failed
// (the dead letter, a timeout).
func (r *workflowRun) element(ctx context.Context, e workflow.Entry, step *config.Step, policy engine.Policy, deadline time.Time, index int, item json.RawMessage) (json.RawMessage, bool, error) {
	for attempt := 1; ; attempt++ {
		st, done, err := r.current(ctx, e, deadline)
		if err != nil || done {
			return nil, true, err
		}
		if r.total++; r.total > maxTestCalls {
			return nil, true, fmt.Errorf("the run did not end within %d handler calls (at step %q)", maxTestCalls, e.Step)
		}
		d := r.delivery(st, e, attempt)
		d.Headers[workflow.FieldIndex] = strconv.Itoa(index)
		d.Headers[workflow.FieldItem] = string(item)
		res, err := r.call(ctx, step, d)
		if err != nil {
			return nil, true, err
		}
		if res.Err != nil && (res.Outcome.Kind == engine.KindAck || res.Outcome.Kind == engine.KindDrop) {
			res.Outcome = engine.Retry()
		}
		dec := policy.Decide(d, res.Outcome, res.Err, r.now)
		switch dec.Settlement.Action {
		case engine.ActAck:
			out, err := workflow.ElementOutput(d.Run)
			if err != nil {
				return nil, true, r.apply(ctx, r.g.Fail(st, attempt, fmt.Sprintf("element %d: %v", index, err), r.now))
			}
			return out, false, nil
		case engine.ActDeadLetter:
			return nil, true, r.apply(ctx, r.g.Fail(st, attempt, dec.Note, r.now))
		case engine.ActDelay:
			r.now = dec.Settlement.Due
		}
	}
}

// current reads the run before a delivery of visit e: done when the visit is over, or when its
// timeout has passed (then applied).
func (r *workflowRun) current(ctx context.Context, e workflow.Entry, deadline time.Time) (*workflow.State, bool, error) {
	st, err := r.store.Get(ctx, e.Run)
	if err != nil {
		return nil, true, err
	}
	if st.Stale(e.Visit) {
		return nil, true, nil
	}
	if !deadline.IsZero() && !r.now.Before(deadline) {
		return nil, true, r.apply(ctx, r.g.TimedOut(st, r.now))
	}
	return st, false, nil
}
