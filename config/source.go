package config

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"

	"github.com/flowrun/flowrun/internal/hclutil"
	"github.com/flowrun/flowrun/schema"
	"github.com/flowrun/flowrun/transports"
)

// SourceRedis is the attribute config adds to the source block of every kind that reads from a
// redis block (its Config is a transports.RedisBlockReader), and resolves itself.
var SourceRedis = schema.Attr{
	Name: "redis", Type: "string", Default: "the only redis block",
	Doc: "The redis block to read from; optional when exactly one is declared.",
}

// schemas is what config reads of the transport registry, once per load: the source kinds and
// emit kinds in their Order, and the schemas that decode source blocks and pipeline blocks with
// every kind's attributes, so that a name another kind takes is reported with the kinds that
// take it, and a misspelt one gets hcl's own "Did you mean".
type schemas struct {
	kinds     []transports.Kind
	kindNames []string
	byKind    map[string]transports.Kind
	takes     map[string]map[string]bool // kind → the attributes and block types of its source block
	source    *hcl.BodySchema            // every kind's source block attributes and blocks

	pipeline      *hcl.BodySchema                    // pipelineSchema and every kind's pipeline attributes
	pipelineAttrs []string                           // the kinds' pipeline attributes, in Order
	appliesTo     map[string]transports.PipelineAttr // the first kind's declaration of each

	emits     []transports.EmitKind
	emitNames []string

	workflow, start, step *hcl.BodySchema // a workflow's blocks (workflowSchemas)
}

func newSchemas() *schemas {
	s := &schemas{
		kinds:     transports.Kinds(),
		byKind:    map[string]transports.Kind{},
		takes:     map[string]map[string]bool{},
		source:    &hcl.BodySchema{},
		appliesTo: map[string]transports.PipelineAttr{},
		emits:     transports.EmitKinds(),
	}
	fixed := map[string]bool{}
	s.pipeline = &hcl.BodySchema{Blocks: pipelineSchema.Blocks}
	for _, a := range pipelineSchema.Attributes {
		fixed[a.Name] = true
		s.pipeline.Attributes = append(s.pipeline.Attributes, a)
	}
	for _, n := range workflowNotPipeline {
		fixed[n] = true
		s.pipeline.Attributes = append(s.pipeline.Attributes, hcl.AttributeSchema{Name: n})
	}
	seenAttr, seenBlock := map[string]bool{}, map[string]bool{}
	for _, k := range s.kinds {
		s.kindNames = append(s.kindNames, k.Name)
		s.byKind[k.Name] = k
		takes := map[string]bool{}
		s.takes[k.Name] = takes
		body := k.BodySchema()
		attrs := body.Attributes
		if k.ReadsRedisBlock() {
			attrs = append([]hcl.AttributeSchema{{Name: SourceRedis.Name}}, attrs...)
		}
		for _, a := range attrs {
			takes[a.Name] = true
			if !seenAttr[a.Name] {
				seenAttr[a.Name] = true
				s.source.Attributes = append(s.source.Attributes, hcl.AttributeSchema{Name: a.Name})
			}
		}
		for _, b := range body.Blocks {
			takes["block "+b.Type] = true
			if !seenBlock[b.Type] {
				seenBlock[b.Type] = true
				s.source.Blocks = append(s.source.Blocks, b)
			}
		}
		for _, pa := range k.PipelineAttrs {
			if fixed[pa.Name] {
				panic(fmt.Sprintf("config: source kind %q declares the pipeline attribute %q, which every pipeline has", k.Name, pa.Name))
			}
			if _, seen := s.appliesTo[pa.Name]; !seen {
				s.appliesTo[pa.Name] = pa
				s.pipelineAttrs = append(s.pipelineAttrs, pa.Name)
				s.pipeline.Attributes = append(s.pipeline.Attributes, hcl.AttributeSchema{Name: pa.Name})
			}
		}
	}
	for _, e := range s.emits {
		s.emitNames = append(s.emitNames, e.Name)
	}
	s.workflow, s.start, s.step = workflowSchemas(s.pipelineAttrs)
	return s
}

// kindsTaking lists the source kinds whose block takes an attribute (or "block TYPE").
func (s *schemas) kindsTaking(name string) []string {
	var kinds []string
	for _, k := range s.kindNames {
		if s.takes[k][name] {
			kinds = append(kinds, k)
		}
	}
	return kinds
}

// emitsTaking describes the emit kinds for which want holds: `a record emit`, or
// `stream, list and pubsub emits`.
func (s *schemas) emitsTaking(want func(transports.EmitKind) bool) string {
	var names []string
	for _, e := range s.emits {
		if want(e) {
			names = append(names, e.Name)
		}
	}
	if len(names) == 1 {
		return fmt.Sprintf("%s %s emit", article(names[0]), names[0])
	}
	return hclutil.List(names, "and") + " emits"
}

// decodeSourceBlock checks `source "KIND" {}` against its kind's schema and decodes its redis
// attribute. It returns nil when the kind is unknown (the body is still checked for unknown
// attributes); otherwise the Source, whose Config decodeSourceConfig fills, and the body's
// content that belongs to the kind.
func (d *fileDecoder) decodeSourceBlock(block *hcl.Block) (*Source, *hcl.BodyContent, hcl.Diagnostics) {
	kind := block.Labels[0]
	content, diags := block.Body.Content(d.schemas.source)
	k, known := d.schemas.byKind[kind]
	if !known {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Unknown source kind",
			Detail: fmt.Sprintf("There is no source kind %q.%s Source kinds are %s.",
				kind, didYouMean(kind, d.schemas.kindNames), quoteList(d.schemas.kindNames, "and")),
			Subject: block.LabelRanges[0].Ptr(),
		})
		return nil, nil, diags
	}
	takes := d.schemas.takes[kind]
	for _, name := range sortedKeys(content.Attributes) {
		if !takes[name] {
			a := content.Attributes[name]
			diags = append(diags, notHere(a, fmt.Sprintf("%q is not valid on %s %s source; it is taken by %s sources.",
				name, article(kind), kind, quoteList(d.schemas.kindsTaking(name), "and"))))
			delete(content.Attributes, name)
		}
	}
	var blocks hcl.Blocks
	for _, b := range content.Blocks {
		if !takes["block "+b.Type] {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Unsupported block type",
				Detail: fmt.Sprintf("A %s block is not valid on %s %s source; it is taken by %s sources.",
					b.Type, article(kind), kind, quoteList(d.schemas.kindsTaking("block "+b.Type), "and")),
				Subject: b.DefRange.Ptr(),
			})
			continue
		}
		blocks = append(blocks, b)
	}
	content.Blocks = blocks

	s := &Source{Kind: kind, DeclRange: block.DefRange, kind: k}
	if a, ok := content.Attributes["redis"]; ok {
		v, ds := d.nonEmpty(a)
		diags = append(diags, ds...)
		s.Redis, s.redisRange = v, a.Expr.Range()
		delete(content.Attributes, "redis")
	}
	for _, a := range k.BodySchema().Attributes {
		if _, ok := content.Attributes[a.Name]; a.Required && !ok {
			diags = append(diags, missingArg(block, a.Name, fmt.Sprintf("for %s %s source", article(kind), kind)))
		}
	}
	return s, content, diags
}

// decodeSourceConfig has the source's kind decode its block, once the rest of the pipeline is
// known: the pipeline attributes only some kinds take (SPEC §2) go to the kind when it takes
// them, and are reported here when it does not.
func (d *fileDecoder) decodeSourceConfig(pl *Pipeline, sourceBlock *hcl.Block, content *hcl.BodyContent, block *hcl.Block, attrs hcl.Attributes) hcl.Diagnostics {
	src := pl.Source
	var diags hcl.Diagnostics
	takes := map[string]bool{}
	for _, pa := range src.kind.PipelineAttrs {
		takes[pa.Name] = true
	}
	own := hcl.Attributes{}
	for _, name := range d.schemas.pipelineAttrs {
		a, ok := attrs[name]
		switch {
		case !ok:
		case takes[name]:
			own[name] = a
		default:
			diags = append(diags, notHere(a, fmt.Sprintf("%q only applies to %s; this pipeline's source is %s %s source.",
				name, d.schemas.appliesTo[name].AppliesTo, article(src.Kind), src.Kind)))
		}
	}
	p := transports.Pipeline{
		Name:       pl.Name,
		DefRange:   block.DefRange,
		Attributes: own,
		DeadLetter: pl.DeadLetter,
		CanRetry:   pl.CanRetry,
	}
	if a, ok := attrs["dead_letter"]; ok {
		p.DeadLetterRange = a.Expr.Range()
	}
	b := &transports.Block{
		Kind:             src.Kind,
		DefRange:         sourceBlock.DefRange,
		Body:             content,
		Pipeline:         p,
		Dir:              d.dir,
		Consumer:         d.consumer,
		ConsumerOverride: d.override,
		EvalContext:      d.ctx,
	}
	src.Config = src.kind.New()
	src.Config.Decode(b)
	return append(diags, b.Diagnostics()...)
}
