package config

import (
	"github.com/hashicorp/hcl/v2"
)

// decodeForEach decodes a step's for_each (SPEC §16 "Fan-out") into s.ForEach. A for_each step
// runs a handler once per element: rules, which choose the run's way once per visit, are
// refused, at the for_each attribute; max_items without for_each says nothing and is refused
// too.
func (d *fileDecoder) decodeForEach(s *Step, attrs hcl.Attributes, hasRules bool) hcl.Diagnostics {
	var diags hcl.Diagnostics
	a, ok := attrs["for_each"]
	if !ok {
		if m, ok := attrs["max_items"]; ok {
			diags = append(diags, notHere(m, `"max_items" bounds a "for_each" list: it needs "for_each" in the same step.`))
		}
		s.MaxItems = 0
		return diags
	}
	if hasRules {
		diags = append(diags, notHere(a, `A "for_each" step runs a handler once per element; it cannot have rules, which choose the run's way once per visit. Give it a handler, and put the rules in a step after it (they see the list as steps.NAME).`))
	}
	if s.MaxItems <= 0 {
		s.MaxItems = DefaultMaxItems
	}
	s.ForEach, diags = d.compileValue(a, `"for_each"`, diags)
	return diags
}
