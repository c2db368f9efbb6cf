package config

import (
	"fmt"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/flowrun/flowrun/rules"
	"github.com/flowrun/flowrun/schema"
)

// Workflow defaults (SPEC §16).
const (
	DefaultRetention = 7 * 24 * time.Hour // how long a finished run is kept
	DefaultMaxItems  = 1000               // a for_each step's most elements
	// DefaultStartConcurrency is a start block's concurrency: its handler only writes the run.
	DefaultStartConcurrency = 64
	OnFailureCompensate     = "compensate"
	OnFailureStop           = "stop"
)

// DefaultDeadLetter is a workflow's dead letter when it names none: under the workflow's hash
// tag, so that the script that fails a run can write it (one Cluster slot).
func DefaultDeadLetter(workflow string) string { return "flowrun:{" + workflow + "}:dead" }

// notYet is the words of a step attribute or block a later build runs (issue 28): refused with
// its position, never ignored.
const notYet = "Not supported by this build yet: a load refuses it."

// pipelineAttr is the declaration of a pipeline attribute a step or a start block shares.
func pipelineAttr(name string) schema.Attr {
	a, ok := pipelineBody.Attr(name)
	if !ok {
		panic("config: no pipeline attribute " + name)
	}
	return a
}

// workflowBody is `workflow "NAME" {}` (SPEC §16), documented.
var workflowBody = &schema.Body{
	Attrs: []schema.Attr{
		schema.String("redis").NonEmpty().DefaultDoc("the only redis block").Describe("The redis block the workflow's runs live in; every key of the workflow is under `flowrun:{NAME}:` (one hash slot on a Cluster). Optional when exactly one is declared."),
		{Name: "run_id", Type: "expression", Default: "the start message's `KEY/ID` where it has an id, else a new random id", Doc: "The run's id, an expression over the start message (`\"payload.order_id\"`), its result as a string. A start message whose id names a run that exists (active, or finished within `retention`) starts nothing and is counted `duplicate`; the default makes a redelivered start message a duplicate too."},
		schema.String("on_failure").WithDefault(OnFailureCompensate).Describe("What a failed run does: `\"compensate\"` runs the `compensate` steps of the steps that finished, in the reverse order of finishing, then ends `failed` (`compensation_failed` if one reached the dead letter); `\"stop\"` ends it `failed` at once, keeping its state for `flowrun runs retry`."),
		schema.Duration("retention").WithDefault(DefaultRetention).Describe("How long a finished run (completed, failed, cancelled) is kept; active runs never expire."),
		schema.String("dead_letter").NonEmpty().DefaultDoc("`\"flowrun:{NAME}:dead\"`").Describe("The stream a failed step's message is written to, with the dead-letter headers plus `x-run-id`. On a Cluster, a key outside the slot of the hash tag `{NAME}` is written on its own, apart from the script that fails the run (validate warns)."),
	},
	Blocks: []schema.Block{
		{Type: "start", Occurs: "one", Body: startBody,
			Doc: "What starts a run: each message of its source starts one, its decoded payload the run's `input`."},
		{Type: "step", Labels: []string{"name"}, Occurs: "one or more", Body: stepBody,
			Doc: "A step of the workflow: a handler, or rules alone that choose the way on. The first step declared runs first."},
	},
}

// startBody is a workflow's `start {}`; the source kinds add the pipeline attributes only they
// take (delayed_retry ...), as in a pipeline block.
var startBody = &schema.Body{
	Attrs: []schema.Attr{
		pipelineAttr("concurrency").WithDefault(DefaultStartConcurrency).Describe("Start messages handled at once per process. Handling one is one write of the new run, so handlers wait on Redis rather than a CPU; those waiting at once share a round trip."),
		pipelineAttr("shutdown_timeout"),
		pipelineAttr("max_held"),
	},
	Blocks: []schema.Block{
		{Type: "source", Labels: []string{"kind"}, Occurs: "one",
			Doc: "Any source kind with its attributes, as a pipeline's [`source`](#pipeline-source) block; its consumer group defaults to the workflow's name. The pipeline attributes only some kinds take (`delayed_retry` ...) are written in the `start` block."},
	},
}

// stepBody is a workflow's `step "NAME" {}`, documented.
var stepBody = &schema.Body{
	Attrs: []schema.Attr{
		{Name: "payload", Type: "expression", Default: "the run's input", Doc: "What the handler gets as the message's payload, an expression that sees `input`, `steps` and `run` (`\"{'sku': input.sku}\"`)."},
		schema.String("next").NonEmpty().DefaultDoc("none: the run completes after the step").Describe("The step the run moves to when this one finishes, named literally."),
		schema.String("compensate").NonEmpty().DefaultDoc("none").Describe("The step that undoes this one, run when the run fails after this step finished (`on_failure = \"compensate\"`)."),
		schema.Duration("timeout").DefaultDoc("none").Describe("How long the step may take, retries included, from when the run entered it; then the run moves to `on_timeout`, or fails."),
		schema.String("on_timeout").NonEmpty().DefaultDoc("none: a timeout fails the run").Describe("The step the run moves to when `timeout` passes."),
		schema.Duration("delay").DefaultDoc("none").Describe("Entering the step waits this long, durably (in Redis, surviving restarts)."),
		pipelineAttr("max_attempts").Describe("The cap on attempts of one visit: past it the step's message goes to the workflow's dead letter and the run fails."),
		pipelineAttr("concurrency").Describe("Handlers of this step running at once per process, across all runs."),
		pipelineAttr("shutdown_timeout"),
		pipelineAttr("max_held"),
		{Name: "otherwise", Type: "expression", Default: "`\"ack\"`", Doc: "The outcome when no rule's `when` holds, as in a pipeline. Rules only."},
		{Name: "for_each", Type: "expression", Default: "none", Doc: "Fan-out: an expression giving a list; the handler runs once per element, `item` and `index` in scope of `payload` (each call its own delivery, its key `WORKFLOW/RUN/STEP/VISIT/INDEX`, at most `concurrency` at once per process). The step finishes when every element has acked, its output the list of the elements' outputs in element order; an element that reaches the dead letter fails the run. A handler only, not rules."},
		schema.Count("max_items").WithDefault(DefaultMaxItems).Describe("The most elements of a `for_each` list: a longer one fails the run before any element runs, naming the count."),
	},
	Blocks: []schema.Block{
		{Type: "rule", Labels: []string{"name"}, Occurs: "one or more, or a handler", Body: stepRuleBody,
			Doc: "A rule, as a pipeline's; a step of rules alone chooses the way on with `next`, `complete`, `output` and `fail`."},
		{Type: "handler", Labels: []string{"name"}, Occurs: "one, or rules",
			Doc: "A handler, as a pipeline's [`handler`](#pipeline-handler) block; what it produces is the step's output. It gets the header `x-idempotency-key` (`WORKFLOW/RUN/STEP/VISIT`), the same across the retries of one visit."},
		{Type: "wait", Occurs: "optional, instead of rules or a handler", Body: waitBody, Doc: "Park the run until a matching event arrives on the wait's source: the event's payload is the step's output. An event that arrives before its run reaches the step is kept for the run, up to the step's `timeout` (default 24h)."},
		{Type: "concurrency_key", Occurs: "optional", Body: concurrencyKeyBody, Doc: "As a pipeline's [`concurrency_key`](#pipeline-concurrency_key)."},
		{Type: "throttle", Occurs: "optional", Body: throttleBody, Doc: "As a pipeline's [`throttle`](#pipeline-throttle)."},
		{Type: "dedupe", Occurs: "optional", Body: dedupeBody, Doc: "As a pipeline's [`dedupe`](#pipeline-dedupe)."},
	},
}

var waitBody = &schema.Body{
	Attrs: []schema.Attr{
		{Name: "correlate", Type: "expression", Required: true, Doc: "An expression over each event (`payload`, `headers`, ...): the id of the run it belongs to (`\"payload.order_id\"`)."},
	},
	Blocks: []schema.Block{
		{Type: "source", Labels: []string{"kind"}, Occurs: "one", Doc: "Where the events come from: any source kind with its attributes, as a pipeline's [`source`](#pipeline-source) block; its consumer group defaults to `WORKFLOW.STEP`, the name of the pipeline that reads it."},
	},
}

// Attributes and blocks written in the wrong one of a workflow's blocks: decoded so that the
// diagnostic can say where they belong.
var (
	workflowOnlyAttrs = []string{"redis", "run_id", "on_failure", "retention", "dead_letter"}
	stepOnlyAttrs     = []string{"payload", "next", "compensate", "timeout", "on_timeout", "delay", "max_attempts", "otherwise"}
)

var waitSchema = waitBody.HCL()

// workflowSchemas builds the schemas of a workflow's blocks, with the misplaced names they
// diagnose: the kinds' pipeline attributes (kindAttrs) belong to the start block.
func workflowSchemas(kindAttrs []string) (wf, start, step *hcl.BodySchema) {
	wf = workflowBody.HCL()
	for _, n := range stepOnlyAttrs {
		wf.Attributes = append(wf.Attributes, hcl.AttributeSchema{Name: n})
	}
	wf.Blocks = append(wf.Blocks,
		hcl.BlockHeaderSchema{Type: "source", LabelNames: []string{"kind"}},
		hcl.BlockHeaderSchema{Type: "rule", LabelNames: []string{"name"}},
		hcl.BlockHeaderSchema{Type: "handler", LabelNames: []string{"name"}})
	start = startBody.HCL()
	step = stepBody.HCL()
	for _, n := range kindAttrs {
		start.Attributes = append(start.Attributes, hcl.AttributeSchema{Name: n})
		step.Attributes = append(step.Attributes, hcl.AttributeSchema{Name: n})
	}
	for _, n := range workflowOnlyAttrs {
		step.Attributes = append(step.Attributes, hcl.AttributeSchema{Name: n})
	}
	step.Blocks = append(step.Blocks,
		hcl.BlockHeaderSchema{Type: "source", LabelNames: []string{"kind"}},
		hcl.BlockHeaderSchema{Type: "start"})
	return wf, start, step
}

// stepRef is a step name written in a step (next, compensate, on_timeout, a rule's next), checked
// once the workflow's steps are known.
type stepRef struct {
	attr string // "next", "compensate", "on_timeout", "rule next"
	name string
	rng  hcl.Range // the value as written
}

// decodeWorkflowBlock decodes `workflow "NAME" {}`; the redis block is resolved in the merge
// pass. Every step name written is checked against the steps here.
func (d *fileDecoder) decodeWorkflowBlock(block *hcl.Block) (*Workflow, hcl.Diagnostics) {
	w := &Workflow{Name: block.Labels[0], File: d.filename, DeclRange: block.DefRange}
	content, diags := block.Body.Content(d.schemas.workflow)
	attrs := content.Attributes
	diags = append(diags, misplacedInWorkflow(attrs, content.Blocks)...)

	v := d.values(attrs, workflowBody.Attrs, &diags)
	w.Redis = v.String("redis")
	if a := v.Attr("redis"); a != nil {
		w.redisRange = a.Expr.Range()
	}
	if a, ok := attrs["run_id"]; ok {
		w.RunID, diags = d.compileValue(a, `"run_id"`, diags)
	}
	w.OnFailure = v.String("on_failure")
	if a := v.Attr("on_failure"); a != nil && v.OK("on_failure") && w.OnFailure != OnFailureCompensate && w.OnFailure != OnFailureStop {
		diags = append(diags, invalidValue(a, fmt.Sprintf(`"on_failure" is "compensate" or "stop", not %q.%s`,
			w.OnFailure, didYouMean(w.OnFailure, []string{OnFailureCompensate, OnFailureStop}))))
	}
	w.Retention = v.Duration("retention")
	w.DeadLetter = v.String("dead_letter")
	if w.DeadLetter == "" {
		w.DeadLetter = DefaultDeadLetter(w.Name)
	} else {
		w.deadLetterRange = v.Attr("dead_letter").Expr.Range()
	}

	var starts []*hcl.Block
	seen := map[string]hcl.Range{}
	for _, b := range content.Blocks {
		switch b.Type {
		case "start":
			starts = append(starts, b)
		case "step":
			diags = append(diags, checkName(b)...)
			if prev, dup := seen[b.Labels[0]]; dup {
				diags = append(diags, &hcl.Diagnostic{
					Severity: hcl.DiagError,
					Summary:  "Duplicate step block",
					Detail:   fmt.Sprintf("step %q was already declared at %s.", b.Labels[0], where(prev)),
					Subject:  b.LabelRanges[0].Ptr(),
				})
				continue
			}
			seen[b.Labels[0]] = b.DefRange
			s, ds := d.decodeStepBlock(w, b)
			diags = append(diags, ds...)
			w.Steps = append(w.Steps, s)
		}
	}
	diags = append(diags, d.decodeStarts(w, block, starts)...)
	if len(w.Steps) == 0 && len(seen) == 0 {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Missing step",
			Detail:   `A workflow needs one or more "step" blocks; the first declared runs first.`,
			Subject:  block.DefRange.Ptr(),
		})
	}
	diags = append(diags, checkWorkflowGraph(w)...)
	return w, diags
}

// misplacedInWorkflow reports a step's attributes and blocks written in the workflow block.
func misplacedInWorkflow(attrs hcl.Attributes, blocks hcl.Blocks) hcl.Diagnostics {
	var diags hcl.Diagnostics
	for _, n := range stepOnlyAttrs {
		if a, ok := attrs[n]; ok {
			diags = append(diags, notHere(a, fmt.Sprintf(`%q belongs to a "step" block of the workflow; the workflow block takes %s.`,
				n, quoteList(attrNames(workflowBody.Attrs), "and"))))
		}
	}
	for _, b := range blocks {
		var detail string
		switch b.Type {
		case "source":
			detail = `A workflow's source belongs in its "start" block: start { source "` + b.Labels[0] + `" { ... } }.`
		case "rule", "handler":
			detail = fmt.Sprintf(`A %s block belongs to a "step" block of the workflow.`, b.Type)
		default:
			continue
		}
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Unsupported block type", Detail: detail, Subject: b.DefRange.Ptr()})
	}
	return diags
}

func attrNames(attrs []schema.Attr) []string {
	names := make([]string, len(attrs))
	for i, a := range attrs {
		names[i] = a.Name
	}
	return names
}

// decodeStarts decodes the workflow's one start block into w.Start.
func (d *fileDecoder) decodeStarts(w *Workflow, block *hcl.Block, starts []*hcl.Block) hcl.Diagnostics {
	if len(starts) == 0 {
		return hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Missing start",
			Detail:   `A workflow needs one "start" block holding the source whose messages start runs: start { source "stream" { stream = "orders" } }.`,
			Subject:  block.DefRange.Ptr(),
		}}
	}
	var diags hcl.Diagnostics
	for _, extra := range starts[1:] {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Duplicate start block",
			Detail:   fmt.Sprintf("A workflow has exactly one start block; the first is declared at %s.", where(starts[0].DefRange)),
			Subject:  extra.DefRange.Ptr(),
		})
	}
	pl, ds := d.decodeStartBlock(w, starts[0])
	w.Start = pl
	return append(diags, ds...)
}

// decodeStartBlock decodes `start {}` as the pipeline named like the workflow whose source
// starts runs: its source is decoded by its kind exactly as a pipeline's is (the consumer group
// defaults to the pipeline's name, so the workflow's). Its rules and handler are nil: the
// runtime starts the runs, and may retry a start it could not write.
func (d *fileDecoder) decodeStartBlock(w *Workflow, block *hcl.Block) (*Pipeline, hcl.Diagnostics) {
	pl := &Pipeline{Name: w.Name, File: d.filename, DeclRange: block.DefRange, CanRetry: true}
	content, diags := block.Body.Content(d.schemas.start)
	var sources []*hcl.Block
	for _, b := range content.Blocks {
		if b.Type == "source" {
			sources = append(sources, b)
		}
	}
	attrs := content.Attributes
	v := d.values(attrs, startBody.Attrs, &diags)
	pl.Concurrency = v.Int("concurrency")
	pl.ShutdownTimeout = v.Duration("shutdown_timeout")
	pl.MaxHeld = v.Int("max_held")
	if len(sources) == 0 {
		return pl, append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Missing source",
			Detail:   `A start block needs one "source" block: the source whose messages start runs.`,
			Subject:  block.DefRange.Ptr(),
		})
	}
	body, ds := d.decodePipelineSource(pl, block, sources)
	diags = append(diags, ds...)
	if pl.Source != nil {
		diags = append(diags, d.decodeSourceConfig(pl, sources[0], body, block, attrs)...)
	}
	return pl, diags
}

// compileValue compiles an expression attribute with rules.CompileValue, its errors at their
// place in the file.
func (d *fileDecoder) compileValue(a *hcl.Attribute, name string, diags hcl.Diagnostics) (*rules.Value, hcl.Diagnostics) {
	es, ds := d.exprSource(a.Expr, name)
	diags = append(diags, ds...)
	if ds.HasErrors() {
		return nil, diags
	}
	v, err := rules.CompileValue(es.text)
	if err != nil {
		return nil, append(diags, es.compileDiag("Invalid expression", err))
	}
	v.SetLocator(es.locator())
	return v, diags
}
