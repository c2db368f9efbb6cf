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

import "github.com/flowrun/flowrun/engine"

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
}
