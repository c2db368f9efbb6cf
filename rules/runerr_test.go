package rules

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/engine"
)

// fileAt is a Locator for an expression that starts at line 12, column 10 of payouts.hcl.
func fileAt(line, col int) string {
	if line == 1 {
		col += 9
	}
	return fmt.Sprintf("payouts.hcl:%d:%d", 11+line, col)
}

// TestRuleErrorNamesPlaceRuleAndTypes: a run-time type error names the file position of the
// failing operation, the rule, the operand's type with a short value, and what it met.
func TestRuleErrorNamesPlaceRuleAndTypes(t *testing.T) {
	tests := []struct {
		when, payload, want string
	}{
		{"payload.amount > 100", `{"amount":"abc"}`,
			`payouts.hcl:12:10: rule "big": payload.amount is a string ("abc"), compared with a number`},
		{"attempt > 0 && payload.amount >= 100", `{"amount":true}`,
			`payouts.hcl:12:25: rule "big": payload.amount is a boolean (true), compared with a number`},
		{"100 < payload.amount", `{"amount":"abc"}`,
			`payouts.hcl:12:10: rule "big": payload.amount is a string ("abc"), compared with a number`},
		{"payload.amount + 1 > 100", `{"amount":"x"}`,
			`payouts.hcl:12:10: rule "big": payload.amount is a string ("x"), added to a number`},
		// A plain-text element: the field read is what fails.
		{"payload.amount > 100", `not json at all`,
			`payouts.hcl:12:10: rule "big": payload is a string ("not json at all"), so payload.amount cannot be read (payload.amount ?? default gives the default)`},
		// A long value is cut.
		{"payload.amount > 100", `{"amount":"abcdefghijklmnopqrstuvwxyz0123"}`,
			`payouts.hcl:12:10: rule "big": payload.amount is a string ("abcdefghijklmnopqrstuvwx…"), compared with a number`},
		// Two operands that are not literals.
		{"payload.a > payload.b", `{"a":"x","b":2}`,
			`payouts.hcl:12:10: rule "big": payload.a is a string ("x") and payload.b is a number (2): payload.a > payload.b fails`},
		// A second line of the expression.
		{"attempt > 0 &&\n  payload.amount > 1", `{"amount":"abc"}`,
			`payouts.hcl:13:3: rule "big": payload.amount is a string ("abc"), compared with a number`},
	}
	for _, tt := range tests {
		t.Run(tt.when+" "+tt.payload, func(t *testing.T) {
			c := mustCond(t, tt.when)
			c.SetLocator(fileAt)
			rs := &RuleSet{Rules: []Rule{{Name: "big", When: c, Outcome: mustOutcome(t, "drop")}}}
			res, _ := rs.Evaluate(delivery(tt.payload, nil))
			if res.Err == nil || res.Outcome != engine.Retry() {
				t.Fatalf("outcome %v, error %v; want retry with an error", res.Outcome, res.Err)
			}
			if got := res.Err.Error(); got != tt.want {
				t.Errorf("error\n  %s\nwant\n  %s", got, tt.want)
			}
		})
	}
}

// TestRuleErrorGroups: errors that differ only in the value are one group (one log line per
// interval); another type, rule or place is another.
func TestRuleErrorGroups(t *testing.T) {
	group := func(rule, when, payload string) string {
		t.Helper()
		rs := &RuleSet{Rules: []Rule{{Name: rule, When: mustCond(t, when), Outcome: mustOutcome(t, "drop")}}}
		res, _ := rs.Evaluate(delivery(payload, nil))
		var g engine.GroupedError
		if !errors.As(res.Err, &g) {
			t.Fatalf("error %v is not grouped", res.Err)
		}
		k, label := g.ErrorGroup()
		if label != rule {
			t.Errorf("label %q, want %q", label, rule)
		}
		return k
	}
	a := group("big", "payload.amount > 100", `{"amount":"abc"}`)
	if b := group("big", "payload.amount > 100", `{"amount":"xyz"}`); a != b {
		t.Errorf("two values of one type are two groups: %q, %q", a, b)
	}
	for _, other := range []string{
		group("big", "payload.amount > 100", `{"amount":true}`),
		group("small", "payload.amount > 100", `{"amount":"abc"}`),
		group("big", "attempt > 0 && payload.amount > 100", `{"amount":"abc"}`),
	} {
		if other == a {
			t.Errorf("group %q shared by another type, rule or place", a)
		}
	}
}

// TestCoalesceGuardsFieldReads: `??` gives its right side where a field read on its left meets
// something that is not an object (plain text, a number) or lacks the field or index.
func TestCoalesceGuardsFieldReads(t *testing.T) {
	tests := []struct {
		expr, payload string
		want          any
	}{
		{"payload.amount ?? 0", `plain text`, 0},
		{"payload.amount ?? 0", `42`, 0},
		{"payload.amount ?? 0", `{"amount":7}`, 7.0},
		{"payload.a.b ?? 'none'", `{"a":1}`, "none"},
		{"payload.a.b ?? 'none'", `{"a":{"b":"x"}}`, "x"},
		{"payload['a'].b ?? 'none'", `{"a":"s"}`, "none"},
		{"payload.items[3] ?? -1", `{"items":[1]}`, -1},
		{"payload.items[0] ?? -1", `{"items":[5]}`, 5.0},
		{"payload.items[-1] ?? -1", `{"items":[5,6]}`, 6.0},
		{"headers.x ?? 'd'", `{}`, "d"},
	}
	for _, tt := range tests {
		t.Run(tt.expr+" "+tt.payload, func(t *testing.T) {
			v := mustValue(t, tt.expr)
			got, err := v.run(&state{d: delivery(tt.payload, nil)})
			if err != nil || got != tt.want {
				t.Errorf("= %v (%T), %v; want %v (%T)", got, got, err, tt.want, tt.want)
			}
		})
	}
	// In a rule: a plain-text payload does not match, with no error.
	rs := &RuleSet{Rules: []Rule{{Name: "big", When: mustCond(t, "(payload.amount ?? 0) > 100"), Outcome: mustOutcome(t, "drop")}}}
	if res, name := rs.Evaluate(delivery("plain text", nil)); res.Err != nil || name != "" || res.Outcome != engine.Ack() {
		t.Errorf("plain text: %v by %q, error %v; want ack by no rule", res.Outcome, name, res.Err)
	}
	// Without ?? the read is still an error, as before.
	if res, _ := (&RuleSet{Rules: []Rule{{Name: "r", When: mustCond(t, "payload.amount > 1")}}}).Evaluate(delivery("text", nil)); !strings.Contains(fmt.Sprint(res.Err), "cannot be read") {
		t.Errorf("without ??: %v", res.Err)
	}
}
