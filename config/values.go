package config

import (
	"fmt"
	"sort"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/hclutil"
	"github.com/flowrun/flowrun/schema"
)

// The value decoders and the diagnostic constructors are hclutil's, which the transport registry
// shares, so that a source block's attributes, decoded by its kind, read and fail as the rest of
// the file does.

func (d *fileDecoder) dec() hclutil.Decoder { return hclutil.Decoder{Ctx: d.ctx} }

// value evaluates an attribute; null counts as a type error, since no attribute takes null.
func (d *fileDecoder) value(attr *hcl.Attribute, want cty.Type, what string) (cty.Value, hcl.Diagnostics) {
	return d.dec().Value(attr, want, what)
}

func (d *fileDecoder) str(attr *hcl.Attribute) (string, hcl.Diagnostics) { return d.dec().Str(attr) }

// nonEmpty decodes a string that must not be empty.
func (d *fileDecoder) nonEmpty(attr *hcl.Attribute) (string, hcl.Diagnostics) {
	return d.dec().NonEmpty(attr)
}

func (d *fileDecoder) boolean(attr *hcl.Attribute) (bool, hcl.Diagnostics) { return d.dec().Bool(attr) }

var (
	typeDiag     = hclutil.TypeDiag
	invalidValue = hclutil.InvalidValue
	notHere      = hclutil.NotHere
	didYouMean   = hclutil.DidYouMean
	quoteList    = hclutil.QuoteList
	article      = hclutil.Article
	resolvePath  = hclutil.ResolvePath
)

// missingArg reports a missing attribute at the block that lacks it (SPEC §2).
func missingArg(block *hcl.Block, name, where string) *hcl.Diagnostic {
	return hclutil.MissingArg(block.DefRange, name, where)
}

// values decodes the attributes of written that decls declare (the others are another
// declaration's, or reported already) through schema.Decode, each when it is read, its
// mistakes appended to *diags; concurrency's default is engine.DefaultConcurrency.
func (d *fileDecoder) values(written hcl.Attributes, decls []schema.Attr, diags *hcl.Diagnostics) *schema.Values {
	own := hcl.Attributes{}
	for _, a := range decls {
		if w, ok := written[a.Name]; ok {
			own[a.Name] = w
		}
	}
	return schema.Decode(own, decls, schema.Env{
		Ctx:    d.ctx,
		Dir:    d.dir,
		From:   map[string]any{fromCPUs: engine.DefaultConcurrency()},
		Report: func(ds ...*hcl.Diagnostic) { *diags = append(*diags, ds...) },
	})
}

// opt decodes attrs[name] with dec into *dst when the attribute is written, appending its
// diagnostics to *diags; it reports whether the attribute was written.
func opt[T any](attrs hcl.Attributes, name string, dec func(*hcl.Attribute) (T, hcl.Diagnostics), dst *T, diags *hcl.Diagnostics) bool {
	return hclutil.Opt(attrs, name, dec, dst, diags)
}

// where renders a range as FILE:LINE for "already declared at" messages.
func where(r hcl.Range) string {
	return fmt.Sprintf("%s:%d", r.Filename, r.Start.Line)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// convertString converts a known, non-null value to a string.
func convertString(v cty.Value) (cty.Value, error) {
	if v.IsNull() || !v.IsKnown() {
		return cty.NilVal, fmt.Errorf("config: null or unknown value")
	}
	return convert.Convert(v, cty.String)
}
