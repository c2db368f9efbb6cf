package config

import (
	"fmt"
	"sort"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"

	"github.com/flowrun/flowrun/internal/hclutil"
)

// The value decoders (fileDecoder's embedded hclutil.Decoder: Str, NonEmpty, Bool, Count, …)
// and the diagnostic constructors are hclutil's, which the transport registry shares, so that
// a source block's attributes, decoded by its kind, read and fail as the rest of the file does.
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
