package config

import (
	"fmt"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// DefaultWaitKeep is how long an event that arrived before its run reached the wait step is
// kept for the run when the step has no timeout (SPEC §16 "Waiting").
const DefaultWaitKeep = 24 * time.Hour

// WaitPipelineName is the pipeline that reads a wait step's events: named like its consumer
// group's default, "<workflow>.<step>".
func WaitPipelineName(workflow, step string) string { return workflow + "." + step }

// KeepFor is how long an event that came before its run is kept for it: the step's timeout,
// else DefaultWaitKeep.
func (s *Step) KeepFor() time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return DefaultWaitKeep
}

// decodeWaits decodes a step's wait block into s.Wait: its source as a pipeline's (the pipeline
// "<workflow>.<step>", so the consumer group defaults to that name) and its correlate. A wait
// step finishes with its event, so rules, a handler or a payload in it are reported where written.
func (d *fileDecoder) decodeWaits(w *Workflow, s *Step, waits []*hcl.Block, nb pipelineBlocks, attrs hcl.Attributes) hcl.Diagnostics {
	if len(waits) == 0 {
		return nil
	}
	var diags hcl.Diagnostics
	for _, extra := range waits[1:] {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Duplicate wait block",
			Detail:   fmt.Sprintf("A step has one wait block; the first is declared at %s.", where(waits[0].DefRange)),
			Subject:  extra.DefRange.Ptr(),
		})
	}
	for _, b := range append(append([]*hcl.Block{}, nb.rules...), nb.handlers...) {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Conflicting blocks",
			Detail:   fmt.Sprintf(`A wait step finishes with the event it waits for, its output: it takes no %q block. Put the %s in the step after it (next).`, b.Type, b.Type),
			Subject:  b.DefRange.Ptr(),
		})
	}
	if a, ok := attrs["for_each"]; ok {
		diags = append(diags, notHere(a, `A wait step waits for one event per visit: "for_each" belongs to a step with a handler.`))
	}
	for _, n := range []string{"payload", "otherwise"} {
		if a, ok := attrs[n]; ok {
			diags = append(diags, notHere(a, fmt.Sprintf("%q belongs to a step with a handler or rules; a wait step's output is its event's payload.", n)))
		}
	}
	ws, ds := d.decodeWaitBlock(w, s, waits[0])
	s.Wait = ws
	return append(diags, ds...)
}

// decodeWaitBlock decodes `wait { source "KIND" {} correlate = "..." }`.
func (d *fileDecoder) decodeWaitBlock(w *Workflow, s *Step, block *hcl.Block) (*WaitSpec, hcl.Diagnostics) {
	schema := waitBody.HCL()
	for _, n := range d.schemas.pipelineAttrs {
		schema.Attributes = append(schema.Attributes, hcl.AttributeSchema{Name: n})
	}
	content, diags := block.Body.Content(schema)
	ws := &WaitSpec{DeclRange: block.DefRange}
	pl := &Pipeline{Name: WaitPipelineName(w.Name, s.Name), File: d.filename, DeclRange: block.DefRange, CanRetry: true}
	ws.Pipeline = pl
	if a, ok := content.Attributes["correlate"]; ok {
		ws.Correlate, diags = d.compileValue(a, `"correlate"`, diags)
	} else {
		diags = append(diags, missingArg(block, "correlate", "in a wait block: the expression giving, on each event, the id of the run it belongs to"))
	}
	var sources []*hcl.Block
	for _, b := range content.Blocks {
		if b.Type == "source" {
			sources = append(sources, b)
		}
	}
	if len(sources) == 0 {
		return ws, append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Missing source",
			Detail:   `A wait block needs one "source" block: where its events come from.`,
			Subject:  block.DefRange.Ptr(),
		})
	}
	body, ds := d.decodePipelineSource(pl, block, sources)
	diags = append(diags, ds...)
	if pl.Source != nil {
		diags = append(diags, d.decodeSourceConfig(pl, sources[0], body, block, content.Attributes)...)
		ws.Source = pl.Source
	}
	return ws, diags
}

// resolveWaits resolves the redis block of each wait's source, defaulting to the workflow's.
func (r redisResolver) resolveWaits(w *Workflow, name string) hcl.Diagnostics {
	var diags hcl.Diagnostics
	for _, s := range w.Steps {
		if s.Wait == nil || s.Wait.Source == nil || !s.Wait.Source.readsRedis() {
			continue
		}
		src := s.Wait.Source
		if src.Redis == "" {
			src.Redis = name
			continue
		}
		n, ds := r.resolve(src.Redis, src.redisRange, src.DeclRange, fmt.Sprintf("A %s source", src.Kind))
		diags = append(diags, ds...)
		src.Redis = n
	}
	return diags
}

// checkWaitCompensations refuses a compensate that names a wait step: a compensation undoes
// what a step did, and a run compensating does not park for events.
func checkWaitCompensations(w *Workflow) hcl.Diagnostics {
	var diags hcl.Diagnostics
	for _, s := range w.Steps {
		for _, ref := range s.refs {
			if t := w.Step(ref.name); ref.attr == "compensate" && t != nil && t.Wait != nil {
				diags = append(diags, &hcl.Diagnostic{
					Severity: hcl.DiagError,
					Summary:  "Invalid compensate",
					Detail:   fmt.Sprintf("Step %q waits for an event, so it cannot be a compensation: a compensation undoes what a step did.", ref.name),
					Subject:  ref.rng.Ptr(),
				})
			}
		}
	}
	return diags
}
