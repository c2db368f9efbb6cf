package config

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/handlers"
	"github.com/flowrun/flowrun/rules"
	"github.com/flowrun/flowrun/schema"
	"github.com/flowrun/flowrun/transports"
)

// fromCPUs is concurrency's default, engine.DefaultConcurrency, as the reference words it.
const fromCPUs = "the number of CPUs"

// pipelineBody is what every pipeline takes, documented; the registered source kinds add the
// pipeline attributes only they take (schemas.pipeline).
var pipelineBody = &schema.Body{
	Attrs: []schema.Attr{
		schema.Count("concurrency").DefaultFrom(fromCPUs).Describe("Handlers running at once. Reads never run more than one `batch` ahead of free handler slots."),
		schema.Count("max_attempts").DefaultDoc("no cap").Describe("The cap on attempts: a delivery already past it goes straight to the dead letter without running the handler, and a retry asked on the last attempt goes to the dead letter instead. Without `dead_letter` such a delivery is acknowledged and logged as rejected."),
		schema.String("dead_letter").NonEmpty().DefaultDoc("none").Describe("The key that receives messages that failed for good, a key of the source's own kind (a stream for stream and pubsub sources, a list for lists, records with this key for files and pipes), with the dead-letter headers. It must not be the key the source reads."),
		schema.Duration("shutdown_timeout").AllowZero().WithDefault(engine.DefaultShutdownTimeout).Describe("On a stop, how long in-flight handlers may run before their context is cancelled; also how long the end of a file replay or pipe waits for held copies to come due."),
		{Name: "otherwise", Type: "expression", Default: "`\"ack\"`", Doc: "The outcome when no rule's `when` holds, an outcome expression (`\"drop\"`, `\"retry_after('1m')\"`). Rules only."},
		schema.Count("max_held").WithDefault(engine.DefaultMaxHeld).Describe("The most runtime-delayed copies held in the process at once; at the bound reading pauses until copies come due."),
	},
	Blocks: []schema.Block{
		{Type: "source", Labels: []string{"kind"}, Occurs: "one", Ref: "sources",
			Doc: "Where messages come from. Its body is the kind's: `stream`, `claiming`, `reclaim`, `list`, `pubsub`, `file` or `pipe`."},
		{Type: "rule", Labels: []string{"name"}, Occurs: "one or more, or a handler", Body: ruleBody,
			Doc: "An expression rule. Rules are tried in order; the first whose `when` holds decides."},
		{Type: "handler", Labels: []string{"name"}, Occurs: "one, or rules", Ref: "handlers",
			Doc: "A compiled Go handler that decides every outcome, instead of rules; its body is the handler's own configuration."},
		{Type: "concurrency_key", Occurs: "optional", Body: concurrencyKeyBody,
			Doc: "At most `limit` handlers at once per key value, across every process that runs the pipeline against the same Redis (file and pipe sources: in the process)."},
		{Type: "throttle", Occurs: "optional", Body: throttleBody,
			Doc: "At most `limit` handler starts per `period`, per key value when `key` is set, across processes."},
		{Type: "dedupe", Occurs: "optional", Body: dedupeBody,
			Doc: "A message whose key already succeeded (`ack` or `drop`) within `window` is acknowledged without running the handler, counted as `duplicate`."},
	},
}

var ruleBody = &schema.Body{
	Attrs: []schema.Attr{
		{Name: "when", Type: "expression", Default: "`\"true\"`", Doc: "A boolean expression; the rule decides when it holds."},
		{Name: "outcome", Type: "expression", Required: true, Doc: "An outcome expression: `\"ack\"`, `\"drop\"`, `\"retry\"`, `\"retry_after('5s')\"`, `\"attempt < 3 ? retry : drop\"`."},
	},
	Blocks: []schema.Block{
		{Type: "emit", Labels: []string{"kind"}, Occurs: "any number", Body: emitBody, Ref: "emit-kinds",
			Doc: "A message to write when the rule decides, before the delivery is settled."},
	},
}

var emitBody = &schema.Body{Attrs: []schema.Attr{
	{Name: "key", Type: "string", Required: true, Doc: "The stream, list, channel or record key to write to."},
	{Name: "payload", Type: "expression", Default: "the message's payload unchanged", Doc: "The payload to write: a string result as its bytes, any other value as its JSON text (`\"{'id': payload.id}\"`)."},
	{Name: "headers", Type: "map of expressions", Default: "none", Doc: "Headers to write, each an expression whose result is written as a string (`{ source = \"'flowrun'\" }`); a header whose expression gives `nil` is not written (`\"headers['trace'] ?? nil\"`)."},
	{Name: "forward_headers", Type: "bool", Default: "false", Doc: "When true, the delivery's headers other than flowrun's own `x-` headers are written too, `headers` overriding them (a `nil` there leaves that header out)."},
	{Name: "redis", Type: "string", Default: "the source's redis block, else the only one", Doc: "The redis block to write through (`stream`, `list` and `pubsub` emits)."},
	{Name: "path", Type: "path", Default: "standard output", Doc: "A stream file to append the record to, relative to the HCL file (`record` emits only)."},
}}

// stepRuleBody is a rule of a workflow step (SPEC §16): a step of rules alone chooses the way
// on, so its rules take next, complete, output and fail, and their outcome defaults to ack.
var stepRuleBody = &schema.Body{
	Attrs: []schema.Attr{
		ruleBody.Attrs[0],
		{Name: "outcome", Type: "expression", Default: "`\"ack\"`", Doc: "An outcome expression, as a pipeline's rule takes: `ack` finishes the step, `retry` and `retry_after` retry it, `drop` ends the run `cancelled`, `dead_letter` fails the run."},
		schema.String("next").NonEmpty().DefaultDoc("the step's `next`").Describe("The step the run moves to when this rule decides, a step of the same workflow named literally; it overrides the step's `next`."),
		schema.Bool("complete").WithDefault(false).Describe("When true, the run completes after this step, whatever the step's `next`."),
		{Name: "output", Type: "expression", Default: "none", Doc: "What the step records as its output (`\"steps.charge.id\"`), seen by later steps as `steps.STEP`."},
		{Name: "fail", Type: "expression", Default: "none", Doc: "The run fails with this reason, an expression whose result is a string (`\"'declined: ' + steps.charge.reason\"`); under `on_failure = \"compensate\"` the compensations run."},
	},
	Blocks: ruleBody.Blocks,
}

// stepRuleAttrs are the rule attributes only a workflow step's rules take.
var stepRuleAttrs = []string{"next", "complete", "output", "fail"}

var (
	pipelineSchema = pipelineBody.HCL()
	ruleSchema     = stepRuleBody.HCL() // a pipeline's rule too, to say where next ... belong
	emitSchema     = emitBody.HCL()
)

// decodePipelineBlock decodes `pipeline "NAME" {}` with every default applied. Redis references
// are resolved later, in the merge pass.
func (d *fileDecoder) decodePipelineBlock(block *hcl.Block) (*Pipeline, hcl.Diagnostics) {
	pl := &Pipeline{
		Name:      block.Labels[0],
		File:      d.filename,
		DeclRange: block.DefRange,
	}
	content, diags := block.Body.Content(d.schemas.pipeline)
	nb := sortPipelineBlocks(content.Blocks)

	sourceBody, ds := d.decodePipelineSource(pl, block, nb.sources)
	diags = append(diags, ds...)

	flow, ds := d.decodeFlowBlocks(nb.flow)
	diags = append(diags, ds...)
	pl.Flow = flow

	attrs := content.Attributes
	diags = append(diags, workflowAttrsInPipeline(attrs)...)
	v := d.values(attrs, pipelineBody.Attrs, &diags)
	pl.Concurrency = v.Int("concurrency")
	pl.MaxAttempts = v.Int("max_attempts")
	pl.DeadLetter = v.String("dead_letter")
	pl.ShutdownTimeout = v.Duration("shutdown_timeout")
	pl.MaxHeld = v.Int("max_held")

	diags = append(diags, d.decodePipelineDecider(pl, block, nb.rules, nb.handlers)...)
	if a, ok := attrs["otherwise"]; ok {
		diags = append(diags, d.decodeOtherwise(pl, a)...)
	}
	if pl.Handler != nil {
		pl.CanRetry = true // a Go handler may return anything
	}
	if pl.Flow != nil {
		pl.CanRetry = true // a key expression that fails is a retry (SPEC §13)
	}

	if pl.Source != nil {
		diags = append(diags, d.decodeSourceConfig(pl, nb.sources[0], sourceBody, block, attrs)...)
	}
	if !diags.HasErrors() {
		diags = append(diags, lintPipeline(pl)...)
	}
	return pl, diags
}

// pipelineBlocks is a pipeline body's nested blocks sorted by kind.
type pipelineBlocks struct {
	sources, rules, handlers, flow []*hcl.Block
}

// sortPipelineBlocks groups a pipeline's nested blocks by what they declare.
func sortPipelineBlocks(blocks hcl.Blocks) pipelineBlocks {
	var nb pipelineBlocks
	for _, b := range blocks {
		switch b.Type {
		case "source":
			nb.sources = append(nb.sources, b)
		case "rule":
			nb.rules = append(nb.rules, b)
		case "handler":
			nb.handlers = append(nb.handlers, b)
		case "concurrency_key", "throttle", "dedupe":
			nb.flow = append(nb.flow, b)
		}
	}
	return nb
}

// decodePipelineSource decodes the pipeline's one source block into pl.Source and returns its
// remaining body for decodeSourceConfig; a missing or repeated source is an error.
func (d *fileDecoder) decodePipelineSource(pl *Pipeline, block *hcl.Block, sources []*hcl.Block) (*hcl.BodyContent, hcl.Diagnostics) {
	if len(sources) == 0 {
		return nil, hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Missing source",
			Detail:   `A pipeline needs one "source" block.`,
			Subject:  block.DefRange.Ptr(),
		}}
	}
	s, body, diags := d.decodeSourceBlock(sources[0])
	pl.Source = s
	for _, extra := range sources[1:] {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Duplicate source block",
			Detail:   fmt.Sprintf("A pipeline has exactly one source; the first is declared at %s.", where(sources[0].DefRange)),
			Subject:  extra.DefRange.Ptr(),
		})
	}
	return body, diags
}

// decodePipelineDecider decodes what decides each message's outcome: a rule set or a handler,
// exactly one of them.
func (d *fileDecoder) decodePipelineDecider(pl *Pipeline, block *hcl.Block, ruleBlocks, handlers []*hcl.Block) hcl.Diagnostics {
	_, diags := d.decodeDecider(pl, block, ruleBlocks, handlers, false)
	return diags
}

// decodeDecider decodes a pipeline's (or, with step, a workflow step's) rule set or handler,
// exactly one of them; a step's rules also return their next targets.
func (d *fileDecoder) decodeDecider(pl *Pipeline, block *hcl.Block, ruleBlocks, handlers []*hcl.Block, step bool) ([]stepRef, hcl.Diagnostics) {
	var diags hcl.Diagnostics
	what := "pipeline"
	if step {
		what = "step"
	}
	switch {
	case len(ruleBlocks) == 0 && len(handlers) == 0:
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Missing rules or handler",
			Detail:   fmt.Sprintf(`A %s needs one or more "rule" blocks or one "handler" block.`, what),
			Subject:  block.DefRange.Ptr(),
		})
	case len(ruleBlocks) > 0 && len(handlers) > 0:
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Conflicting blocks",
			Detail:   fmt.Sprintf(`A %s has either "rule" blocks or one "handler" block, not both.`, what),
			Subject:  handlers[0].DefRange.Ptr(),
		})
	}
	if len(handlers) > 0 {
		h, ds := d.decodeHandlerBlock(handlers[0])
		diags = append(diags, ds...)
		if len(ruleBlocks) == 0 {
			pl.Handler = h
		}
		for _, extra := range handlers[1:] {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Duplicate handler block",
				Detail:   fmt.Sprintf("A %s has one handler; the first is declared at %s.", what, where(handlers[0].DefRange)),
				Subject:  extra.DefRange.Ptr(),
			})
		}
	}
	var nexts []stepRef
	if len(ruleBlocks) > 0 {
		dr, ds := d.decodeRules(ruleBlocks, step)
		diags = append(diags, ds...)
		pl.Rules, pl.CanRetry, pl.bareRetries, pl.emitRefs = dr.rs, dr.canRetry, dr.bare, dr.refs
		nexts = dr.nexts
	}
	return nexts, diags
}

// decodeOtherwise compiles the "otherwise" outcome into pl.Rules; it belongs only to a rule set.
func (d *fileDecoder) decodeOtherwise(pl *Pipeline, a *hcl.Attribute) hcl.Diagnostics {
	if pl.Rules == nil {
		return hcl.Diagnostics{notHere(a, `"otherwise" belongs to a pipeline with rules; a handler decides every outcome itself.`)}
	}
	es, diags := d.exprSource(a.Expr, `"otherwise"`)
	if diags.HasErrors() {
		return diags
	}
	o, err := rules.CompileOutcome(es.text)
	if err != nil {
		diags = append(diags, es.compileDiag("Invalid otherwise", err))
	} else {
		o.SetLocator(es.locator())
	}
	pl.Rules.Otherwise = o
	pl.CanRetry = pl.CanRetry || mayRetry(es.text)
	if bare, _ := retryNames(es.text); bare {
		pl.bareRetries = append(pl.bareRetries, a.Expr.Range())
	}
	return diags
}

// decodedRules is what decodeRules found: the rule set, whether an outcome may retry, where
// outcomes name the bare retry, the emits left to the merge pass, and (in a workflow step) the
// rules' next targets.
type decodedRules struct {
	rs       *rules.RuleSet
	canRetry bool
	bare     []hcl.Range
	refs     []emitRef
	nexts    []stepRef
}

// decodeRules decodes the rule blocks of a pipeline, or of a workflow step when step is set, in
// order.
func (d *fileDecoder) decodeRules(blocks []*hcl.Block, step bool) (decodedRules, hcl.Diagnostics) {
	var diags hcl.Diagnostics
	out := decodedRules{rs: &rules.RuleSet{}}
	seen := map[string]hcl.Range{}
	for _, b := range blocks {
		name := b.Labels[0]
		diags = append(diags, checkName(b)...)
		if prev, dup := seen[name]; dup {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Duplicate rule block",
				Detail:   fmt.Sprintf("rule %q was already declared at %s.", name, where(prev)),
				Subject:  b.DefRange.Ptr(),
			})
			continue
		}
		seen[name] = b.DefRange
		r, retry, bareAt, ruleRefs, ds := d.decodeRuleBlock(b, step)
		diags = append(diags, ds...)
		if bareAt != nil {
			out.bare = append(out.bare, *bareAt)
		}
		for _, ref := range ruleRefs {
			ref.rule = len(out.rs.Rules)
			out.refs = append(out.refs, ref)
		}
		if step {
			nexts, ds := d.decodeStepRuleAttrs(b, r)
			diags = append(diags, ds...)
			out.nexts = append(out.nexts, nexts...)
		}
		out.rs.Rules = append(out.rs.Rules, *r)
		out.canRetry = out.canRetry || retry
	}
	return out, diags
}

// decodeRuleBlock decodes `rule "NAME" {}`. It also reports whether the outcome may retry,
// where it names the bare retry outcome (nil when it does not), and the emits whose redis block
// is left to the merge pass. In a workflow step (step) the outcome defaults to ack; elsewhere
// it is required and the step's own attributes (next ...) are refused.
func (d *fileDecoder) decodeRuleBlock(block *hcl.Block, step bool) (*rules.Rule, bool, *hcl.Range, []emitRef, hcl.Diagnostics) {
	r := &rules.Rule{Name: block.Labels[0]}
	content, diags := block.Body.Content(ruleSchema)
	canRetry := false
	var bareAt *hcl.Range

	if a, ok := content.Attributes["when"]; ok {
		es, ds := d.exprSource(a.Expr, `"when"`)
		diags = append(diags, ds...)
		if !ds.HasErrors() {
			c, err := rules.CompileCondition(es.text)
			if err != nil {
				diags = append(diags, es.compileDiag("Invalid rule", err))
			} else {
				c.SetLocator(es.locator())
			}
			r.When = c
		}
	}
	if a, ok := content.Attributes["outcome"]; ok {
		es, ds := d.exprSource(a.Expr, `"outcome"`)
		diags = append(diags, ds...)
		if !ds.HasErrors() {
			o, err := rules.CompileOutcome(es.text)
			if err != nil {
				diags = append(diags, es.compileDiag("Invalid rule", err))
			} else {
				o.SetLocator(es.locator())
			}
			r.Outcome = o
			canRetry = mayRetry(es.text)
			if bare, _ := retryNames(es.text); bare {
				bareAt = a.Expr.Range().Ptr()
			}
		}
	} else if !step {
		diags = append(diags, missingArg(block, "outcome", "in a rule block"))
	}
	if !step {
		for _, name := range stepRuleAttrs {
			if a, ok := content.Attributes[name]; ok {
				diags = append(diags, notHere(a, fmt.Sprintf("%q belongs to a rule of a workflow step, which chooses the way a run goes on; a pipeline's rule decides an outcome and emits.", name)))
			}
		}
	}

	var refs []emitRef
	for _, b := range content.Blocks {
		e, ref, ds := d.decodeEmitBlock(b)
		diags = append(diags, ds...)
		if e == nil {
			continue
		}
		if ref != nil {
			ref.emit = len(r.Emits)
			refs = append(refs, *ref)
		}
		r.Emits = append(r.Emits, *e)
	}
	return r, canRetry, bareAt, refs, diags
}

// decodeEmitBlock decodes `emit "KIND" {}` of a registered emit kind. For kinds that write to
// Redis it returns an emitRef, for the merge pass to resolve the redis block.
func (d *fileDecoder) decodeEmitBlock(block *hcl.Block) (*rules.EmitSpec, *emitRef, hcl.Diagnostics) {
	kind := block.Labels[0]
	content, diags := block.Body.Content(emitSchema)
	ek, known := transports.LookupEmit(kind)
	if !known {
		names := d.schemas.emitNames
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Unknown emit kind",
			Detail: fmt.Sprintf("There is no emit kind %q.%s Emit kinds are %s.",
				kind, didYouMean(kind, names), quoteList(names, "and")),
			Subject: block.LabelRanges[0].Ptr(),
		})
		return nil, nil, diags
	}
	e := &rules.EmitSpec{Target: engine.Target{Kind: kind}}
	attrs := content.Attributes

	if !opt(attrs, "key", d.nonEmpty, &e.Key, &diags) {
		diags = append(diags, missingArg(block, "key", "in an emit block"))
	}
	if a, ok := attrs["payload"]; ok {
		es, ds := d.exprSource(a.Expr, `"payload"`)
		diags = append(diags, ds...)
		if !ds.HasErrors() {
			v, err := rules.CompileValue(es.text)
			if err != nil {
				diags = append(diags, es.compileDiag("Invalid rule", err))
			} else {
				v.SetLocator(es.locator())
			}
			e.Payload = v
		}
	}
	if a, ok := attrs["headers"]; ok {
		diags = append(diags, d.decodeEmitHeaders(a, e)...)
	}
	if a, ok := attrs["forward_headers"]; ok {
		diags = append(diags, d.decodeForwardHeaders(a, e)...)
	}
	if a, ok := attrs["path"]; ok {
		if !ek.Path {
			diags = append(diags, notHere(a, fmt.Sprintf(`"path" only applies to %s; this emit is %s %s.`,
				d.schemas.emitsTaking(func(e transports.EmitKind) bool { return e.Path }), article(kind), kind)))
		} else {
			v, ds := d.nonEmpty(a)
			diags = append(diags, ds...)
			if !ds.HasErrors() {
				e.Target.Path = resolvePath(d.dir, v)
			}
		}
	}

	var ref *emitRef
	a, hasRedis := attrs["redis"]
	switch {
	case hasRedis && !ek.Redis:
		detail := fmt.Sprintf(`"redis" only applies to %s; this emit is %s %s.`,
			d.schemas.emitsTaking(func(e transports.EmitKind) bool { return e.Redis }), article(kind), kind)
		if ek.GoesTo != "" {
			detail = fmt.Sprintf(`"redis" only applies to %s; %s %s goes to %s.`,
				d.schemas.emitsTaking(func(e transports.EmitKind) bool { return e.Redis }), article(kind), kind, ek.GoesTo)
		}
		diags = append(diags, notHere(a, detail))
	case ek.Redis:
		ref = &emitRef{declRange: block.DefRange}
		if hasRedis {
			v, ds := d.nonEmpty(a)
			diags = append(diags, ds...)
			ref.name, ref.nameRange = v, a.Expr.Range()
		}
	}
	return e, ref, diags
}

// decodeForwardHeaders decodes `forward_headers = true|false`. A list of names is a common
// guess (other tools forward selected headers); the diagnostic says how to do that here.
func (d *fileDecoder) decodeForwardHeaders(attr *hcl.Attribute, e *rules.EmitSpec) hcl.Diagnostics {
	if v, ds := attr.Expr.Value(d.ctx); !ds.HasErrors() && !v.IsNull() && (v.Type().IsTupleType() || v.Type().IsListType() || v.Type().IsSetType()) {
		return hcl.Diagnostics{invalidValue(attr, `"forward_headers" is true or false: true forwards every header but flowrun's own x- headers. `+
			`To write only some headers, name them in "headers" instead: headers = { tenant = "headers['tenant'] ?? nil" }.`)}
	}
	if v, ds := attr.Expr.Value(d.ctx); !ds.HasErrors() && v.Type() == cty.String && v.IsKnown() && !v.IsNull() {
		if s := v.AsString(); s == "all" || s == "*" {
			return hcl.Diagnostics{invalidValue(attr, fmt.Sprintf(`"forward_headers" is true or false; for every header write forward_headers = true, not %q.`, s))}
		}
	}
	v, diags := d.boolean(attr)
	e.ForwardHeaders = v && !diags.HasErrors()
	return diags
}

// decodeEmitHeaders decodes `headers = { name = "expression", ... }` in the order written.
func (d *fileDecoder) decodeEmitHeaders(attr *hcl.Attribute, e *rules.EmitSpec) hcl.Diagnostics {
	pairs, diags := hcl.ExprMap(attr.Expr)
	if diags.HasErrors() {
		return diags
	}
	e.Headers = map[string]*rules.Value{}
	seen := map[string]hcl.Range{}
	for _, p := range pairs {
		kv, ds := p.Key.Value(d.ctx)
		diags = append(diags, ds...)
		if ds.HasErrors() {
			continue
		}
		kv, err := convertString(kv)
		if err != nil || kv.AsString() == "" {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Invalid header name",
				Detail:   "A header name must be a non-empty string.",
				Subject:  p.Key.Range().Ptr(),
			})
			continue
		}
		name := kv.AsString()
		if prev, dup := seen[name]; dup {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Duplicate header",
				Detail:   fmt.Sprintf("Header %q was already set at %s.", name, where(prev)),
				Subject:  p.Key.Range().Ptr(),
			})
			continue
		}
		seen[name] = p.Key.Range()
		es, ds := d.exprSource(p.Value, fmt.Sprintf("header %q", name))
		diags = append(diags, ds...)
		if ds.HasErrors() {
			continue
		}
		v, err := rules.CompileValue(es.text)
		if err != nil {
			diags = append(diags, es.compileDiag("Invalid rule", err))
		} else {
			v.SetLocator(es.locator())
		}
		e.Headers[name] = v
		e.HeaderOrder = append(e.HeaderOrder, name)
	}
	return diags
}

// decodeHandlerBlock looks up `handler "NAME"` among the compiled Go handlers and lets the
// handler decode its own body, so its errors carry positions too (a missing attribute is
// reported at the block's header, as everywhere in flowrun's configuration).
func (d *fileDecoder) decodeHandlerBlock(block *hcl.Block) (*Handler, hcl.Diagnostics) {
	name := block.Labels[0]
	p, ok := handlers.Lookup(name)
	if !ok {
		names := handlers.Names()
		detail := fmt.Sprintf("No Go handler named %q is compiled into this binary.%s", name, didYouMean(name, names))
		if len(names) > 0 {
			detail += fmt.Sprintf(" Compiled handlers: %s.", quoteList(names, "and"))
		}
		return nil, hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Unknown handler",
			Detail:   detail,
			Subject:  block.LabelRanges[0].Ptr(),
		}}
	}
	cfg, diags := p.Decode(block.Body, d.ctx, block.DefRange)
	return &Handler{Name: name, Plugin: p, Config: cfg, DeclRange: block.DefRange}, diags
}
