package rules

import "testing"

func TestRunReads(t *testing.T) {
	for _, c := range []struct {
		src  string
		want RunReads
	}{
		{"run.step", RunReads{}},
		{"payload.input + raw", RunReads{}}, // a field named input is not the run's input
		{"input.sku", RunReads{Input: true}},
		{"steps.charge.id", RunReads{Steps: true}},
		{"steps['a'] ?? input", RunReads{Input: true, Steps: true}},
		{"$env.steps", RunReads{Input: true, Steps: true}},
	} {
		v, err := CompileValue(c.src)
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		if got := v.RunReads(); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.src, got, c.want)
		}
	}
	w, _ := CompileCondition("steps.a == 1")
	o, _ := CompileValue("input")
	rs := &RuleSet{Rules: []Rule{{Name: "a", When: w}, {Name: "b", Output: o}}}
	if got := rs.RunReads(); got != (RunReads{Input: true, Steps: true}) {
		t.Errorf("rule set: %+v", got)
	}
	if got := (&RuleSet{Rules: []Rule{{Name: "a"}}}).RunReads(); got != (RunReads{}) {
		t.Errorf("empty rule: %+v", got)
	}
}
