package config

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	ctyjson "github.com/zclconf/go-cty/cty/json"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/handlers"
	"github.com/flowrun/flowrun/schema"
)

// workflowTestBody is a `test "NAME" {}` that names a workflow (SPEC §16 "Tests"), documented;
// workflowTestSchema decodes it.
var workflowTestBody = &schema.Body{
	Attrs: []schema.Attr{
		{Name: "workflow", Type: "string", Required: true, Doc: "The workflow the test runs, offline, from its first step to the end of the run."},
	},
	Blocks: []schema.Block{
		{Type: "input", Occurs: "optional", Body: workflowInputBody, Doc: "The run's input: the starting message's payload."},
		{Type: "mock", Labels: []string{"step"}, Occurs: "one per handler call of the step",
			Body: stepMockBody,
			Doc:  "Answers one call of the step's handler: the n-th mock of a step answers its n-th call (retries included). The `http` and `exec` attributes of a handler mock, or `output` and `outcome` for any handler."},
		{Type: "event", Labels: []string{"step"}, Occurs: "any number", Body: workflowInputBody, Doc: "An event for a wait step."},
		{Type: "expect", Occurs: "one", Body: workflowExpectBody, Doc: "How the run must end."},
	},
}

// WorkflowTestReference is the body of a test block that names a workflow, for the reference
// (a test block's body is Reference's test entry when it names a pipeline, this when it names a
// workflow).
func WorkflowTestReference() *schema.Body { return workflowTestBody }

var workflowInputBody = &schema.Body{Attrs: []schema.Attr{
	{Name: "payload", Type: "string or any value", Default: "empty", Doc: "A string is the payload's bytes; any other value (`{ id = 1 }`) is written as its JSON text."},
}}

// stepMockAttrs are a step mock's own attributes; the others are the step's handler's mock.
var stepMockAttrs = []string{"output", "outcome"}

var stepMockBody = &schema.Body{Attrs: []schema.Attr{
	{Name: "output", Type: "any value", Doc: "The step's output for this call, as `jsonencode` takes it; with a handler mock, it replaces what the handler made of the mock."},
	{Name: "outcome", Type: "string", Default: `"ack", or what the handler makes of its mock`, Doc: "The call's outcome: `\"ack\"`, `\"drop\"`, `\"retry\"`, `\"retry_after('5s')\"` or `\"dead_letter\"`."},
}}

var workflowExpectBody = &schema.Body{Attrs: []schema.Attr{
	{Name: "status", Type: "string", Doc: "The run's status at its end: `\"completed\"`, `\"failed\"`, `\"compensation_failed\"` or `\"cancelled\"`."},
	{Name: "path", Type: "list of strings", Doc: "The steps that finished, in the order they finished, compensations included."},
	{Name: "output", Type: "object", Doc: "A subset of the final `steps` map: each named step's output, compared as JSON."},
}}

var (
	workflowTestSchema   = workflowTestBody.HCL()
	workflowInputSchema  = workflowInputBody.HCL()
	workflowExpectSchema = workflowExpectBody.HCL()
	stepMockSchema       = stepMockBody.HCL()
)

// workflowTestSrc is what a workflow test keeps for the merge pass, where its workflow is known.
type workflowTestSrc struct {
	workflowRange hcl.Range
	mocks         []pendingMock
	events        []pendingEvent
	pathRange     hcl.Range
	outputRange   hcl.Range
	ctx           *hcl.EvalContext
}

// pendingEvent is an event block, its payload decoded (a string as its bytes).
type pendingEvent struct {
	block   *hcl.Block
	payload []byte
}

// pendingMock is a step mock whose handler attributes the step's handler decodes.
type pendingMock struct {
	mock  *StepMock
	block *hcl.Block
	body  hcl.Body // the block's body without output and outcome
	// handlerAttrs says the block writes attributes of the handler's mock (or may: a body
	// that is not native syntax), or is empty.
	handlerAttrs bool
}

// namesWorkflow reports whether a test block names a workflow (then decodeWorkflowTest
// decodes it).
func namesWorkflow(block *hcl.Block) bool {
	content, _, _ := block.Body.PartialContent(&hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "workflow"}}})
	_, ok := content.Attributes["workflow"]
	return ok
}

// decodeWorkflowTest decodes a test block that names a workflow. Its steps are resolved in the
// merge pass (resolveWorkflowTest).
func (d *fileDecoder) decodeWorkflowTest(block *hcl.Block) (*Test, hcl.Diagnostics) {
	run := &WorkflowTest{Mocks: map[string][]*StepMock{}, Events: map[string][]json.RawMessage{}}
	src := &workflowTestSrc{ctx: d.ctx}
	t := &Test{Name: block.Labels[0], DeclRange: block.DefRange, Run: run, wf: src}
	content, diags := block.Body.Content(workflowTestSchema)
	if a, ok := content.Attributes["workflow"]; ok {
		v, ds := d.nonEmpty(a)
		diags = append(diags, ds...)
		t.Workflow, src.workflowRange = v, a.Expr.Range()
	}
	var inputs, expects []*hcl.Block
	for _, b := range content.Blocks {
		switch b.Type {
		case "input":
			inputs = append(inputs, b)
		case "mock":
			m, ds := d.decodeStepMock(b)
			diags = append(diags, ds...)
			src.mocks = append(src.mocks, m)
		case "event":
			p, ds := d.payloadAttr(b)
			diags = append(diags, ds...)
			src.events = append(src.events, pendingEvent{block: b, payload: p})
		default:
			expects = append(expects, b)
		}
	}
	if len(inputs) > 0 {
		p, ds := d.payloadAttr(inputs[0])
		diags = append(diags, ds...)
		run.Input = p
	}
	for _, b := range inputs[min(1, len(inputs)):] {
		diags = append(diags, duplicateInner(b, "input"))
	}
	if len(expects) == 0 {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Missing expect block",
			Detail:   `A test of a workflow needs an "expect" block with how the run must end (status, path, output).`,
			Subject:  block.DefRange.Ptr(),
		})
		return t, diags
	}
	t.ExpectRange = expects[0].DefRange
	diags = append(diags, d.decodeWorkflowExpect(expects[0], run, src)...)
	for _, b := range expects[1:] {
		diags = append(diags, duplicateInner(b, "expect"))
	}
	return t, diags
}

// payloadAttr decodes an input or event block's payload: a string as its bytes, any other
// value as its JSON text.
func (d *fileDecoder) payloadAttr(block *hcl.Block) ([]byte, hcl.Diagnostics) {
	content, diags := block.Body.Content(workflowInputSchema)
	a, ok := content.Attributes["payload"]
	if !ok {
		return nil, diags
	}
	v, ds := d.value(a, cty.DynamicPseudoType, "a string or a JSON-like value")
	diags = append(diags, ds...)
	if v == cty.NilVal {
		return nil, diags
	}
	p, err := payloadText(v)
	if err != nil {
		diags = append(diags, invalidValue(a, fmt.Sprintf("The payload cannot be written as JSON: %s.", err)))
	}
	return []byte(p), diags
}

// decodeStepMock decodes a mock's output and outcome; the rest of its body is the step's
// handler's, decoded in the merge pass.
func (d *fileDecoder) decodeStepMock(block *hcl.Block) (pendingMock, hcl.Diagnostics) {
	m := &StepMock{Step: block.Labels[0], DeclRange: block.DefRange}
	content, remain, diags := block.Body.PartialContent(stepMockSchema)
	if a, ok := content.Attributes["output"]; ok {
		v, ds := d.value(a, cty.DynamicPseudoType, "any value")
		diags = append(diags, ds...)
		if v != cty.NilVal {
			b, err := ctyjson.Marshal(v, v.Type())
			if err != nil {
				diags = append(diags, invalidValue(a, fmt.Sprintf("The output cannot be written as JSON: %s.", err)))
			}
			m.Output = json.RawMessage(b)
		}
	}
	if a, ok := content.Attributes["outcome"]; ok {
		v, ds := d.str(a)
		diags = append(diags, ds...)
		if !ds.HasErrors() {
			if _, anyDelay, err := ParseOutcome(v); err != nil || anyDelay {
				detail := `A mock's retry_after needs its delay, such as "retry_after('5s')".`
				if err != nil {
					detail = err.Error()
				}
				diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid outcome", Detail: detail, Subject: a.Expr.Range().Ptr()})
			} else {
				m.Outcome = v
			}
		}
	}
	own := len(content.Attributes) > 0
	handlerAttrs := true
	if sb, ok := block.Body.(*hclsyntax.Body); ok {
		handlerAttrs = len(sb.Blocks) > 0
		for name := range sb.Attributes {
			handlerAttrs = handlerAttrs || !slices.Contains(stepMockAttrs, name)
		}
		if !own && len(sb.Attributes) == 0 {
			handlerAttrs = true // an empty mock: the handler's mock with its defaults
		}
	}
	return pendingMock{mock: m, block: block, body: remain, handlerAttrs: handlerAttrs}, diags
}

// MockOutcome is the outcome a step mock's outcome attribute says (ok false when it has none).
func (m *StepMock) MockOutcome() (engine.Outcome, bool) {
	if m.Outcome == "" {
		return engine.Outcome{}, false
	}
	o, _, err := ParseOutcome(m.Outcome)
	return o, err == nil
}

func (d *fileDecoder) decodeWorkflowExpect(block *hcl.Block, run *WorkflowTest, src *workflowTestSrc) hcl.Diagnostics {
	content, diags := block.Body.Content(workflowExpectSchema)
	e := &run.Expect
	e.DeclRange = block.DefRange
	if a, ok := content.Attributes["status"]; ok {
		v, ds := d.str(a)
		diags = append(diags, ds...)
		if !ds.HasErrors() && !slices.Contains(runStatuses, v) {
			diags = append(diags, invalidValue(a, fmt.Sprintf("%q is not a run status.%s A run's status is one of %s.",
				v, didYouMean(v, runStatuses), quoteList(runStatuses, "or"))))
		}
		e.Status = v
	}
	if a, ok := content.Attributes["path"]; ok {
		v, ds := d.value(a, cty.List(cty.String), "a list of step names")
		diags = append(diags, ds...)
		e.HasPath, src.pathRange = true, a.Expr.Range()
		if v != cty.NilVal {
			e.Path = []string{}
			for it := v.ElementIterator(); it.Next(); {
				_, s := it.Element()
				if s.IsNull() {
					diags = append(diags, invalidValue(a, "A step name must not be null."))
					continue
				}
				e.Path = append(e.Path, s.AsString())
			}
		}
	}
	if a, ok := content.Attributes["output"]; ok {
		src.outputRange = a.Expr.Range()
		v, ds := d.value(a, cty.DynamicPseudoType, "an object of step outputs")
		diags = append(diags, ds...)
		if v != cty.NilVal {
			if !v.Type().IsObjectType() && !v.Type().IsMapType() {
				diags = append(diags, typeDiag(a, "an object of step outputs, such as { reserve = { id = 1 } }"))
			} else {
				e.Output = map[string]json.RawMessage{}
				for it := v.ElementIterator(); it.Next(); {
					k, ev := it.Element()
					b, err := ctyjson.Marshal(ev, ev.Type())
					if err != nil {
						diags = append(diags, invalidValue(a, fmt.Sprintf("The output of %q cannot be written as JSON: %s.", k.AsString(), err)))
						continue
					}
					e.Output[k.AsString()] = b
				}
			}
		}
	}
	if len(content.Attributes) == 0 {
		diags = append(diags, missingArg(block, "status", "in an expect block of a workflow test"))
	}
	return diags
}

// runStatuses are the statuses a run ends with, or is in (SPEC §16 "Runs").
var runStatuses = []string{"running", "waiting", "compensating", "completed", "failed", "compensation_failed", "cancelled"}

// resolveWorkflowTest checks a workflow test's names against its workflow and decodes its mocks
// with the steps' handlers.
func resolveWorkflowTest(t *Test, workflows []*Workflow) hcl.Diagnostics {
	src := t.wf
	if t.Workflow == "" || src == nil {
		return nil // reported as missing or empty already
	}
	var w *Workflow
	names := make([]string, 0, len(workflows))
	for _, cand := range workflows {
		names = append(names, cand.Name)
		if cand.Name == t.Workflow {
			w = cand
		}
	}
	if w == nil {
		return hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Unknown workflow",
			Detail:   fmt.Sprintf("There is no workflow named %q.%s", t.Workflow, didYouMean(t.Workflow, names)),
			Subject:  src.workflowRange.Ptr(),
		}}
	}
	var diags hcl.Diagnostics
	steps := make([]string, 0, len(w.Steps))
	for _, s := range w.Steps {
		steps = append(steps, s.Name)
	}
	unknown := func(name, what string, rng hcl.Range) {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Unknown step",
			Detail:   fmt.Sprintf("%s: workflow %q has no step %q.%s", what, w.Name, name, didYouMean(name, steps)),
			Subject:  rng.Ptr(),
		})
	}
	for _, pm := range src.mocks {
		s := w.Step(pm.mock.Step)
		if s == nil {
			unknown(pm.mock.Step, "mock", labelRange(pm.block))
			continue
		}
		diags = append(diags, resolveStepMock(w, s, pm, src.ctx)...)
		t.Run.Mocks[s.Name] = append(t.Run.Mocks[s.Name], pm.mock)
	}
	for _, ev := range src.events {
		b := ev.block
		s := w.Step(b.Labels[0])
		if s == nil {
			unknown(b.Labels[0], "event", labelRange(b))
			continue
		}
		t.Run.Events[s.Name] = append(t.Run.Events[s.Name], json.RawMessage(ev.payload))
		if s.Wait == nil {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Unexpected event block",
				Detail:   fmt.Sprintf("Step %q of workflow %q does not wait: an event block is for a step with a wait block.", s.Name, w.Name),
				Subject:  b.DefRange.Ptr(),
			})
		}
	}
	for _, p := range t.Run.Expect.Path {
		if w.Step(p) == nil {
			unknown(p, "expect path", src.pathRange)
		}
	}
	for _, k := range sortedKeys(t.Run.Expect.Output) {
		if w.Step(k) == nil {
			unknown(k, "expect output", src.outputRange)
		}
	}
	return diags
}

func labelRange(b *hcl.Block) hcl.Range {
	if len(b.LabelRanges) > 0 {
		return b.LabelRanges[0]
	}
	return b.DefRange
}

// resolveStepMock decodes a mock's handler attributes with the step's handler, or reports
// that the step takes none.
func resolveStepMock(w *Workflow, s *Step, pm pendingMock, ctx *hcl.EvalContext) hcl.Diagnostics {
	var h *Handler
	if s.Pipeline != nil {
		h = s.Pipeline.Handler
	}
	bad := func(detail string) hcl.Diagnostics {
		return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Unexpected mock block", Detail: detail, Subject: pm.block.DefRange.Ptr()}}
	}
	switch {
	case h == nil:
		return bad(fmt.Sprintf("Step %q of workflow %q decides with rules, which call nothing outside; a mock answers a call of a step's handler.", s.Name, w.Name))
	case !pm.handlerAttrs:
		return nil // output and outcome stand in for the handler
	case h.Plugin.DecodeMock == nil:
		detail := fmt.Sprintf("Step %q of workflow %q uses the Go handler %q, which cannot be mocked: a mock of it takes only %s.",
			s.Name, w.Name, h.Name, quoteList(stepMockAttrs, "and"))
		if names := handlers.Mockable(); len(names) > 0 {
			detail += fmt.Sprintf(" Handlers that take a mock: %s.", quoteList(names, "and"))
		}
		return bad(detail)
	}
	m, diags := h.Plugin.DecodeMock(pm.body, ctx, pm.block.DefRange)
	pm.mock.Mock = m
	return diags
}
