package config

import (
	"fmt"
	"slices"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"github.com/flowrun/flowrun/rules"
)

// decodeStepBlock decodes `step "NAME" {}`: what it shares with a pipeline goes into
// Step.Pipeline, named "WORKFLOW/STEP", without a source (the runtime reads the step's own
// stream) and with the workflow's dead letter.
func (d *fileDecoder) decodeStepBlock(w *Workflow, block *hcl.Block) (*Step, hcl.Diagnostics) {
	s := &Step{Name: block.Labels[0], DeclRange: block.DefRange}
	pl := &Pipeline{
		Name:       w.Name + "/" + s.Name,
		File:       d.filename,
		DeclRange:  block.DefRange,
		DeadLetter: w.DeadLetter,
	}
	s.Pipeline = pl
	content, diags := block.Body.Content(d.schemas.step)
	attrs := content.Attributes
	diags = append(diags, d.misplacedInStep(attrs, content.Blocks)...)

	nb := sortPipelineBlocks(content.Blocks)
	var waits []*hcl.Block
	for _, b := range content.Blocks {
		if b.Type == "wait" {
			waits = append(waits, b)
		}
	}
	flow, ds := d.decodeFlowBlocks(nb.flow)
	diags = append(diags, ds...)
	pl.Flow = flow

	v := d.values(attrs, stepBody.Attrs, &diags)
	pl.Concurrency = v.Int("concurrency")
	pl.MaxAttempts = v.Int("max_attempts")
	pl.ShutdownTimeout = v.Duration("shutdown_timeout")
	pl.MaxHeld = v.Int("max_held")
	s.Timeout = v.Duration("timeout")
	s.Delay = v.Duration("delay")
	s.MaxItems = v.Int("max_items")
	for _, ref := range []struct {
		attr string
		dst  *string
	}{{"next", &s.Next}, {"compensate", &s.Compensate}, {"on_timeout", &s.OnTimeout}} {
		*ref.dst = v.String(ref.attr)
		if a := v.Attr(ref.attr); a != nil && v.OK(ref.attr) {
			s.refs = append(s.refs, stepRef{attr: ref.attr, name: *ref.dst, rng: a.Expr.Range()})
		}
	}
	if a := v.Attr("on_timeout"); a != nil && !v.Written("timeout") {
		diags = append(diags, notHere(a, `"on_timeout" needs "timeout": the step moves to it when its timeout passes.`))
	}

	if len(waits) == 0 || len(nb.rules)+len(nb.handlers) > 0 {
		nexts, ds := d.decodeDecider(pl, block, nb.rules, nb.handlers, true)
		diags = append(diags, ds...)
		s.refs = append(s.refs, nexts...)
	}
	if a, ok := attrs["otherwise"]; ok {
		diags = append(diags, d.decodeOtherwise(pl, a)...)
	}
	if a, ok := attrs["payload"]; ok {
		s.Payload, diags = d.compileValue(a, `"payload"`, diags)
	}
	diags = append(diags, d.decodeForEach(s, attrs, len(nb.rules) > 0)...)
	s.Choice = pl.Rules != nil && pl.Handler == nil
	if pl.Handler != nil || pl.Flow != nil {
		pl.CanRetry = true // a Go handler may return anything; a failing key is a retry
	}
	diags = append(diags, d.decodeWaits(w, s, waits, nb, attrs)...)
	if !diags.HasErrors() {
		diags = append(diags, lintPipeline(pl)...)
	}
	return s, diags
}

// misplacedInStep reports, in a step, what belongs to the workflow block or its start block.
func (d *fileDecoder) misplacedInStep(attrs hcl.Attributes, blocks hcl.Blocks) hcl.Diagnostics {
	var diags hcl.Diagnostics
	for _, n := range workflowOnlyAttrs {
		a, ok := attrs[n]
		if !ok {
			continue
		}
		detail := fmt.Sprintf("%q belongs to the workflow block, for all its steps.", n)
		if n == "dead_letter" {
			detail = `A step's failed messages go to the workflow's dead letter: set "dead_letter" in the workflow block.`
		}
		diags = append(diags, notHere(a, detail))
	}
	for _, n := range d.schemas.pipelineAttrs {
		if a, ok := attrs[n]; ok {
			diags = append(diags, notHere(a, fmt.Sprintf("%q only applies to %s, in a pipeline block or a workflow's start block; a step reads the stream flowrun writes for it.",
				n, d.schemas.appliesTo[n].AppliesTo)))
		}
	}
	for _, b := range blocks {
		var detail string
		switch b.Type {
		case "source":
			detail = `A step reads its own stream, which flowrun writes; the source whose messages start runs belongs in the workflow's "start" block.`
		case "start":
			detail = `The "start" block belongs to the workflow block, beside its steps.`
		default:
			continue
		}
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Unsupported block type", Detail: detail, Subject: b.DefRange.Ptr()})
	}
	return diags
}

// decodeStepRuleAttrs decodes a step rule's next, complete, output and fail into r; next is
// returned for the check against the workflow's steps.
func (d *fileDecoder) decodeStepRuleAttrs(block *hcl.Block, r *rules.Rule) ([]stepRef, hcl.Diagnostics) {
	content, _ := block.Body.Content(ruleSchema) // decodeRuleBlock reported its problems
	attrs := content.Attributes
	var diags hcl.Diagnostics
	v := d.values(attrs, stepRuleBody.Attrs[2:4], &diags)
	var refs []stepRef
	r.Next = v.String("next")
	if a := v.Attr("next"); a != nil && v.OK("next") {
		refs = append(refs, stepRef{attr: "rule next", name: r.Next, rng: a.Expr.Range()})
	}
	r.Complete = v.Bool("complete")
	if a, ok := attrs["output"]; ok {
		r.Output, diags = d.compileValue(a, `"output"`, diags)
	}
	if a, ok := attrs["fail"]; ok {
		r.Fail, diags = d.compileValue(a, `"fail"`, diags)
	}
	diags = append(diags, conflictingWays(attrs)...)
	return refs, diags
}

// workflowNotPipeline are the attributes of a workflow or its steps that a pipeline block is
// decoded with only to say where they belong.
var workflowNotPipeline = []string{"next", "compensate", "on_timeout", "payload", "run_id", "on_failure", "retention"}

// workflowAttrsInPipeline reports a workflow's or a step's attributes written in a pipeline.
func workflowAttrsInPipeline(attrs hcl.Attributes) hcl.Diagnostics {
	var diags hcl.Diagnostics
	for _, n := range workflowNotPipeline {
		a, ok := attrs[n]
		if !ok {
			continue
		}
		where := `a "step" block of a workflow`
		if slices.Contains(workflowOnlyAttrs, n) {
			where = "a workflow block"
		}
		diags = append(diags, notHere(a, fmt.Sprintf("%q belongs to %s (SPEC §16); a pipeline settles each message on its own: chain pipelines through emits, or declare a workflow.", n, where)))
	}
	return diags
}

// conflictingWays reports a rule that chooses two ways on at once (fail, complete = true and
// next each decide where the run goes), at the later one written.
func conflictingWays(attrs hcl.Attributes) hcl.Diagnostics {
	var set []*hcl.Attribute
	for _, n := range []string{"fail", "complete", "next"} {
		a, ok := attrs[n]
		if !ok {
			continue
		}
		if n == "complete" {
			if v, ds := a.Expr.Value(nil); ds.HasErrors() || !v.Type().Equals(cty.Bool) || !v.IsKnown() || v.False() {
				continue // complete = false chooses nothing
			}
		}
		set = append(set, a)
	}
	if len(set) < 2 {
		return nil
	}
	slices.SortFunc(set, func(a, b *hcl.Attribute) int { return a.NameRange.Start.Byte - b.NameRange.Start.Byte })
	return hcl.Diagnostics{{
		Severity: hcl.DiagError,
		Summary:  "Conflicting arguments",
		Detail:   fmt.Sprintf("A rule chooses one way on: %q is set already, and %q would choose another.", set[0].Name, set[1].Name),
		Subject:  set[1].NameRange.Ptr(),
	}}
}
