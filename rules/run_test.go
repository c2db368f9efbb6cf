package rules

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/engine"
)

// stepDelivery is a delivery of the step "charge" of a run of the workflow "order".
func stepDelivery() *engine.Delivery {
	d := delivery(`{"sku":"A-1"}`, nil)
	d.Run = &engine.Run{
		ID: "o-7", Workflow: "order", Step: "check-charge", Visit: 3,
		StartedAt: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC),
		Input:     map[string]any{"sku": "A-1", "qty": 2.0, "recipients": []any{"a@x", "b@x"}},
		Steps: map[string]any{
			"charge":         map[string]any{"status": "declined", "id": "ch_1"},
			"await-shipment": map[string]any{"tracking": "T-9"},
		},
		Item: "b@x", Index: 1,
	}
	return d
}

func TestRunEnv(t *testing.T) {
	in, out := stepDelivery(), delivery(`{"sku":"A-1"}`, nil)
	tests := []struct {
		when string
		d    *engine.Delivery
	}{
		{"input.sku == 'A-1' && input.qty == 2", in},
		{"len(input.recipients) == 2", in},
		{"steps.charge.status == 'declined'", in},
		{"steps['await-shipment'].tracking == 'T-9'", in},
		{"'charge' in steps && !('notify' in steps)", in},
		{"run.id == 'o-7' && run.workflow == 'order' && run.step == 'check-charge' && run.visit == 3", in},
		{"run.started_at.Year() == 2026 && now() - run.started_at > duration('1h')", in},
		{"item == 'b@x' && index == 1", in},
		{"payload.sku == input.sku", in},
		{"(steps.refund.amount ?? 0) == 0", in},
		// Outside a workflow every name is there, nil or zero.
		{"input == nil && steps == nil && item == nil && index == 0", out},
		{"run.id == '' && run.workflow == '' && run.step == '' && run.visit == 0 && run.started_at.IsZero()", out},
		{"(steps.charge.status ?? 'none') == 'none'", out},
		{"(input.sku ?? 'none') == 'none'", out},
	}
	for _, tt := range tests {
		t.Run(tt.when, func(t *testing.T) {
			rs := &RuleSet{Rules: []Rule{{Name: "yes", When: mustCond(t, tt.when), Outcome: mustOutcome(t, "drop")}}}
			res, name := rs.Evaluate(tt.d)
			if res.Err != nil {
				t.Fatalf("err: %v", res.Err)
			}
			if name != "yes" || res.Outcome != engine.Drop() {
				t.Errorf("condition did not hold: rule %q, outcome %v", name, res.Outcome)
			}
		})
	}
}

func TestRunEnvCompileErrors(t *testing.T) {
	for src, want := range map[string]string{
		"run.nope == 1":   "1:5: run has no field nope",
		"run.visit + 'a'": "invalid operation",
		"index == 'a'":    "invalid operation",
	} {
		_, err := CompileCondition(src)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error with %q", src, err, want)
		}
	}
}

func TestRuleDecidesRun(t *testing.T) {
	rs := &RuleSet{Rules: []Rule{
		{Name: "declined", When: mustCond(t, "steps.charge.status == 'declined' && input.qty > 5"), Next: "refund"},
		{Name: "paid", Next: "await-shipment", Complete: true,
			Output: mustValue(t, "{'charge': steps.charge.id, 'visit': run.visit}"),
			Fail:   mustValue(t, "'declined at ' + run.step")},
	}}
	d := stepDelivery()
	res, name := rs.Evaluate(d)
	if res.Err != nil || name != "paid" || res.Outcome != engine.Ack() {
		t.Fatalf("got %q %+v", name, res)
	}
	r := d.Run
	want := map[string]any{"charge": "ch_1", "visit": 3}
	if r.Next != "await-shipment" || !r.Complete || !r.HasOutput || !reflect.DeepEqual(r.Output, want) || r.Fail != "declined at check-charge" {
		t.Errorf("run: next %q complete %v output %v (%v) fail %q", r.Next, r.Complete, r.Output, r.HasOutput, r.Fail)
	}

	// A rule that sets nothing writes nothing; a nil output is an output (JSON null).
	d = stepDelivery()
	rs = &RuleSet{Rules: []Rule{{Name: "plain"}}}
	if res, _ := rs.Evaluate(d); res.Err != nil || d.Run.HasOutput || d.Run.Next != "" || d.Run.Complete || d.Run.Fail != "" {
		t.Errorf("plain rule wrote the run: %+v %+v", res, d.Run)
	}
	rs = &RuleSet{Rules: []Rule{{Name: "null", Output: mustValue(t, "steps.nope")}}}
	if res, _ := rs.Evaluate(d); res.Err != nil || !d.Run.HasOutput || d.Run.Output != nil {
		t.Errorf("nil output: %+v %+v", res, d.Run)
	}

	// Outside a workflow there is no run to write.
	rs = &RuleSet{Rules: []Rule{{Name: "paid", Next: "x", Output: mustValue(t, "1"), Fail: mustValue(t, "2")}}}
	if res, _ := rs.Evaluate(delivery(`{}`, nil)); res.Err != nil || res.Outcome != engine.Ack() {
		t.Errorf("outside a workflow: %+v", res)
	}
}

func TestRuleRunErrorsAreRetries(t *testing.T) {
	tests := []struct {
		name string
		rule Rule
		want string
	}{
		{"fail not a string", Rule{Name: "r", Next: "x", Fail: mustValue(t, "run.visit")},
			`rule "r": fail: expected a string (the reason), got int`},
		{"fail fails", Rule{Name: "r", Fail: mustValue(t, "'x' + input.qty")},
			`rule "r": input.qty is a number (2), added to a string (at 1:1)`},
		{"output fails", Rule{Name: "r", Complete: true, Output: mustValue(t, "input.sku.name")},
			`rule "r": input.sku is a string ("A-1"), so input.sku.name cannot be read`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := stepDelivery()
			res, name := (&RuleSet{Rules: []Rule{tt.rule}}).Evaluate(d)
			var re *RuleError
			if name != "r" || res.Outcome != engine.Retry() || !errors.As(res.Err, &re) || !strings.Contains(res.Err.Error(), tt.want) {
				t.Fatalf("got %q %+v (%v), want retry with %q", name, res, res.Err, tt.want)
			}
			if r := d.Run; r.Next != "" || r.Complete || r.HasOutput || r.Fail != "" {
				t.Errorf("a failed rule wrote the run: %+v", r)
			}
		})
	}
}

func TestValueEval(t *testing.T) {
	v := mustValue(t, "{'to': item, 'sku': input.sku, 'n': payload.sku}")
	got, err := v.Eval(stepDelivery())
	if want := map[string]any{"to": "b@x", "sku": "A-1", "n": "A-1"}; err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Eval = %v, %v; want %v", got, err, want)
	}
	if got, err := mustValue(t, "payload.order_id").Eval(delivery(`{"order_id":"o-1"}`, nil)); err != nil || got != "o-1" {
		t.Errorf("run_id = %v, %v", got, err)
	}
	var ee *EvalError
	if _, err := mustValue(t, "payload.a.b").Eval(delivery(`{"a":1}`, nil)); !errors.As(err, &ee) {
		t.Errorf("Eval error %v, want an *EvalError", err)
	}
}

func TestValueEvalPayloadAndString(t *testing.T) {
	d := stepDelivery()
	for src, want := range map[string]string{
		"{'sku': input.sku, 'qty': input.qty}": `{"qty":2,"sku":"A-1"}`,
		"input.sku":                            `A-1`,
		"input":                                `{"qty":2,"recipients":["a@x","b@x"],"sku":"A-1"}`,
	} {
		if got, err := mustValue(t, src).EvalPayload(d); err != nil || string(got) != want {
			t.Errorf("EvalPayload(%s) = %s, %v; want %s", src, got, err, want)
		}
	}
	id := delivery(`{"order_id":"o-1","n":42,"big":1e21}`, nil)
	for src, want := range map[string]string{"payload.order_id": "o-1", "payload.n": "42", "key + '/' + id": "orders/1-0"} {
		if got, err := mustValue(t, src).EvalString(id); err != nil || got != want {
			t.Errorf("EvalString(%s) = %q, %v; want %q", src, got, err, want)
		}
	}
	if _, err := mustValue(t, "payload.missing").EvalString(id); err == nil || err.Error() != "payload.missing gave nil" {
		t.Errorf("EvalString of nil: %v", err)
	}
	if _, err := mustValue(t, "payload.order_id.x").EvalString(id); err == nil {
		t.Error("EvalString of a failing expression: no error")
	}
}
