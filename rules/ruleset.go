package rules

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"

	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/vm"

	"github.com/flowrun/flowrun/codec"
	"github.com/flowrun/flowrun/engine"
)

// Rule is one `rule` block.
type Rule struct {
	Name    string
	When    *Condition   // nil means true
	Outcome *OutcomeExpr // nil means ack
	Emits   []EmitSpec
	// In a workflow step of rules alone (SPEC §16), a rule may choose the way on; they are
	// written into the delivery's engine.Run when this rule decides.
	Next     string // a step name, checked at load; "" keeps the step's
	Complete bool   // the run completes after this step
	Output   *Value // what the step records; nil: nothing
	Fail     *Value // the run fails with this reason (a string); nil: it does not
}

// EmitSpec is one `emit` block of a rule.
type EmitSpec struct {
	Target  engine.Target     // resolved by config
	Key     string            // literal destination key
	Payload *Value            // nil: the delivery's payload unchanged
	Headers map[string]*Value // results written as strings; a nil result is not written
	// ForwardHeaders writes the delivery's headers too, but flowrun's own x- headers (SPEC §7);
	// Headers override them.
	ForwardHeaders bool
	HeaderOrder    []string // optional: evaluation order of Headers (which error is reported first)
}

// RuleSet is a pipeline's rules. Rules are tried in order; the first whose When holds decides.
type RuleSet struct {
	Rules     []Rule
	Otherwise *OutcomeExpr // nil: ack when no rule matches
}

var (
	_ engine.Handler = (*RuleSet)(nil)
	_ engine.Inliner = (*RuleSet)(nil)
)

// Inline implements engine.Inliner: rules do no I/O (emits are written by the settler), so the
// engine may run them on the source's goroutine.
func (rs *RuleSet) Inline() bool { return true }

// Handle implements engine.Handler. A run-time evaluation error returns retry with Err set.
func (rs *RuleSet) Handle(_ context.Context, d *engine.Delivery) engine.Result {
	res, _ := rs.Evaluate(d)
	return res
}

// Evaluate is Handle plus the name of the rule that decided ("" when none did). When an
// expression fails, the name is that of the rule being evaluated ("" for otherwise), and the
// result is retry with Err naming the rule and the failing part.
func (rs *RuleSet) Evaluate(d *engine.Delivery) (engine.Result, string) {
	s := state{d: d}
	for i := range rs.Rules {
		r := &rs.Rules[i]
		if r.When != nil {
			ok, err := r.When.eval(&s)
			if err != nil {
				return failed(r.Name, "when", err), r.Name
			}
			if !ok {
				continue
			}
		}
		out := engine.Ack()
		if r.Outcome != nil {
			var err error
			if out, err = r.Outcome.eval(&s); err != nil {
				return failed(r.Name, "outcome", err), r.Name
			}
		}
		var emits []engine.Emit
		if len(r.Emits) > 0 {
			emits = make([]engine.Emit, 0, len(r.Emits))
			for j := range r.Emits {
				e, err := r.Emits[j].build(&s)
				if err != nil {
					return failed(r.Name, fmt.Sprintf("emit %d (%s %q)", j+1, r.Emits[j].Target.Kind, r.Emits[j].Key), err), r.Name
				}
				emits = append(emits, e)
			}
		}
		if d.Run != nil {
			if res, failedRule := r.decideRun(&s); failedRule {
				return res, r.Name
			}
		}
		return engine.Result{Outcome: out, Emits: emits}, r.Name
	}
	if rs.Otherwise != nil {
		out, err := rs.Otherwise.eval(&s)
		if err != nil {
			return engine.Result{Outcome: engine.Retry(), Err: &RuleError{Part: "otherwise", Err: err}}, ""
		}
		return engine.Result{Outcome: out}, ""
	}
	return engine.Result{Outcome: engine.Ack()}, ""
}

// decideRun writes what the deciding rule says of the run (SPEC §16: next, complete, output,
// fail) into the delivery's engine.Run; nothing is written when an expression fails, which is
// then the result (retry with Err) and true.
func (r *Rule) decideRun(s *state) (engine.Result, bool) {
	var output any
	if r.Output != nil {
		v, err := r.Output.run(s)
		if err != nil {
			return failed(r.Name, "output", err), true
		}
		output = v
	}
	var reason string
	if r.Fail != nil {
		v, err := r.Fail.run(s)
		if err != nil {
			return failed(r.Name, "fail", err), true
		}
		str, ok := v.(string)
		if !ok {
			return failed(r.Name, "fail", fmt.Errorf("expected a string (the reason), got %s", describe(v))), true
		}
		reason = str
	}
	run := s.d.Run
	if r.Next != "" {
		run.Next = r.Next
	}
	if r.Complete {
		run.Complete = true
	}
	if r.Output != nil {
		run.Output, run.HasOutput = output, true
	}
	if r.Fail != nil {
		run.Fail = reason
	}
	return engine.Result{}, false
}

func failed(rule, part string, err error) engine.Result {
	return engine.Result{Outcome: engine.Retry(), Err: &RuleError{Rule: rule, Part: part, Err: err}}
}

// build computes one emitted message.
func (e *EmitSpec) build(s *state) (engine.Emit, error) {
	m := &engine.Message{Key: e.Key}
	if e.ForwardHeaders {
		m.Headers = engine.ForwardHeaders(s.d.Headers, len(e.Headers))
	} else {
		m.Headers = make(map[string]string, len(e.Headers))
	}
	if e.Payload == nil {
		m.Payload, m.Form = s.d.Payload, s.d.Form
	} else {
		v, err := e.Payload.run(s)
		if err != nil {
			return engine.Emit{}, fmt.Errorf("payload: %w", err)
		}
		if m.Payload, err = encodePayload(v); err != nil {
			return engine.Emit{}, fmt.Errorf("payload: %w", err)
		}
	}
	// HeaderOrder first, so which failing header is reported is deterministic; then any header
	// it does not list (the config lists them all; a hand-built spec may not).
	for _, name := range e.HeaderOrder {
		if x := e.Headers[name]; x != nil {
			if err := setHeader(m, s, name, x); err != nil {
				return engine.Emit{}, err
			}
		}
	}
	if len(e.HeaderOrder) < len(e.Headers) {
		for name, x := range e.Headers {
			if x == nil || slices.Contains(e.HeaderOrder, name) {
				continue
			}
			if err := setHeader(m, s, name, x); err != nil {
				return engine.Emit{}, err
			}
		}
	}
	return engine.Emit{Target: e.Target, Message: m}, nil
}

// setHeader writes one emit header; a nil result writes none, and removes a forwarded one of
// that name (SPEC §7).
func setHeader(m *engine.Message, s *state, name string, x *Value) error {
	v, err := x.run(s)
	if err != nil {
		return fmt.Errorf("header %q: %w", name, err)
	}
	if v == nil {
		delete(m.Headers, name)
		return nil
	}
	if m.Headers[name], err = headerString(v); err != nil {
		return fmt.Errorf("header %q: %w", name, err)
	}
	return nil
}

// encodePayload writes a string as its bytes and any other value as its JSON text.
func encodePayload(v any) ([]byte, error) {
	switch v := v.(type) {
	case string:
		return []byte(v), nil
	case []byte:
		return bytes.Clone(v), nil
	}
	return marshalJSON(v)
}

// headerString writes a header value: strings as they are, numbers in decimal (no exponent when
// integral), booleans as true/false, durations and outcomes as Go prints them (1m30s,
// retry_after(5s)), nil as "" (emits leave a nil header out before asking), and anything else (arrays, maps) as its JSON text.
func headerString(v any) (string, error) {
	switch v := v.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case int:
		return strconv.Itoa(v), nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case float64:
		return formatFloat(v), nil
	case fmt.Stringer: // durations, outcomes
		return v.String(), nil
	}
	b, err := marshalJSON(v)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

func formatFloat(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e21 {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// state is one delivery's evaluation: the environment, filled lazily, and its boxed copy.
type state struct {
	d                    *engine.Delivery
	env                  env
	boxed                any // env boxed by value; rebuilt when a lazy field is filled
	filled               bool
	havePayload, haveRaw bool
}

func (s *state) prepare(p *program) any {
	if !s.filled {
		d := s.d
		s.env = env{
			Headers:       d.Headers,
			Key:           d.Key,
			ID:            d.ID,
			Attempt:       d.Attempt,
			DeliveryCount: d.DeliveryCount,
			IdleMS:        int(d.IdleMS),
			Ack:           engine.Ack(),
			Drop:          engine.Drop(),
			Retry:         engine.Retry(),
			runEnv:        runEnvOf(d),
		}
		s.filled = true
		s.boxed = nil
	}
	if p.usesRaw && !s.haveRaw {
		s.env.Raw = string(s.d.Payload)
		s.haveRaw = true
		s.boxed = nil
	}
	if p.usesPayload && !s.havePayload {
		if s.d.Decoded == nil {
			cacheDecoded(s.d, decodePayload(s.d.Payload, &s.env, s.haveRaw))
		}
		s.env.Payload = decoded(s.d)
		s.havePayload = true
		s.boxed = nil
	}
	if s.boxed == nil {
		// Boxing by value makes the VM's reflect reads non-addressable, so fetching a string
		// or int field does not copy it to the heap; one allocation per fill instead of one
		// per field read.
		s.boxed = s.env
	}
	return s.boxed
}

// nullPayload marks, in Delivery.Decoded, a payload that decoded to JSON null.
type nullPayload struct{}

// decoded returns d's payload as expressions see it, decoding it on the first call for d.
func decoded(d *engine.Delivery) any {
	switch v := d.Decoded.(type) {
	case nil:
		return cacheDecoded(d, decodePayload(d.Payload, nil, false))
	case nullPayload:
		return nil
	default:
		return v
	}
}

// cacheDecoded keeps v, d's decoded payload, in d.Decoded, and returns it.
func cacheDecoded(d *engine.Delivery, v any) any {
	// Kept as the interface it already is: no allocation (a JSON null as a marker).
	d.Decoded = v
	if v == nil {
		d.Decoded = nullPayload{}
	}
	return v
}

// decodePayload returns the JSON value of b, or b as a string when it is not valid JSON.
func decodePayload(b []byte, e *env, haveRaw bool) any {
	if m, ok := codec.DecodeFlat(b); ok {
		return m
	}
	var v any
	if len(b) > 0 && json.Unmarshal(b, &v) == nil {
		return v
	}
	if haveRaw {
		return e.Raw
	}
	return string(b)
}

var vmPool = sync.Pool{New: func() any { return new(vm.VM) }}

func (p *program) run(s *state) (any, error) {
	out, err := p.runPlain(s)
	if err != nil {
		return nil, p.runError(err, s)
	}
	return out, nil
}

// runPlain runs the program, its error as the VM gives it.
func (p *program) runPlain(s *state) (any, error) {
	if p.direct != nil {
		return p.direct(s.d), nil
	}
	envAny := s.prepare(p)
	m := vmPool.Get().(*vm.VM)
	out, err := m.Run(p.prog, envAny)
	vmPool.Put(m)
	return out, err
}

// runError is runError, explained (the failing operation's types and values) and located in
// the file when config set a Locator.
func (p *program) runError(err error, s *state) error {
	out := runError(p.src, err)
	ee, ok := out.(*EvalError)
	if !ok {
		return out
	}
	if fe, ok := err.(*file.Error); ok {
		p.explain(ee, fe.From, s)
	}
	if p.locate != nil {
		ee.At = p.locate(ee.Line, ee.Column)
	}
	return ee
}

func (c *Condition) eval(s *state) (bool, error) {
	v, err := c.run(s)
	if err != nil {
		return false, err
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("expected bool, got %s", describe(v))
	}
	return b, nil
}

func (o *OutcomeExpr) eval(s *state) (engine.Outcome, error) {
	if o.konst != nil {
		return *o.konst, nil
	}
	v, err := o.run(s)
	if err != nil {
		return engine.Outcome{}, err
	}
	out, ok := v.(engine.Outcome)
	if !ok {
		return engine.Outcome{}, fmt.Errorf("expected an outcome, got %s", describe(v))
	}
	return out, nil
}

func describe(v any) string {
	if v == nil {
		return "nil"
	}
	return fmt.Sprintf("%T", v)
}

// EvalError is a run-time evaluation error with its 1-based position in the expression text.
type EvalError struct {
	Line, Column int
	Message      string
	Err          error // expr's own error
	// At is "FILE:LINE:COL" of the failing part, when the expression has a Locator.
	At string
	// Reason says what went wrong with the types and short values involved (`payload.amount is
	// a string ("abc"), compared with a number`); Kind is the same without the values. Both
	// are "" when the error is not about an operation's operand types.
	Reason, Kind string
}

func (e *EvalError) Error() string { return fmt.Sprintf("%s (at %d:%d)", e.Message, e.Line, e.Column) }
func (e *EvalError) Unwrap() error { return e.Err }

func runError(src string, err error) error {
	fe, ok := err.(*file.Error)
	if !ok {
		return err
	}
	pos := errorAt(src, fe.From, "")
	return &EvalError{Line: pos.Line, Column: pos.Column, Message: cleanMessage(fe.Message), Err: err}
}
