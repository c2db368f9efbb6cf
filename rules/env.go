// Package rules compiles and evaluates the expression rules of SPEC §7 with expr-lang.
//
// Every expression is compiled once, at load time, against a typed environment, so an unknown
// name or a type error is a config error with its position. The environment is:
//
//	payload         the JSON-decoded payload (any), or the payload as a string when it is not
//	                valid JSON; decoded at most once per delivery, and only when an expression
//	                that is evaluated uses it
//	raw             the payload as a string
//	headers         map[string]string
//	key, id         strings: the message's key and id
//	attempt         int: 1 for a first delivery
//	delivery_count  int: claiming/reclaim only, as in x-delivery-count
//	idle_ms         int: claiming/reclaim only, as in x-idle-ms
//	input           in a workflow step (SPEC §16): the run's input (decoded JSON); else nil
//	steps           in a workflow step: each finished step's output by step name; else nil
//	run             in a workflow step: id, workflow, step, visit, started_at; else all zero
//	item, index     in a for_each step: the element and its index; else nil and 0
//	ack, drop, retry        outcome values, also callable: ack(), drop(), retry()
//	retry_after(d)          an outcome; d is a duration string ('5s') or a duration value
//	backoff(base, max)      a duration: uniformly random in [0, min(max, base*2^(attempt-1))]
//	                        (exponential on attempt, full jitter); base and max are duration
//	                        strings or durations
//
// plus expr-lang's built-in functions (len, duration, upper, ...). Programs are shared; each
// evaluation borrows a vm.VM from a pool, so the steady state allocates only what the payload,
// the emitted messages and a few boxed values need.
package rules

import (
	"time"

	"github.com/flowrun/flowrun/engine"
)

// env is the typed expression environment. The expr tags are the names expressions use.
// It is passed to the VM boxed by value, so reflect reads its fields without copying them.
type env struct {
	Payload       any               `expr:"payload"`
	Raw           string            `expr:"raw"`
	Headers       map[string]string `expr:"headers"`
	Key           string            `expr:"key"`
	ID            string            `expr:"id"`
	Attempt       int               `expr:"attempt"`
	DeliveryCount int               `expr:"delivery_count"`
	IdleMS        int               `expr:"idle_ms"`
	Ack           engine.Outcome    `expr:"ack"`
	Drop          engine.Outcome    `expr:"drop"`
	Retry         engine.Outcome    `expr:"retry"`
	// The workflow names sit behind a pointer, so a pipeline's environment (boxed once per
	// delivery) grows by one word, not by all of them; outside a workflow it is noRun.
	*runEnv
}

// runEnv is what an expression in a workflow step sees of its run (SPEC §16), from the
// delivery's engine.Run.
type runEnv struct {
	Input any            `expr:"input"`
	Steps map[string]any `expr:"steps"`
	Run   runInfo        `expr:"run"`
	Item  any            `expr:"item"`
	Index int            `expr:"index"`
}

// runInfo is the `run` object.
type runInfo struct {
	ID        string    `expr:"id"`
	Workflow  string    `expr:"workflow"`
	Step      string    `expr:"step"`
	Visit     int       `expr:"visit"`
	StartedAt time.Time `expr:"started_at"`
}

// noRun is the environment's run outside a workflow: every name nil or zero. Shared and never
// written; the VM only reads it.
var noRun = &runEnv{}

// runEnvOf returns the run view of d for the environment.
func runEnvOf(d *engine.Delivery) *runEnv {
	r := d.Run
	if r == nil {
		return noRun
	}
	return &runEnv{
		Input: r.Input,
		Steps: r.Steps,
		Run:   runInfo{ID: r.ID, Workflow: r.Workflow, Step: r.Step, Visit: r.Visit, StartedAt: r.StartedAt},
		Item:  r.Item,
		Index: r.Index,
	}
}
