package workflow

import (
	"encoding/json"
	"time"

	"github.com/flowrun/flowrun/engine"
)

// Wait steps (SPEC §16 "Waiting"): a run that enters one is parked, status Waiting, until an
// event whose correlate value is its id arrives on the wait's source; the event's payload is the
// step's output. An event that arrives first is kept for the run (a store's own business) and
// finishes the step the moment the run enters it. Parking holds nothing in the process: the run
// is only its record in the store.

// Park is st's current step, a wait, parking the run: it is Waiting until its event (Arrive) or
// its timeout (TimedOut). Nothing else changes, and the history records nothing (the visit has
// not settled).
func (g *Graph) Park(st *State, now time.Time) Transition {
	if st.Status != Running || st.Step == "" {
		return noop(st, now)
	}
	t := base(st, now)
	t.Status = Waiting
	return t
}

// Arrive is the event a run waits for at its current step: the step finishes with payload (JSON)
// as its output, as a handler's ack would finish it, and the run runs on. attempt is the event
// delivery's.
func (g *Graph) Arrive(st *State, payload json.RawMessage, attempt int, now time.Time) Transition {
	if st.Status != Waiting && st.Status != Running {
		return noop(st, now)
	}
	run := &engine.Run{Output: payload, HasOutput: true}
	t := g.Finish(st, run, attempt, engine.OutcomeAck.String(), now)
	if t.Status == Waiting {
		t.Status = Running
	}
	return t
}

// WaitingAt reports whether the run is parked at step (its current visit's).
func (st *State) WaitingAt(step string) bool {
	return st.Status == Waiting && st.Step == step
}

// PayloadJSON is a message's payload as a run keeps it (a start's input, a wait's event as the
// step's output): its JSON, or a JSON string of its bytes when it is not JSON.
func PayloadJSON(p []byte) json.RawMessage {
	if len(p) > 0 && json.Valid(p) {
		return json.RawMessage(p)
	}
	b, _ := json.Marshal(string(p))
	return b
}
