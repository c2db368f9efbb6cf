package config

import (
	"fmt"
	"runtime"

	"github.com/hashicorp/hcl/v2"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/handlers"
	"github.com/flowrun/flowrun/rules"
)

var pipelineSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "concurrency"}, {Name: "max_attempts"}, {Name: "dead_letter"},
		{Name: "delayed_retry"}, {Name: "delay_key"}, {Name: "shutdown_timeout"},
		{Name: "out_retry"}, {Name: "retry_to"}, {Name: "otherwise"}, {Name: "max_held"},
	},
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "source", LabelNames: []string{"kind"}},
		{Type: "rule", LabelNames: []string{"name"}},
		{Type: "handler", LabelNames: []string{"name"}},
	},
}

var ruleSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "when"}, {Name: "outcome"}},
	Blocks:     []hcl.BlockHeaderSchema{{Type: "emit", LabelNames: []string{"kind"}}},
}

var emitSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "redis"}, {Name: "key"}, {Name: "payload"}, {Name: "headers"}, {Name: "path"},
	},
}

var emitKinds = []string{EmitStream, EmitList, EmitPubSub, EmitRecord}

// decodePipelineBlock decodes `pipeline "NAME" {}` with every default applied. Redis references
// are resolved later, in the merge pass.
func (d *fileDecoder) decodePipelineBlock(block *hcl.Block) (*Pipeline, hcl.Diagnostics) {
	pl := &Pipeline{
		Name:            block.Labels[0],
		File:            d.filename,
		Concurrency:     runtime.NumCPU(),
		DelayedRetry:    DelayedRetryRuntime,
		ShutdownTimeout: DefaultShutdownTimeout,
		MaxHeld:         DefaultMaxHeld,
		DeclRange:       block.DefRange,
	}
	content, diags := block.Body.Content(pipelineSchema)

	var sources, ruleBlocks, handlers []*hcl.Block
	for _, b := range content.Blocks {
		switch b.Type {
		case "source":
			sources = append(sources, b)
		case "rule":
			ruleBlocks = append(ruleBlocks, b)
		case "handler":
			handlers = append(handlers, b)
		}
	}

	switch len(sources) {
	case 0:
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Missing source",
			Detail:   `A pipeline needs one "source" block.`,
			Subject:  block.DefRange.Ptr(),
		})
	default:
		s, ds := d.decodeSourceBlock(sources[0], pl.Name)
		diags = append(diags, ds...)
		pl.Source = s
		for _, extra := range sources[1:] {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Duplicate source block",
				Detail:   fmt.Sprintf("A pipeline has exactly one source; the first is declared at %s.", where(sources[0].DefRange)),
				Subject:  extra.DefRange.Ptr(),
			})
		}
	}

	attrs := content.Attributes
	opt(attrs, "concurrency", d.count, &pl.Concurrency, &diags)
	opt(attrs, "max_attempts", d.count, &pl.MaxAttempts, &diags)
	opt(attrs, "dead_letter", d.nonEmpty, &pl.DeadLetter, &diags)
	opt(attrs, "shutdown_timeout", d.nonNegativeDuration, &pl.ShutdownTimeout, &diags)
	opt(attrs, "max_held", d.count, &pl.MaxHeld, &diags)
	if a, ok := attrs["delayed_retry"]; ok {
		v, ds := d.str(a)
		diags = append(diags, ds...)
		if !ds.HasErrors() && v != DelayedRetryRuntime && v != DelayedRetryDurableZSet {
			opts := []string{DelayedRetryRuntime, DelayedRetryDurableZSet}
			diags = append(diags, invalidValue(a, fmt.Sprintf("%q is not a delayed_retry mode.%s It is %s.",
				v, didYouMean(v, opts), quoteList(opts, "or"))))
		} else if !ds.HasErrors() {
			pl.DelayedRetry = v
		}
	}
	for _, f := range []struct {
		name string
		dst  *string
	}{{"delay_key", &pl.DelayKey}, {"out_retry", &pl.OutRetry}, {"retry_to", &pl.RetryTo}} {
		if a, ok := attrs[f.name]; ok {
			v, ds := d.nonEmpty(a)
			diags = append(diags, ds...)
			*f.dst = v
		}
	}
	if a, ok := attrs["delay_key"]; ok {
		pl.delayKeyRange = a.Expr.Range().Ptr()
	}

	// A rule set or a handler, exactly one of them.
	switch {
	case len(ruleBlocks) == 0 && len(handlers) == 0:
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Missing rules or handler",
			Detail:   `A pipeline needs one or more "rule" blocks or one "handler" block.`,
			Subject:  block.DefRange.Ptr(),
		})
	case len(ruleBlocks) > 0 && len(handlers) > 0:
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Conflicting blocks",
			Detail:   `A pipeline has either "rule" blocks or one "handler" block, not both.`,
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
				Detail:   fmt.Sprintf("A pipeline has one handler; the first is declared at %s.", where(handlers[0].DefRange)),
				Subject:  extra.DefRange.Ptr(),
			})
		}
	}
	if len(ruleBlocks) > 0 {
		rs, canRetry, refs, ds := d.decodeRules(ruleBlocks)
		diags = append(diags, ds...)
		pl.Rules, pl.CanRetry, pl.emitRefs = rs, canRetry, refs
	}
	if a, ok := attrs["otherwise"]; ok {
		if pl.Rules == nil {
			diags = append(diags, notHere(a, `"otherwise" belongs to a pipeline with rules; a handler decides every outcome itself.`))
		} else {
			es, ds := d.exprSource(a.Expr, `"otherwise"`)
			diags = append(diags, ds...)
			if !ds.HasErrors() {
				o, err := rules.CompileOutcome(es.text)
				if err != nil {
					diags = append(diags, es.compileDiag("Invalid otherwise", err))
				}
				pl.Rules.Otherwise = o
				pl.CanRetry = pl.CanRetry || mayRetry(es.text)
			}
		}
	}
	if pl.Handler != nil {
		pl.CanRetry = true // a Go handler may return anything
	}

	diags = append(diags, pl.checkCombinations(block, attrs)...)
	return pl, diags
}

// checkCombinations enforces the pipeline attributes that only some sources take (SPEC §2).
func (pl *Pipeline) checkCombinations(block *hcl.Block, attrs hcl.Attributes) hcl.Diagnostics {
	src := pl.Source
	if src == nil {
		return nil
	}
	var diags hcl.Diagnostics
	sourceIs := fmt.Sprintf("this pipeline's source is %s %s source", article(src.Kind), src.Kind)

	for _, name := range []string{"delayed_retry", "delay_key"} {
		if a, ok := attrs[name]; ok && !src.IsStream() {
			diags = append(diags, notHere(a, fmt.Sprintf("%q only applies to stream sources (stream, claiming and reclaim); %s.", name, sourceIs)))
		}
	}
	if src.IsStream() {
		if a, ok := attrs["delay_key"]; ok && pl.DelayedRetry != DelayedRetryDurableZSet {
			diags = append(diags, notHere(a, `"delay_key" is only used with delayed_retry = "durable_zset".`))
		}
		if pl.DelayedRetry == DelayedRetryDurableZSet && pl.DelayKey == "" && src.Stream != "" {
			pl.DelayKey = src.Stream + ":delayed"
		}
	} else {
		pl.DelayedRetry, pl.DelayKey = DelayedRetryRuntime, ""
	}

	// A pipeline never reads its own dead letters (SPEC §2): a file source skips the dead-letter
	// key by itself, but not when told to read exactly that key, and a stream or list would take
	// every dead letter back as new work.
	if a, ok := attrs["dead_letter"]; ok && pl.DeadLetter != "" {
		if own := ownKey(src); own != "" && own == pl.DeadLetter {
			diags = append(diags, invalidValue(a, fmt.Sprintf("%q is the key this pipeline's %s source reads, so every dead letter would be read back as new work; choose another dead_letter key.",
				pl.DeadLetter, src.Kind)))
		}
	}

	if a, ok := attrs["out_retry"]; ok && src.Kind != KindPipe {
		diags = append(diags, notHere(a, fmt.Sprintf(`"out_retry" only applies to a pipe source; %s.`, sourceIs)))
	}
	if _, ok := attrs["out_retry"]; !ok && src.Kind == KindPipe {
		diags = append(diags, missingArg(block, "out_retry", "for a pipeline with a pipe source (the key under which retry copies leave on stdout)"))
	}

	patterns := src.Kind == KindPubSub && len(src.Patterns) > 0
	if a, ok := attrs["retry_to"]; ok && !patterns {
		diags = append(diags, notHere(a, fmt.Sprintf(`"retry_to" only applies to a pubsub source with "patterns"; %s.`, describeForRetryTo(src))))
	}
	if _, ok := attrs["retry_to"]; !ok && patterns && pl.CanRetry {
		diags = append(diags, missingArg(block, "retry_to",
			"for a pipeline that reads pubsub patterns and can retry (the channel retry copies are published to)"))
	}
	return diags
}

// ownKey is the key a source reads and its dead letters could be written to: the stream, the
// list key, or a file source's key filter ("" for the others).
func ownKey(src *Source) string {
	switch src.Kind {
	case KindStream, KindClaiming, KindReclaim:
		return src.Stream
	case KindList, KindFile:
		return src.Key
	}
	return ""
}

func describeForRetryTo(src *Source) string {
	if src.Kind == KindPubSub {
		return "this pubsub source reads channels, and copies go back to the channel they came from"
	}
	return fmt.Sprintf("this pipeline's source is %s %s source", article(src.Kind), src.Kind)
}

// decodeRules decodes the rule blocks of a pipeline, in order.
func (d *fileDecoder) decodeRules(blocks []*hcl.Block) (*rules.RuleSet, bool, []emitRef, hcl.Diagnostics) {
	var diags hcl.Diagnostics
	rs := &rules.RuleSet{}
	canRetry := false
	var refs []emitRef
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
		r, retry, ruleRefs, ds := d.decodeRuleBlock(b)
		diags = append(diags, ds...)
		for _, ref := range ruleRefs {
			ref.rule = len(rs.Rules)
			refs = append(refs, ref)
		}
		rs.Rules = append(rs.Rules, *r)
		canRetry = canRetry || retry
	}
	return rs, canRetry, refs, diags
}

// decodeRuleBlock decodes `rule "NAME" {}`. It also reports whether the outcome may retry, and
// the emits whose redis block is left to the merge pass.
func (d *fileDecoder) decodeRuleBlock(block *hcl.Block) (*rules.Rule, bool, []emitRef, hcl.Diagnostics) {
	r := &rules.Rule{Name: block.Labels[0]}
	content, diags := block.Body.Content(ruleSchema)
	canRetry := false

	if a, ok := content.Attributes["when"]; ok {
		es, ds := d.exprSource(a.Expr, `"when"`)
		diags = append(diags, ds...)
		if !ds.HasErrors() {
			c, err := rules.CompileCondition(es.text)
			if err != nil {
				diags = append(diags, es.compileDiag("Invalid rule", err))
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
			}
			r.Outcome = o
			canRetry = mayRetry(es.text)
		}
	} else {
		diags = append(diags, missingArg(block, "outcome", "in a rule block"))
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
	return r, canRetry, refs, diags
}

// decodeEmitBlock decodes `emit "KIND" {}`. For Redis kinds it returns an emitRef, for the merge
// pass to resolve the redis block.
func (d *fileDecoder) decodeEmitBlock(block *hcl.Block) (*rules.EmitSpec, *emitRef, hcl.Diagnostics) {
	kind := block.Labels[0]
	content, diags := block.Body.Content(emitSchema)
	known := false
	for _, k := range emitKinds {
		known = known || k == kind
	}
	if !known {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Unknown emit kind",
			Detail: fmt.Sprintf("There is no emit kind %q.%s Emit kinds are %s.",
				kind, didYouMean(kind, emitKinds), quoteList(emitKinds, "and")),
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
			}
			e.Payload = v
		}
	}
	if a, ok := attrs["headers"]; ok {
		diags = append(diags, d.decodeEmitHeaders(a, e)...)
	}
	if a, ok := attrs["path"]; ok {
		if kind != EmitRecord {
			diags = append(diags, notHere(a, fmt.Sprintf(`"path" only applies to a record emit; this emit is %s %s.`, article(kind), kind)))
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
	case hasRedis && kind == EmitRecord:
		diags = append(diags, notHere(a, `"redis" only applies to stream, list and pubsub emits; a record goes to stdout or a file.`))
	case kind != EmitRecord:
		ref = &emitRef{declRange: block.DefRange}
		if hasRedis {
			v, ds := d.nonEmpty(a)
			diags = append(diags, ds...)
			ref.name, ref.nameRange = v, a.Expr.Range()
		}
	}
	return e, ref, diags
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
