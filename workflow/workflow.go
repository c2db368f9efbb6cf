// Package workflow is the meaning of a run (SPEC §16): a workflow's graph, the run record, and
// the transitions a step visit's settlement makes (the next step, completion, failure, the
// order of compensations, cancellation, a timeout, a retry). It decides and speaks no wire
// command: a Store applies a Transition atomically, conditional on the run's visit number
// (package transports/redisrun in Redis, MemStore in the process for `flowrun test`).
package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Status is a run's status.
type Status string

const (
	Running            Status = "running"
	Waiting            Status = "waiting"
	Compensating       Status = "compensating"
	Completed          Status = "completed"
	Failed             Status = "failed"
	CompensationFailed Status = "compensation_failed"
	Cancelled          Status = "cancelled"
)

// Active reports whether a run with this status may still move (it never expires).
func (s Status) Active() bool { return s == Running || s == Waiting || s == Compensating }

// Statuses lists every status, in SPEC §16's order.
var Statuses = []Status{Running, Waiting, Compensating, Completed, Failed, CompensationFailed, Cancelled}

// History outcomes of the run's own events (SPEC §16 runs show): beside them, a visit's entry
// carries the §10 label of its delivery (ack, retry, dead_letter, ...).
const (
	EventStarted   = "started"
	EventCompleted = "completed"
	EventFailed    = "failed"
	EventCancelled = "cancelled"
	EventTimeout   = "timeout"
)

// Graph is a workflow as the runtime needs it: its steps and how they join, known at load time.
type Graph struct {
	Name      string
	Steps     []StepDef // declaration order; Steps[0] runs first
	OnFailure string    // "compensate" or "stop"
	Retention time.Duration
}

// StepDef is one step of a Graph.
type StepDef struct {
	Name       string
	Next       string // "" : the run completes after it
	Compensate string // the step that undoes it, "" none
	OnTimeout  string // "" : a timeout fails the run
	Timeout    time.Duration
	Delay      time.Duration
	ForEach    bool // a fan-out step (foreach.go): its visit runs the handler once per element
	// Wait: a wait step (SPEC §16 "Waiting"), finished by its event (Graph.Arrive); KeepFor is
	// how long an event that came before its run is kept for it.
	Wait    bool
	KeepFor time.Duration
}

// Event is one entry of a run's history.
type Event struct {
	Step    string    `json:"step"`
	Visit   int       `json:"visit"`
	Attempt int       `json:"attempt"`
	Outcome string    `json:"outcome"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
}

// State is a run record.
type State struct {
	ID       string
	Workflow string
	Status   Status
	Step     string // the current step ("" once finished)
	Visit    int    // the current visit; a step message of another visit is stale
	Input    json.RawMessage
	Steps    map[string]json.RawMessage // finished steps' outputs
	Error    string
	// Finished lists the steps that finished outside compensation, in the order they
	// finished: compensations run in its reverse.
	Finished []string
	// Pending are the compensation steps still to run while Compensating; Ending is the
	// status the run ends with after them (failed or cancelled).
	Pending []string
	Ending  Status
	// FailedStep is the step a failed run failed at (runs retry resumes there); Compensated
	// says compensations ran, so it cannot be retried.
	FailedStep  string
	Compensated bool
	Fingerprint string
	TraceParent string // the run's trace context (SPEC §14), "" without tracing
	StartedAt   time.Time
	UpdatedAt   time.Time
	History     []Event
}

// Transition is what one settlement does to a run, applied atomically by a Store only while the
// run's visit is still Visit (else it is stale: the store acknowledges and changes nothing).
type Transition struct {
	Run   string
	Visit int
	// Step and Output: the output recorded for Step when HasOutput.
	Step      string
	Output    json.RawMessage
	HasOutput bool
	History   []Event // appended in order
	Status    Status
	// Enter is the step the run enters with visit Visit+1 ("" none): its message is written
	// to its stream, after EnterDelay when set (a sorted set, moved when due), and a timeout
	// registered at EnterDeadline when set.
	Enter         string
	EnterDelay    time.Duration
	EnterDeadline time.Time
	Finished      []string // the run's Finished after this transition
	Pending       []string
	Ending        Status
	Error         string
	FailedStep    string
	Compensated   bool
	At            time.Time
	// Done: the run ended (completed, failed, compensation_failed, cancelled): its keys
	// expire after the graph's retention and it leaves the active counts.
	Done bool
}

// Store keeps runs. Every method is atomic with respect to the others.
type Store interface {
	// Create writes a new run and enters its first step; false when a run with that id exists.
	Create(ctx context.Context, st *State, t Transition) (bool, error)
	// Apply applies t; false when the run's visit is no longer t.Visit (nothing changed).
	Apply(ctx context.Context, t Transition) (bool, error)
	// Get reads a run; ErrNoRun when there is none.
	Get(ctx context.Context, id string) (*State, error)
	// List reads runs newest first, of one status when status is not "".
	List(ctx context.Context, status Status, limit int) ([]*State, error)
}

// ErrNoRun is returned for a run id that names no run.
var ErrNoRun = errors.New("no such run")
