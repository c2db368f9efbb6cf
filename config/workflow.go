package config

import (
	"encoding/json"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/flowrun/flowrun/internal/handlers"
	"github.com/flowrun/flowrun/rules"
)

// Workflow is a `workflow "NAME"` block (SPEC §16): a start source and steps that share a run.
// Every key of it lives under flowrun:{NAME}: in the redis block Redis.
type Workflow struct {
	Name      string
	File      string
	Redis     string        // the redis block, resolved at load time (required: runs live in Redis)
	RunID     *rules.Value  // run_id; nil: a new id (the start delivery's own id where it has one)
	OnFailure string        // "compensate" (default) or "stop"
	Retention time.Duration // how long a finished run is kept (default 7 days)
	// DeadLetter is the stream failed steps' messages go to (default flowrun:{NAME}:dead).
	DeadLetter string
	// Start is the pipeline that starts runs: its Source is the start block's source (group
	// defaulting to the workflow's name), its name "NAME"; Rules and Handler are nil (the
	// runtime starts runs).
	Start *Pipeline
	// Steps in declaration order: Steps[0] runs first.
	Steps     []*Step
	DeclRange hcl.Range

	fingerprint     string
	redisBlocks     []string
	redisRange      hcl.Range // the redis attribute's value, for an unknown name
	deadLetterRange hcl.Range // the dead_letter attribute's value, when written
}

// Step is a `step "NAME"` block of a workflow.
type Step struct {
	Name string
	// Pipeline holds what a step shares with a pipeline: its name ("WORKFLOW/STEP"), Rules or
	// Handler, Concurrency, MaxAttempts, ShutdownTimeout, MaxHeld, Flow, CanRetry, DeadLetter
	// (the workflow's). Its Source is nil: the runtime reads the step's own stream.
	Pipeline *Pipeline
	Payload  *rules.Value // what the handler gets; nil: the run's input
	// Next, Compensate and OnTimeout name steps of the same workflow ("" none), checked at load.
	Next       string
	Compensate string
	OnTimeout  string
	Timeout    time.Duration // 0: none
	Delay      time.Duration // 0: none
	// Choice: the step has rules and no handler, so its rules may set next, complete, output
	// and fail (rules.Rule).
	Choice bool
	// Wait is a wait step's wait block (SPEC §16 "Waiting", workflow_wait.go), nil for any
	// other step.
	Wait *WaitSpec
	// ForEach is a fan-out step's list (SPEC §16 "Fan-out", foreach.go), nil for any other
	// step; MaxItems its most elements (DefaultMaxItems when not written).
	ForEach   *rules.Value
	MaxItems  int
	DeclRange hcl.Range

	refs []stepRef // the step names written in it, for the checks of the workflow's graph
}

// WaitSpec is a step's `wait {}` block (SPEC §16 "Waiting").
type WaitSpec struct {
	Source    *Source
	Correlate *rules.Value // on each event: the id of the run it belongs to
	// Pipeline reads the events: named "<workflow>.<step>" (WaitPipelineName, its consumer
	// group's default), Source the wait's source; Rules and Handler are nil (the runtime
	// matches each event to its run).
	Pipeline  *Pipeline
	DeclRange hcl.Range
}

// Workflow returns the workflow with that name, or nil.
func (c *Config) Workflow(name string) *Workflow {
	for _, w := range c.Workflows {
		if w.Name == name {
			return w
		}
	}
	return nil
}

// Step returns the step with that name, or nil.
func (w *Workflow) Step(name string) *Step {
	for _, s := range w.Steps {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// WorkflowTest is what a test block that names a workflow holds (SPEC §16 "Tests"): Test.Workflow
// is set and Test.Run points here.
type WorkflowTest struct {
	Input []byte // input { payload = ... }: a string as its bytes, any other value as its JSON text
	// Mocks by step, in order: the n-th answers the step's n-th handler call.
	Mocks  map[string][]*StepMock
	Events map[string][]json.RawMessage // event "STEP" { payload = ... }, for wait steps
	Expect WorkflowExpect
}

// StepMock is one `mock "STEP" {}` of a workflow test: a handler's own mock (Mock, made by the
// step's handler from the http/exec attributes), or Output and Outcome for any handler.
type StepMock struct {
	Step      string
	Mock      handlers.Mock   // nil when the block gave only output/outcome
	Output    json.RawMessage // output = VALUE; nil: none
	Outcome   string          // outcome = "..."; "": ack (or what Mock answers)
	DeclRange hcl.Range
}

// WorkflowExpect is a workflow test's `expect {}`: each field checked only when written.
type WorkflowExpect struct {
	Status    string
	Path      []string // the steps that finished, in order, compensations included
	HasPath   bool
	Output    map[string]json.RawMessage // a subset of the final steps map
	DeclRange hcl.Range
}
