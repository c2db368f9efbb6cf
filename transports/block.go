package transports

import (
	"fmt"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/flowrun/flowrun/internal/hclutil"
	"github.com/flowrun/flowrun/schema"
)

// Block is a source block as config hands it to Config.Decode: what was written, where, and
// what the pipeline around it says. Mistakes found while decoding are collected in it.
type Block struct {
	// Kind is the block's label.
	Kind string
	// DefRange is the block's header (`source "KIND"`): a missing attribute is reported there.
	DefRange hcl.Range
	// Body holds the attributes and blocks of the kind's Schema that were written. config has
	// reported every other one, and every missing Required attribute, already.
	Body *hcl.BodyContent
	// Pipeline is the pipeline that holds the block.
	Pipeline Pipeline
	// Dir is the absolute folder of the HCL file: Attributes.Path resolves against it.
	Dir string
	// Consumer is the default consumer name, the host name unless `--consumer` was given, in
	// which case ConsumerOverride says it overrides the names written in files too.
	Consumer         string
	ConsumerOverride bool
	// EvalContext evaluates the file's expressions (its functions: env, file, jsonencode).
	EvalContext *hcl.EvalContext

	diags hcl.Diagnostics
}

// Pipeline is what a source block's decoder may read of its pipeline.
type Pipeline struct {
	Name string
	// DefRange is the pipeline block's header, where a missing pipeline attribute is reported.
	DefRange hcl.Range
	// Attributes are the pipeline attributes of Kind.PipelineAttrs that were written.
	Attributes hcl.Attributes
	// DeadLetter is the dead_letter key ("" when none); DeadLetterRange its value's range.
	DeadLetter      string
	DeadLetterRange hcl.Range
	// CanRetry says whether the pipeline may produce retry or retry_after: a rule's outcome or
	// otherwise expression that could, or a Go handler.
	CanRetry bool
}

// Attrs returns the source block's attributes, with typed decoders.
func (b *Block) Attrs() Attributes {
	var m hcl.Attributes
	if b.Body != nil {
		m = b.Body.Attributes
	}
	return Attributes{m: m, b: b}
}

// PipelineAttrs returns the pipeline attributes of Kind.PipelineAttrs that were written, with
// typed decoders.
func (b *Block) PipelineAttrs() Attributes { return Attributes{m: b.Pipeline.Attributes, b: b} }

// Report adds diagnostics.
func (b *Block) Report(diags ...*hcl.Diagnostic) { b.diags = append(b.diags, diags...) }

// OneOf reports unless exactly one of the attributes x and y (nil when not written) is: both,
// at the later one, with the detail both; neither, at the block, with the detail neither.
func (b *Block) OneOf(x, y *hcl.Attribute, both, neither string) {
	switch {
	case x != nil && y != nil:
		second := y
		if x.NameRange.Start.Byte > y.NameRange.Start.Byte {
			second = x
		}
		b.Report(&hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Conflicting arguments", Detail: both, Subject: second.NameRange.Ptr()})
	case x == nil && y == nil:
		b.Report(&hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Missing required argument", Detail: neither, Subject: b.DefRange.Ptr()})
	}
}

// Diagnostics returns what was reported.
func (b *Block) Diagnostics() hcl.Diagnostics { return b.diags }

// RejectDeadLetterKey reports the pipeline's dead_letter when it is key, the key the source
// reads: every dead letter would be read back as new work (SPEC §2).
func (b *Block) RejectDeadLetterKey(key string) {
	p := b.Pipeline
	if key == "" || p.DeadLetter != key {
		return
	}
	b.Report(&hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "Invalid value",
		Detail: fmt.Sprintf("%q is the key this pipeline's %s source reads, so every dead letter would be read back as new work; choose another dead_letter key.",
			p.DeadLetter, b.Kind),
		Subject: p.DeadLetterRange.Ptr(),
	})
}

// Values decodes the source block's written attributes against decls, the kind's declared
// Attrs: each value is the written one, else its declared default, the context defaults
// (schema.FromPipelineName, schema.FromHostName) taken from b. A value is decoded when it is
// first read, and its mistakes are reported to b then.
func (b *Block) Values(decls []schema.Attr) *schema.Values {
	var m hcl.Attributes
	if b.Body != nil {
		m = b.Body.Attributes
	}
	return b.values(m, decls)
}

// PipelineValues decodes the pipeline attributes of Kind.PipelineAttrs that were written
// against their declarations, as Values does.
func (b *Block) PipelineValues(decls []PipelineAttr) *schema.Values {
	attrs := make([]schema.Attr, len(decls))
	for i, pa := range decls {
		attrs[i] = pa.Attr
	}
	return b.values(b.Pipeline.Attributes, attrs)
}

func (b *Block) values(written hcl.Attributes, decls []schema.Attr) *schema.Values {
	return schema.Decode(written, decls, schema.Env{Ctx: b.EvalContext, Dir: b.Dir, Report: b.Report, From: map[string]any{
		schema.FromPipelineName: b.Pipeline.Name,
		schema.FromHostName:     b.Consumer,
	}})
}

// ConsumerName is the consumer name of a source that reads as a named consumer: v's
// "consumer" (the host name by default), unless `--consumer` overrides it.
func (b *Block) ConsumerName(v *schema.Values) string {
	if c := v.String("consumer"); c != "" && !b.ConsumerOverride {
		return c
	}
	return b.Consumer
}

// Attributes are written attributes with typed decoders. Each decoder does nothing when the
// attribute is not written; otherwise it reports the attribute's mistakes (at its value) and
// stores the value in dst (its zero value after a mistake). It returns true when the attribute
// is written and has no mistake.
type Attributes struct {
	m hcl.Attributes
	b *Block
}

// Get returns the attribute, or nil when it is not written.
func (a Attributes) Get(name string) *hcl.Attribute { return a.m[name] }

// Has reports whether the attribute is written.
func (a Attributes) Has(name string) bool { return a.m[name] != nil }

func decode[T any](a Attributes, name string, dec func(*hcl.Attribute) (T, hcl.Diagnostics), dst *T) bool {
	attr := a.m[name]
	if attr == nil {
		return false
	}
	v, diags := dec(attr)
	a.b.diags = append(a.b.diags, diags...)
	*dst = v
	return !diags.HasErrors()
}

func (a Attributes) dec() hclutil.Decoder { return hclutil.Decoder{Ctx: a.b.EvalContext} }

// String decodes a string, empty or not.
func (a Attributes) String(name string, dst *string) bool { return decode(a, name, a.dec().Str, dst) }

// NonEmpty decodes a string that must not be empty.
func (a Attributes) NonEmpty(name string, dst *string) bool {
	return decode(a, name, a.dec().NonEmpty, dst)
}

// NonEmptyAt is NonEmpty that also stores the value's range in at when the attribute is
// written, for a diagnostic found after decoding (Config.CheckCluster).
func (a Attributes) NonEmptyAt(name string, dst *string, at *hcl.Range) bool {
	if attr := a.m[name]; attr != nil {
		*at = attr.Expr.Range()
	}
	return a.NonEmpty(name, dst)
}

// NonEmptyOnly decodes a non-empty string that is valid only where valid holds: written where
// it does not, it is reported too, at its name, with detail. It returns the attribute, nil when
// it is not written.
func (a Attributes) NonEmptyOnly(name string, dst *string, valid bool, detail string) *hcl.Attribute {
	attr := a.m[name]
	if attr == nil {
		return nil
	}
	a.NonEmpty(name, dst)
	if !valid {
		a.b.Report(Unsupported(attr, detail))
	}
	return attr
}

// Bool decodes a bool.
func (a Attributes) Bool(name string, dst *bool) bool { return decode(a, name, a.dec().Bool, dst) }

// Count decodes a whole number of at least 1.
func (a Attributes) Count(name string, dst *int) bool { return decode(a, name, a.dec().Count, dst) }

// Duration decodes a Go duration string ("250ms", "30s") greater than zero.
func (a Attributes) Duration(name string, dst *time.Duration) bool {
	return decode(a, name, a.dec().PositiveDuration, dst)
}

// Strings decodes a non-empty list of non-empty strings.
func (a Attributes) Strings(name string, dst *[]string) bool {
	return decode(a, name, a.dec().StrList, dst)
}

// Path decodes a non-empty string and resolves it against the HCL file's folder.
func (a Attributes) Path(name string, dst *string) bool {
	if !a.NonEmpty(name, dst) {
		return false
	}
	*dst = hclutil.ResolvePath(a.b.Dir, *dst)
	return true
}

// InvalidValue reports a value of the right type that is still wrong, at the value.
func InvalidValue(attr *hcl.Attribute, detail string) *hcl.Diagnostic {
	return hclutil.InvalidValue(attr, detail)
}

// Unsupported reports an attribute that is not valid in this combination, at its name.
func Unsupported(attr *hcl.Attribute, detail string) *hcl.Diagnostic {
	return hclutil.NotHere(attr, detail)
}

// MissingArgument reports a missing attribute at the header of the block that lacks it:
// `The argument "NAME" is required WHERE.`
func MissingArgument(header hcl.Range, name, where string) *hcl.Diagnostic {
	return hclutil.MissingArg(header, name, where)
}
