package rules

import (
	"reflect"
	"time"

	"github.com/flowrun/flowrun/engine"
)

// Var is one name of the expression environment, for the reference in docs/.
type Var struct {
	Name string
	Type string // "any", "string", "int", "map of strings", "map", "object", "outcome", "time"
	Doc  string // Markdown
}

// Func is one function flowrun adds to expr-lang's own.
type Func struct {
	Name      string
	Signature string // as a user writes the call: "backoff(base, max)"
	Returns   string
	Doc       string // Markdown
}

// function is a Func with what compile registers: its implementation and the signatures the
// type checker sees.
type function struct {
	Func
	fn    func(args ...any) (any, error)
	types []any
}

// functions are the functions compile registers, and the reference lists. backoff's third
// argument is added by the patcher (attempt), so users write two.
var functions = []function{
	{
		Func: Func{Name: "retry_after", Signature: "retry_after(d)", Returns: "outcome",
			Doc: "Retry after the delay `d`, a duration string (`'5s'`) or a duration (`duration('5s')`, `backoff('1s', '5m')`). How the delay is kept depends on the source (see its page)."},
		fn: retryAfter,
		types: []any{
			new(func(string) engine.Outcome),
			new(func(time.Duration) engine.Outcome),
		},
	},
	{
		Func: Func{Name: "backoff", Signature: "backoff(base, max)", Returns: "duration",
			Doc: "A random delay for this `attempt`, exponential with full jitter: uniformly in [0, min(`max`, `base`·2^(attempt−1))]. `base` and `max` are duration strings or durations: `retry_after(backoff('1s', '5m'))`."},
		fn: backoff,
		types: []any{
			new(func(string, string, int) time.Duration),
			new(func(time.Duration, time.Duration, int) time.Duration),
			new(func(string, time.Duration, int) time.Duration),
			new(func(time.Duration, string, int) time.Duration),
		},
	},
}

// Functions lists the functions flowrun adds to expr-lang's built-ins (len, upper, duration,
// now, ...), in the order compile registers them.
func Functions() []Func {
	out := make([]Func, len(functions))
	for i, f := range functions {
		out[i] = f.Func
	}
	return out
}

// varDocs says what each name of the environments means; Variables and FilterVariables read the
// names and types from the env structs themselves, so a new field without a doc is caught by the
// tests (TestEveryVariableIsDocumented).
var varDocs = map[string]string{
	"payload":        "The payload decoded as JSON (objects, arrays, numbers ...), or the payload as a string when it is not JSON. A missing field is `nil`: write `(payload.amount ?? 0) > 10000` where a field may be absent.",
	"raw":            "The payload as a string.",
	"headers":        "The message's headers. A missing header reads as `''`, and on the left of `??` an empty header counts as missing: `headers['customer'] ?? 'unknown'`.",
	"key":            "The stream, list, channel or record key the message came from.",
	"id":             "The stream entry id, or the line number of a file record; `''` where messages have no id.",
	"attempt":        "The attempt number: 1 for a first delivery. `claiming` and `reclaim` count with Redis's delivery count, every other source with `x-retry-count` + 1.",
	"delivery_count": "`claiming` and `reclaim` only (else 0): as the header `x-delivery-count`.",
	"idle_ms":        "`claiming` and `reclaim` only (else 0): as the header `x-idle-ms`.",
	"ack":            "The outcome ack (also callable: `ack()`).",
	"drop":           "The outcome drop (also callable: `drop()`).",
	"retry":          "The outcome retry (also callable: `retry()`).",
	"input":          "In a workflow step: the run's input, the starting message's payload decoded as JSON (a string when it is not JSON). `nil` outside a workflow.",
	"steps":          "In a workflow step: each finished step's output by step name: `steps.charge.status`, `steps['await-shipment'].tracking`. A step that has not finished is missing (`nil`); `nil` outside a workflow.",
	"run":            "In a workflow step: the run, an object with `id`, `workflow`, `step` (this step), `visit` (the run's step visits, counted from 1; part of `x-idempotency-key`) and `started_at` (a time). Outside a workflow its fields are `''`, `0` and the zero time.",
	"item":           "In a `for_each` step: the list's element this handler call is for; else `nil`.",
	"index":          "In a `for_each` step: the element's index, from 0; else 0.",
	"reason":         "The dead letter's `x-dead-letter-reason`.",
	"failed_at":      "The dead letter's `x-failed-at` as a time, to compare with `now()` and `duration('1h')`: `now() - failed_at > duration('1h')`. The zero time when missing.",
}

// Variables lists the environment of rule expressions (when, outcome, otherwise, emit payload and
// headers), in declaration order.
func Variables() []Var { return varsOf(reflect.TypeFor[env]()) }

// FilterVariables lists what a dead-letter filter (`flowrun dlq --where`) sees besides
// Variables, in which key, id and attempt are read from the dead letter (x-original-key, its own
// id, x-attempts).
func FilterVariables() []Var { return varsOf(reflect.TypeFor[filterEnv]()) }

func varsOf(t reflect.Type) []Var {
	var out []Var
	for i := range t.NumField() {
		f := t.Field(i)
		name := f.Tag.Get("expr")
		if f.Type == reflect.TypeFor[*runEnv]() {
			out = append(out, varsOf(f.Type.Elem())...)
			continue
		}
		if f.Anonymous || name == "" {
			continue
		}
		out = append(out, Var{Name: name, Type: typeDoc(f.Type), Doc: varDocs[name]})
	}
	return out
}

func typeDoc(t reflect.Type) string {
	switch t {
	case reflect.TypeFor[engine.Outcome]():
		return "outcome"
	case reflect.TypeFor[time.Time]():
		return "time"
	case reflect.TypeFor[map[string]string]():
		return "map of strings"
	case reflect.TypeFor[map[string]any]():
		return "map"
	case reflect.TypeFor[runInfo]():
		return "object"
	}
	if t.Kind() == reflect.Interface {
		return "any"
	}
	return t.String()
}
