package rules

// RunReads says which parts of a workflow run (SPEC §16) expressions read: the step source
// loads and decodes only those (the outputs are a hash of their own, the input a JSON value).
type RunReads struct {
	Input bool // `input`
	Steps bool // `steps`
}

// Or is what either reads.
func (r RunReads) Or(o RunReads) RunReads {
	return RunReads{Input: r.Input || o.Input, Steps: r.Steps || o.Steps}
}

// RunReads is what the expression reads of its run; a nil Value reads nothing.
func (v *Value) RunReads() RunReads {
	if v == nil {
		return RunReads{}
	}
	return v.runReads
}

// RunReads is what the key expression reads of its run; a nil Key reads nothing.
func (k *Key) RunReads() RunReads {
	if k == nil {
		return RunReads{}
	}
	return k.runReads
}

// RunReads is what any expression of the rules reads of its run.
func (rs *RuleSet) RunReads() RunReads {
	var r RunReads
	if rs == nil {
		return r
	}
	if rs.Otherwise != nil {
		r = r.Or(rs.Otherwise.runReads)
	}
	for i := range rs.Rules {
		rule := &rs.Rules[i]
		if rule.When != nil {
			r = r.Or(rule.When.runReads)
		}
		if rule.Outcome != nil {
			r = r.Or(rule.Outcome.runReads)
		}
		r = r.Or(rule.Output.RunReads()).Or(rule.Fail.RunReads())
		for _, e := range rule.Emits {
			r = r.Or(e.Payload.RunReads())
			for _, h := range e.Headers {
				r = r.Or(h.RunReads())
			}
		}
	}
	return r
}
