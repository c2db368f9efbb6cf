package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/flowrun/flowrun/engine"
)

// A for_each step (SPEC §16 "Fan-out") is one visit made of several messages on the step's own
// stream, each an ordinary delivery of the step pipeline (so its concurrency bounds the element
// handlers, across runs):
//
//   - the fan message, the step message every step gets when the run enters it: its delivery
//     evaluates for_each and settles by writing one element message per element (with the
//     run's visit, FieldIndex and FieldItem) and the join record (the count expected), in one
//     script that checks the visit and that the fan-out was not written already;
//   - an element message: its delivery runs the handler with `item` and `index`; its ack
//     records the element's output in the join record once (a duplicate changes nothing) and,
//     when the last output is recorded, writes the join message, in one script;
//   - the join message (FieldJoin): its delivery finishes the step through Graph.Join, the
//     outputs in element order, as any step's ack is applied (the visit check), so a duplicate
//     join is stale.
//
// An element that reaches the dead letter fails the run through Graph.Fail: the visit moves on
// (or the run ends) and every element still in flight becomes stale. A list longer than
// max_items, or that is not a list, sends the fan message to the dead letter: the run fails
// before any element runs. An empty list finishes the step at once with [].

// Fields of a for_each step's element and join messages, beside the run and visit every step
// message carries.
const (
	FieldIndex = "index" // an element message: the element's index, from 0
	FieldItem  = "item"  // an element message: the element, as JSON
	FieldJoin  = "join"  // the join message: "1"
)

// FanKind says which of a for_each step's messages a delivery is.
type FanKind int

const (
	FanOut  FanKind = iota // the step message entering the step: evaluate the list
	FanItem                // one element: run the handler
	FanJoin                // every element acked: finish the step
)

// Fan is a for_each delivery as its settlement needs it (Visit.Fan).
type Fan struct {
	Kind  FanKind
	Index int               // FanItem: the element's index
	Items []json.RawMessage // FanOut: the elements, JSON, to write one message each (none: [])
}

// FanOf reads which message of a for_each step a delivery's headers are.
func FanOf(headers map[string]string) (kind FanKind, index int, item string, err error) {
	if headers[FieldJoin] != "" {
		return FanJoin, 0, "", nil
	}
	s, ok := headers[FieldIndex]
	if !ok {
		return FanOut, 0, "", nil
	}
	index, err = strconv.Atoi(s)
	if err != nil || index < 0 {
		return FanItem, 0, "", fmt.Errorf("for_each: element index %q", s)
	}
	return FanItem, index, headers[FieldItem], nil
}

// ListFunc evaluates a step's for_each expression over the fan message's delivery.
type ListFunc func(d *engine.Delivery) (any, error)

// forEachHandler is a for_each step's handler: see NewForEachHandler.
type forEachHandler struct {
	step     *stepHandler
	list     ListFunc
	maxItems int
}

// NewForEachHandler wraps a for_each step's handler (see the comment at the top of this file):
// the fan message's delivery evaluates list and notes the elements in the Visit (Fan) for the
// step source's settlement, without calling inner; an element's runs inner as NewStepHandler
// does, with the run's Item and Index set and the idempotency key
// <workflow>/<run>/<step>/<visit>/<index>; the join's only notes itself. maxItems <= 0 is the
// default, 1000.
func NewForEachHandler(g *Graph, step string, inner engine.Handler, payload PayloadFunc, list ListFunc, maxItems int) engine.Handler {
	if maxItems <= 0 {
		maxItems = DefaultMaxItems
	}
	return &forEachHandler{step: &stepHandler{g: g, step: step, inner: inner, payload: payload}, list: list, maxItems: maxItems}
}

// DefaultMaxItems is the most elements of a for_each list when max_items is not set.
const DefaultMaxItems = 1000

func (h *forEachHandler) Handle(ctx context.Context, d *engine.Delivery) engine.Result {
	var v *Visit
	if d.Run != nil {
		v, _ = d.Run.State.(*Visit)
	}
	if v == nil || v.State == nil {
		return engine.Result{Outcome: engine.Retry(), Err: errNoVisit}
	}
	v.Label, v.Fan = "", nil
	if v.Stale {
		return engine.Result{Outcome: engine.Ack(), Duplicate: true}
	}
	kind, index, item, err := FanOf(d.Headers)
	if err != nil {
		return engine.Result{Outcome: engine.DeadLetter(err.Error())}
	}
	switch kind {
	case FanJoin:
		v.Fan, v.Label = &Fan{Kind: FanJoin}, engine.OutcomeAck.String()
		return engine.Result{Outcome: engine.Ack()}
	case FanOut:
		return h.fanOut(d, v)
	}
	d.Run.Item, d.Run.Index = decodeItem(item), index
	v.Fan = &Fan{Kind: FanItem, Index: index}
	// The element travels in the message for its retries and dead letter, not to the handler
	// as a header (an http handler would send it): the payload expression hands it over.
	delete(d.Headers, FieldItem)
	res := h.step.Handle(ctx, d)
	d.Headers[FieldItem] = item
	return res
}

// fanOut evaluates the list: its elements go into v.Fan for the settlement, an empty list
// finishes the step with [] (an ordinary ack), too many or not a list fail the run.
func (h *forEachHandler) fanOut(d *engine.Delivery, v *Visit) engine.Result {
	out, err := h.list(d)
	if err != nil {
		return engine.Result{Outcome: engine.Retry(), Err: fmt.Errorf("step %q: for_each: %w", h.step.step, err)}
	}
	list, ok := out.([]any)
	if !ok {
		return engine.Result{Outcome: engine.DeadLetter(fmt.Sprintf("for_each gave %s, not a list", typeName(out)))}
	}
	if len(list) > h.maxItems {
		return engine.Result{Outcome: engine.DeadLetter(fmt.Sprintf("for_each gave %d elements, more than max_items (%d)", len(list), h.maxItems))}
	}
	v.Label = engine.OutcomeAck.String()
	if len(list) == 0 {
		v.Fan = &Fan{Kind: FanOut} // no elements: the settlement finishes the step with []
		d.Run.Output, d.Run.HasOutput = []any{}, true
		return engine.Result{Outcome: engine.Ack()}
	}
	items := make([]json.RawMessage, len(list))
	for i, e := range list {
		b, err := json.Marshal(e)
		if err != nil {
			v.Label = ""
			return engine.Result{Outcome: engine.DeadLetter(fmt.Sprintf("for_each: element %d: %v", i, err))}
		}
		items[i] = b
	}
	v.Fan = &Fan{Kind: FanOut, Items: items}
	return engine.Result{Outcome: engine.Ack()}
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "nil"
	case map[string]any:
		return "a map"
	case string:
		return "a string"
	case bool:
		return "a bool"
	case float64, int, int64:
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}

// decodeItem is an element as expressions see it (a string when it is not JSON).
func decodeItem(s string) any {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return s
	}
	return v
}

// Join is a for_each step's join: every element acked, outputs[i] element i's output (JSON;
// nil is null). It finishes st's current step as an ack whose output is the list of outputs
// in element order; with attempt the join delivery's.
func (g *Graph) Join(st *State, outputs []json.RawMessage, attempt int, now time.Time) Transition {
	list := make([]json.RawMessage, len(outputs))
	for i, o := range outputs {
		if len(o) == 0 {
			o = json.RawMessage("null")
		}
		list[i] = o
	}
	run := &engine.Run{ID: st.ID, Output: list, HasOutput: true}
	return g.Finish(st, run, attempt, engine.OutcomeAck.String(), now)
}

// ElementOutput is what an element's ack records: the handler's output as JSON, null without
// one.
func ElementOutput(r *engine.Run) (json.RawMessage, error) {
	if r == nil || !r.HasOutput {
		return json.RawMessage("null"), nil
	}
	b, err := json.Marshal(r.Output)
	if err != nil {
		return nil, fmt.Errorf("element output: %w", err)
	}
	return b, nil
}
