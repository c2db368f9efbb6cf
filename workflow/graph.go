package workflow

import (
	"encoding/json"
	"time"

	"github.com/flowrun/flowrun/engine"
)

// The transitions below are pure: they read a run and say what a settlement does to it; a Store
// applies what they return. (Bodies land with the workflow runtime; the signatures are the
// contract the stores and the command line are written against.)

// Step returns the step of that name, or nil.
func (g *Graph) Step(name string) *StepDef {
	for i := range g.Steps {
		if g.Steps[i].Name == name {
			return &g.Steps[i]
		}
	}
	return nil
}

// Start returns a new run of id with input, entering the first step (visit 1), and the
// transition that creates it (Visit 0).
func (g *Graph) Start(id string, input json.RawMessage, now time.Time) (*State, Transition) {
	panic("workflow: Start not built yet")
}

// Finish is a visit of st's current step that settled as ack or drop (label "ack" or "drop"):
// v is what the handler wrote (output, a rule's next, complete or fail).
func (g *Graph) Finish(st *State, v *engine.Run, attempt int, label string, now time.Time) Transition {
	panic("workflow: Finish not built yet")
}

// Fail is a visit of st's current step that reached the dead letter with reason.
func (g *Graph) Fail(st *State, attempt int, reason string, now time.Time) Transition {
	panic("workflow: Fail not built yet")
}

// Cancel cancels an active run (runs cancel, a drop): compensations first under "compensate".
func (g *Graph) Cancel(st *State, now time.Time) Transition {
	panic("workflow: Cancel not built yet")
}

// TimedOut is st's current step's timeout firing: on to on_timeout, or the run fails.
func (g *Graph) TimedOut(st *State, now time.Time) Transition {
	panic("workflow: TimedOut not built yet")
}

// Retry resumes a failed, uncompensated run at the step that failed, with fresh attempts.
func (g *Graph) Retry(st *State, now time.Time) (Transition, error) {
	panic("workflow: Retry not built yet")
}

// Visit is what a step source puts in engine.Run.State for the step handler and its own
// settlement: the run as read with the delivery, and whether the delivery's visit is stale.
type Visit struct {
	State *State
	Stale bool
}
