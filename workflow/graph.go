package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/flowrun/flowrun/engine"
)

// The transitions below are pure: they read a run and say what a settlement does to it; a Store
// applies what they return (State.Apply is what applying means). Each transition carries the
// run's Finished, Pending, Ending, Error, FailedStep and Compensated as they are after it, whole,
// so a store writes them as given.
//
// A transition on a run it does not apply to (a Finish of a finished run, say) has Visit -1: no
// run's visit is -1, so a store reports it stale and changes nothing. A step source checks
// State.Stale before it calls Finish or Fail, so this is a guard, not a path.

// NoVisit is the Visit of a transition that applies to no run.
const NoVisit = -1

// On failure policies (SPEC §16).
const (
	OnFailureCompensate = "compensate"
	OnFailureStop       = "stop"
)

// NewGraph builds a graph, checking that step names are unique and that every next, compensate
// and on_timeout names a step of it. onFailure "" is "compensate".
func NewGraph(name, onFailure string, retention time.Duration, steps []StepDef) (*Graph, error) {
	if name == "" {
		return nil, errors.New("workflow: empty name")
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("workflow %q: no steps", name)
	}
	switch onFailure {
	case "":
		onFailure = OnFailureCompensate
	case OnFailureCompensate, OnFailureStop:
	default:
		return nil, fmt.Errorf("workflow %q: on_failure %q: want %q or %q", name, onFailure, OnFailureCompensate, OnFailureStop)
	}
	g := &Graph{Name: name, Steps: slices.Clone(steps), OnFailure: onFailure, Retention: retention}
	seen := make(map[string]bool, len(steps))
	for _, s := range steps {
		if s.Name == "" {
			return nil, fmt.Errorf("workflow %q: a step without a name", name)
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("workflow %q: step %q declared twice", name, s.Name)
		}
		seen[s.Name] = true
	}
	for _, s := range steps {
		for _, ref := range []struct{ attr, to string }{{"next", s.Next}, {"compensate", s.Compensate}, {"on_timeout", s.OnTimeout}} {
			if ref.to != "" && !seen[ref.to] {
				return nil, fmt.Errorf("workflow %q: step %q: %s names no step: %q", name, s.Name, ref.attr, ref.to)
			}
		}
	}
	return g, nil
}

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
	first := g.Steps[0].Name
	ev := Event{Outcome: EventStarted, At: now}
	st := &State{
		ID: id, Workflow: g.Name, Status: Running, Step: first, Visit: 1,
		Input: input, Steps: map[string]json.RawMessage{},
		StartedAt: now, UpdatedAt: now, History: []Event{ev},
	}
	t := Transition{Run: id, Visit: 0, Status: Running, History: []Event{ev}, At: now}
	g.enter(&t, first, now)
	return st, t
}

// base is a transition of st's current visit that changes nothing yet.
func base(st *State, now time.Time) Transition {
	return Transition{
		Run: st.ID, Visit: st.Visit, Status: st.Status,
		Finished: slices.Clone(st.Finished), Pending: slices.Clone(st.Pending), Ending: st.Ending,
		Error: st.Error, FailedStep: st.FailedStep, Compensated: st.Compensated, At: now,
	}
}

// noop is a transition that applies to no run.
func noop(st *State, now time.Time) Transition {
	return Transition{Run: st.ID, Visit: NoVisit, Status: st.Status, At: now}
}

// enter makes t enter step: its delay and, from the moment it is entered (after the delay), its
// deadline.
func (g *Graph) enter(t *Transition, step string, now time.Time) {
	t.Enter = step
	s := g.Step(step)
	if s == nil {
		return
	}
	t.EnterDelay = s.Delay
	if s.Timeout > 0 {
		t.EnterDeadline = now.Add(s.Delay + s.Timeout)
	}
}

// end makes t end the run with status, appending the run's own event (error: the run's).
func end(t *Transition, status Status, step string, visit int) {
	t.Status = status
	t.Done = true
	t.Pending = nil
	t.Ending = ""
	var outcome string
	switch status {
	case Completed:
		outcome = EventCompleted
	case Cancelled:
		outcome = EventCancelled
	default:
		outcome = EventFailed
	}
	t.History = append(t.History, Event{Step: step, Visit: visit, Outcome: outcome, At: t.At, Error: t.Error})
}

// Finish is a visit of st's current step that settled as ack or drop (label "ack" or "drop"):
// v is what the handler wrote (output, a rule's next, complete or fail). An ack records the
// output and moves on (the rule's next, else the step's; complete or no next: the run
// completes); a rule's fail fails the run with that reason; a drop cancels it. While
// compensating, any finish of a compensation enters the next one, or ends the run.
func (g *Graph) Finish(st *State, v *engine.Run, attempt int, label string, now time.Time) Transition {
	if !st.Status.Active() || st.Step == "" {
		return noop(st, now)
	}
	t := base(st, now)
	t.Step = st.Step
	ev := Event{Step: st.Step, Visit: st.Visit, Attempt: attempt, Outcome: label, At: now}
	var output json.RawMessage
	if v != nil && v.HasOutput && label == engine.OutcomeAck.String() {
		b, err := json.Marshal(v.Output)
		if err != nil {
			ev.Error = fmt.Sprintf("output: %v", err)
			t.History = append(t.History, ev)
			return g.failRun(st, t, ev.Error)
		}
		output = b
	}
	if v != nil && v.Fail != "" {
		ev.Error = v.Fail
		t.History = append(t.History, ev)
		return g.failRun(st, t, v.Fail)
	}
	if st.Status == Compensating {
		t.History = append(t.History, ev)
		t.Output, t.HasOutput = output, output != nil
		return g.compensateNext(t, st.Step, st.Visit, now)
	}
	if label == engine.OutcomeDrop.String() {
		t.History = append(t.History, ev)
		return g.cancel(st, t, now)
	}
	next := g.Step(st.Step).nextOf()
	if v != nil && v.Next != "" {
		next = v.Next
	}
	if v != nil && v.Complete {
		next = ""
	}
	if next != "" && g.Step(next) == nil {
		// config checks a rule's next at load: this guards a graph built by other means.
		ev.Error = fmt.Sprintf("next names no step: %q", next)
		t.History = append(t.History, ev)
		return g.failRun(st, t, ev.Error)
	}
	t.History = append(t.History, ev)
	t.Output, t.HasOutput = output, output != nil
	t.Finished = append(t.Finished, st.Step)
	if next == "" {
		t.Error = ""
		end(&t, Completed, st.Step, st.Visit)
	} else {
		g.enter(&t, next, now)
	}
	return t
}

func (s *StepDef) nextOf() string {
	if s == nil {
		return ""
	}
	return s.Next
}

// compensateNext enters the next pending compensation after one finished, or ends the run
// with its Ending status.
func (g *Graph) compensateNext(t Transition, step string, visit int, now time.Time) Transition {
	if len(t.Pending) == 0 {
		ending := t.Ending
		if ending == "" {
			ending = Failed
		}
		end(&t, ending, step, visit)
		return t
	}
	next := t.Pending[0]
	t.Pending = t.Pending[1:]
	g.enter(&t, next, now)
	return t
}

// compensations are the compensate steps of the finished steps, in the reverse order of
// finishing.
func (g *Graph) compensations(finished []string) []string {
	var out []string
	for i := len(finished) - 1; i >= 0; i-- {
		if s := g.Step(finished[i]); s != nil && s.Compensate != "" {
			out = append(out, s.Compensate)
		}
	}
	return out
}

// Fail is a visit of st's current step that reached the dead letter with reason.
func (g *Graph) Fail(st *State, attempt int, reason string, now time.Time) Transition {
	if !st.Status.Active() || st.Step == "" {
		return noop(st, now)
	}
	t := base(st, now)
	t.History = append(t.History, Event{Step: st.Step, Visit: st.Visit, Attempt: attempt,
		Outcome: engine.OutcomeDeadLetter.String(), At: now, Error: reason})
	return g.failRun(st, t, reason)
}

// failRun fails the run at st's current step with reason: a failure while compensating is
// compensation_failed; under "compensate" the finished steps' compensations run first; else
// (or with none to run) the run is failed at once, keeping its state.
func (g *Graph) failRun(st *State, t Transition, reason string) Transition {
	t.Error = reason
	if st.Status == Compensating {
		end(&t, CompensationFailed, st.Step, st.Visit)
		return t
	}
	t.FailedStep = st.Step
	if g.OnFailure != OnFailureStop {
		if pending := g.compensations(t.Finished); len(pending) > 0 {
			t.Status = Compensating
			t.Compensated = true
			t.Ending = Failed
			t.Pending = pending[1:]
			g.enter(&t, pending[0], t.At)
			return t
		}
	}
	end(&t, Failed, st.Step, st.Visit)
	return t
}

// Cancel cancels an active run (runs cancel, a drop): compensations first under "compensate".
// A run already compensating goes on compensating (it ends as it was going to); a finished
// run is not changed (NoVisit).
func (g *Graph) Cancel(st *State, now time.Time) Transition {
	if st.Status != Running && st.Status != Waiting {
		return noop(st, now)
	}
	return g.cancel(st, base(st, now), now)
}

func (g *Graph) cancel(st *State, t Transition, now time.Time) Transition {
	if g.OnFailure != OnFailureStop {
		if pending := g.compensations(t.Finished); len(pending) > 0 {
			t.Status = Compensating
			t.Compensated = true
			t.Ending = Cancelled
			t.Pending = pending[1:]
			g.enter(&t, pending[0], now)
			return t
		}
	}
	end(&t, Cancelled, st.Step, st.Visit)
	return t
}

// TimedOut is st's current step's timeout firing: on to on_timeout, or the run fails with
// reason "timeout" (while compensating: compensation_failed).
func (g *Graph) TimedOut(st *State, now time.Time) Transition {
	if !st.Status.Active() || st.Step == "" {
		return noop(st, now)
	}
	t := base(st, now)
	t.History = append(t.History, Event{Step: st.Step, Visit: st.Visit, Outcome: EventTimeout, At: now})
	if s := g.Step(st.Step); s != nil && s.OnTimeout != "" && st.Status != Compensating {
		t.Status = Running // a waiting run runs on
		g.enter(&t, s.OnTimeout, now)
		return t
	}
	return g.failRun(st, t, "timeout")
}

// ErrNotRetryable is Retry's error for a run that is not failed or was compensated.
var ErrNotRetryable = errors.New("run is not failed, or was compensated")

// Retryable says why st cannot be retried (SPEC §16: only a failed run that was not
// compensated resumes), wrapping ErrNotRetryable; nil when it can.
func (st *State) Retryable() error {
	switch {
	case st.Status != Failed:
		return notRetryable(fmt.Sprintf("run %q is %s, not failed: only a failed run is retried", st.ID, st.Status))
	case st.Compensated:
		return notRetryable(fmt.Sprintf("run %q was compensated: its finished steps were undone, so it cannot resume", st.ID))
	case st.FailedStep == "":
		return notRetryable(fmt.Sprintf("run %q names no failed step", st.ID))
	}
	return nil
}

// notRetryable is Retryable's reason, which is ErrNotRetryable.
type notRetryable string

func (e notRetryable) Error() string        { return string(e) }
func (e notRetryable) Is(target error) bool { return target == ErrNotRetryable }

// Retry resumes a failed, uncompensated run at the step that failed, with fresh attempts. The
// run is active again: a store that set its keys to expire when it failed keeps them now.
func (g *Graph) Retry(st *State, now time.Time) (Transition, error) {
	if err := st.Retryable(); err != nil {
		return Transition{}, err
	}
	if g.Step(st.FailedStep) == nil {
		return Transition{}, fmt.Errorf("retry run %q: step %q is no longer in workflow %q", st.ID, st.FailedStep, g.Name)
	}
	t := base(st, now)
	t.Status = Running
	t.Error = ""
	t.FailedStep = ""
	g.enter(&t, st.FailedStep, now)
	return t, nil
}

// Stale reports whether a step message of visit is stale for this run: not its current visit,
// or the run is not active any more.
func (st *State) Stale(visit int) bool {
	return visit != st.Visit || !st.Status.Active()
}

// Apply applies t to st as a store does: false (nothing changed) when st's visit is not
// t.Visit.
func (st *State) Apply(t Transition) bool {
	if t.Visit != st.Visit || t.Run != st.ID {
		return false
	}
	if t.HasOutput {
		if st.Steps == nil {
			st.Steps = map[string]json.RawMessage{}
		}
		st.Steps[t.Step] = t.Output
	}
	st.History = append(st.History, t.History...)
	st.Status = t.Status
	switch {
	case t.Enter != "":
		st.Step = t.Enter
		st.Visit++
	case t.Done:
		st.Step = ""
	}
	st.Finished = slices.Clone(t.Finished)
	st.Pending = slices.Clone(t.Pending)
	st.Ending = t.Ending
	st.Error = t.Error
	st.FailedStep = t.FailedStep
	st.Compensated = t.Compensated
	st.UpdatedAt = t.At
	return true
}

// Path is the steps that finished, in the order they finished, compensations included (SPEC §16
// tests' expect path): the steps of the history's ack events.
func (st *State) Path() []string {
	var p []string
	for _, e := range st.History {
		if e.Outcome == engine.OutcomeAck.String() && e.Step != "" && e.Error == "" {
			p = append(p, e.Step)
		}
	}
	return p
}

// Visit is what a step source puts in engine.Run.State for the step handler and its own
// settlement: the run as read with the delivery, and whether the delivery's visit is stale.
type Visit struct {
	State *State
	Stale bool
	// Label is set by the step handler (NewStepHandler) from its inner handler's outcome: "ack"
	// or "drop" (engine.OutcomeAck, engine.OutcomeDrop), "" for any other. The step source's
	// settlement of an ActAck passes it to Graph.Finish.
	Label string
	// Fan is set by a for_each step's handler (NewForEachHandler): which of the step's
	// messages the delivery is, and what its settlement writes.
	Fan *Fan
	// Park is set by a wait step's handler for a visit that has no event yet: its settlement
	// parks the run (or hands a kept event on) and acknowledges the delivery, in one script
	// with the batch's other settlements.
	Park bool
}
