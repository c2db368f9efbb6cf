package engine

import (
	"strconv"
	"time"
)

// Run is a workflow run as one step visit sees it (SPEC §16); a Delivery carries one only when
// it is a step's. The step source fills the view from the run record before the handler runs;
// the handler (rules, a built-in or a Go handler, through package plugins) writes what the
// step produced into the fields below the line, and the step source reads them when it
// settles the visit. The engine itself reads none of it: a run is work like any other here.
type Run struct {
	ID        string
	Workflow  string
	Step      string
	Visit     int // the run's step visits, counted from 1; the message's, checked against the run's
	StartedAt time.Time
	Input     any            // the starting message's payload, decoded JSON (a string when not JSON)
	Steps     map[string]any // each finished step's output, by step name
	Item      any            // for_each: the element (SPEC §16 "Fan-out")
	Index     int            // for_each: its index

	// Written by the handler.
	Output    any    // what the step recorded; see HasOutput
	HasOutput bool   // Output was set (a nil output is JSON null)
	Next      string // a rule's next: the step after this one, overriding the step's own
	Complete  bool   // a rule's complete: the run completes after this step
	Fail      string // a rule's fail: the run fails with this reason

	// State is the step source's own (what it needs to settle the visit); nothing else reads it.
	State any
}

// IdempotencyKey is the x-idempotency-key of a step visit (SPEC §16):
// <workflow>/<run>/<step>/<visit>, plus /<index> for a for_each element (index >= 0).
func IdempotencyKey(workflow, run, step string, visit, index int) string {
	b := make([]byte, 0, len(workflow)+len(run)+len(step)+16)
	b = append(b, workflow...)
	b = append(b, '/')
	b = append(b, run...)
	b = append(b, '/')
	b = append(b, step...)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(visit), 10)
	if index >= 0 {
		b = append(b, '/')
		b = strconv.AppendInt(b, int64(index), 10)
	}
	return string(b)
}
