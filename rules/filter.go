package rules

import (
	"fmt"
	"strconv"
	"time"

	"github.com/expr-lang/expr/vm"

	"github.com/flowrun/flowrun/engine"
)

// filterEnv is the environment of a dead-letter filter (`flowrun dlq --where`, SPEC §1): the
// rules' environment, filled from the dead letter, plus reason and failed_at.
//
//	payload, raw, headers   as in rules, from the dead letter
//	key                     the key the message failed on (x-original-key; the dead-letter
//	                        key when the header is missing)
//	id                      the dead letter's own id (a stream entry id; "" for a list)
//	attempt                 x-attempts: how many deliveries failed (0 when missing)
//	delivery_count, idle_ms as in x-delivery-count and x-idle-ms (0 when missing)
//	reason                  x-dead-letter-reason
//	failed_at               x-failed-at as a time (RFC 3339), compared with now() and
//	                        duration('1h'); the zero time when missing or not RFC 3339
type filterEnv struct {
	env                // the rules' environment, filled from the dead letter
	Reason   string    `expr:"reason"`
	FailedAt time.Time `expr:"failed_at"`
}

// Filter is a compiled dead-letter filter: a boolean expression over filterEnv.
type Filter struct {
	program
	budget uint // expr-lang's memory budget per evaluation; 0: its default
}

// SetMemoryBudget bounds what one evaluation may allocate in expr-lang's units (an element of
// a range, an array or a map, a byte of repeat): past it Match fails with "memory budget
// exceeded". 0 is expr-lang's default (1,000,000). The status page sets it for visitors' filters.
func (f *Filter) SetMemoryBudget(units uint) { f.budget = units }

// CompileFilter compiles a `flowrun dlq --where` expression, which must be boolean. Its
// errors are *Error, positioned inside src.
func CompileFilter(src string) (*Filter, error) {
	p, err := compile(src, kindFilter)
	if err != nil {
		return nil, err
	}
	return &Filter{program: p}, nil
}

// Match evaluates the filter on the dead letter m, whose Key is its dead-letter key and ID its
// own id. An evaluation error is an *EvalError.
func (f *Filter) Match(m *engine.Message) (bool, error) {
	h := m.Headers
	if h == nil {
		h = map[string]string{}
	}
	e := filterEnv{
		env: env{
			Headers:       h,
			Key:           m.Key,
			ID:            m.ID,
			Attempt:       atoi(h[engine.HeaderAttempts]),
			DeliveryCount: atoi(h[engine.HeaderDeliveryCount]),
			IdleMS:        atoi(h[engine.HeaderIdleMS]),
			Ack:           engine.Ack(),
			Drop:          engine.Drop(),
			Retry:         engine.Retry(),
			runEnv:        noRun,
		},
		Reason: h[engine.HeaderDeadLetterReason],
	}
	if k := h[engine.HeaderOriginalKey]; k != "" {
		e.Key = k
	}
	if t, err := time.Parse(time.RFC3339Nano, h[engine.HeaderFailedAt]); err == nil {
		e.FailedAt = t
	}
	if f.usesRaw {
		e.Raw = string(m.Payload)
	}
	if f.usesPayload {
		e.Payload = decodePayload(m.Payload, &e.env, f.usesRaw)
	}
	v := vmPool.Get().(*vm.VM)
	v.MemoryBudget = f.budget
	out, err := v.Run(f.prog, e)
	v.MemoryBudget = 0 // the pool's VMs are the rules' too
	vmPool.Put(v)
	if err != nil {
		return false, runError(f.src, err)
	}
	b, ok := out.(bool)
	if !ok {
		return false, fmt.Errorf("expected bool, got %s", describe(out))
	}
	return b, nil
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
