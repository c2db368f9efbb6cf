package config

import (
	"github.com/hashicorp/hcl/v2"
)

// decodeForEach decodes a step's for_each (SPEC §16 "Fan-out") into s.ForEach. A for_each step
// runs a handler once per element: rules, which choose the run's way once per visit, are
// refused, at the for_each attribute, and so is dedupe (at its block); max_items without
// for_each says nothing and is refused too.
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
	if f := s.Pipeline.Flow; f != nil && f.Dedupe != nil {
		// The fan and join deliveries pass the dedupe gate too: one taken for an element's
		// would never be run, and the step would never finish.
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Unsupported block type",
			Detail:   `A "for_each" step cannot have "dedupe": the step's own deliveries (its list, its join) would be deduplicated with its elements. Each element's call carries its own x-idempotency-key (WORKFLOW/RUN/STEP/VISIT/INDEX) for the service to recognise a repeat.`,
			Subject:  f.Dedupe.DeclRange.Ptr(),
		})
	}
	if s.MaxItems <= 0 {
		s.MaxItems = DefaultMaxItems
	}
	s.ForEach, diags = d.compileValue(a, `"for_each"`, diags)
	return diags
}
