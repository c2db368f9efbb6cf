package workflow

import (
	"context"
	"errors"
	"fmt"

	"github.com/flowrun/flowrun/engine"
)

// PayloadFunc computes what a step's handler gets from its delivery (the step's `payload`
// expression, evaluated with input, steps and run in scope).
type PayloadFunc func(d *engine.Delivery) ([]byte, error)

// stepHandler is a step's handler as the step pipeline runs it: see NewStepHandler.
type stepHandler struct {
	g       *Graph
	step    string
	inner   engine.Handler
	payload PayloadFunc
}

// NewStepHandler wraps a step's handler (rules, a built-in, a Go handler) for its step
// pipeline. A delivery whose visit is stale is acknowledged unrun (Result.Duplicate). Otherwise
// the delivery's payload becomes payload's result (nil payload: the run's input), its headers
// gain x-idempotency-key and x-run-id, and inner runs; whether it acked or dropped is noted in
// the Visit (Label) for the step source's settlement. A rule's fail becomes a dead_letter
// outcome with its reason.
func NewStepHandler(g *Graph, step string, inner engine.Handler, payload PayloadFunc) engine.Handler {
	h := &stepHandler{g: g, step: step, inner: inner, payload: payload}
	if in, ok := inner.(engine.Inliner); ok && in.Inline() {
		return inlineStep{h}
	}
	return h
}

// inlineStep is a stepHandler whose inner handler never blocks.
type inlineStep struct{ *stepHandler }

func (inlineStep) Inline() bool { return true }

var errNoVisit = errors.New("workflow step: delivery without a run visit")

func (h *stepHandler) Handle(ctx context.Context, d *engine.Delivery) engine.Result {
	var v *Visit
	if d.Run != nil {
		v, _ = d.Run.State.(*Visit)
	}
	if v == nil || v.State == nil {
		return engine.Result{Outcome: engine.Retry(), Err: errNoVisit}
	}
	v.Label = ""
	if v.Stale {
		return engine.Result{Outcome: engine.Ack(), Duplicate: true}
	}
	body := []byte(v.State.Input)
	if h.payload != nil {
		b, err := h.payload(d)
		if err != nil {
			return engine.Result{Outcome: engine.Retry(), Err: fmt.Errorf("step %q: payload: %w", h.step, err)}
		}
		body = b
	}
	d.Payload = body
	d.Decoded = nil // what a decode of the step message made no longer describes the payload
	headers := make(map[string]string, len(d.Headers)+2)
	for k, val := range d.Headers {
		headers[k] = val
	}
	index := -1
	if v.Fan != nil && v.Fan.Kind == FanItem {
		index = v.Fan.Index // a for_each element's key adds its index (SPEC §16)
	}
	headers[engine.HeaderIdempotencyKey] = engine.IdempotencyKey(h.g.Name, d.Run.ID, h.step, d.Run.Visit, index)
	headers[engine.HeaderRunID] = d.Run.ID
	d.Headers = headers
	res := h.inner.Handle(ctx, d)
	if res.Err == nil && d.Run.Fail != "" && (res.Outcome.Kind == engine.KindAck || res.Outcome.Kind == engine.KindDrop) {
		// A rule's fail (SPEC §16): the delivery reaches the dead letter with that reason, as
		// a cap or a permanent error does, so the step source fails the run through Graph.Fail
		// and the workflow's dead letter holds the step's message.
		res.Outcome = engine.DeadLetter(d.Run.Fail)
	}
	if res.Err == nil {
		switch res.Outcome.Kind {
		case engine.KindAck:
			v.Label = engine.OutcomeAck.String()
		case engine.KindDrop:
			v.Label = engine.OutcomeDrop.String()
		}
	}
	return res
}
