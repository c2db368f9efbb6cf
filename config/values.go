package config

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/agext/levenshtein"
	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// value evaluates an attribute; null counts as a type error, since no attribute takes null.
func (d *fileDecoder) value(attr *hcl.Attribute, want cty.Type, what string) (cty.Value, hcl.Diagnostics) {
	v, diags := attr.Expr.Value(d.ctx)
	if diags.HasErrors() {
		return cty.NilVal, diags
	}
	if v.IsNull() {
		return cty.NilVal, append(diags, typeDiag(attr, what))
	}
	if want == cty.DynamicPseudoType {
		return v, diags
	}
	cv, err := convert.Convert(v, want)
	if err != nil || cv.IsNull() {
		return cty.NilVal, append(diags, typeDiag(attr, what))
	}
	return cv, diags
}

func typeDiag(attr *hcl.Attribute, what string) *hcl.Diagnostic {
	return &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "Incorrect attribute value type",
		Detail:   fmt.Sprintf("Inappropriate value for attribute %q: %s is required.", attr.Name, what),
		Subject:  attr.Expr.Range().Ptr(),
	}
}

func (d *fileDecoder) str(attr *hcl.Attribute) (string, hcl.Diagnostics) {
	v, diags := d.value(attr, cty.String, "a string")
	if v == cty.NilVal {
		return "", diags
	}
	return v.AsString(), diags
}

// nonEmpty decodes a string that must not be empty.
func (d *fileDecoder) nonEmpty(attr *hcl.Attribute) (string, hcl.Diagnostics) {
	s, diags := d.str(attr)
	if !diags.HasErrors() && s == "" {
		diags = append(diags, invalidValue(attr, fmt.Sprintf("%q must not be empty.", attr.Name)))
	}
	return s, diags
}

func (d *fileDecoder) boolean(attr *hcl.Attribute) (bool, hcl.Diagnostics) {
	v, diags := d.value(attr, cty.Bool, "a bool")
	if v == cty.NilVal {
		return false, diags
	}
	return v.True(), diags
}

// integer decodes a whole number of at least min.
// count decodes a whole number of at least 1 (batch, concurrency, max_attempts, attempt).
func (d *fileDecoder) count(attr *hcl.Attribute) (int, hcl.Diagnostics) { return d.integer(attr, 1) }

func (d *fileDecoder) integer(attr *hcl.Attribute, min int) (int, hcl.Diagnostics) {
	v, diags := d.value(attr, cty.Number, "a number")
	if v == cty.NilVal {
		return 0, diags
	}
	bf := v.AsBigFloat()
	i, acc := bf.Int64()
	if !bf.IsInt() {
		return 0, append(diags, invalidValue(attr, fmt.Sprintf("%q must be a whole number.", attr.Name)))
	}
	if acc != 0 || i > math.MaxInt32 {
		return 0, append(diags, invalidValue(attr, fmt.Sprintf("%q must be at most %d.", attr.Name, math.MaxInt32)))
	}
	if i < int64(min) {
		return 0, append(diags, invalidValue(attr, fmt.Sprintf("%q must be at least %d.", attr.Name, min)))
	}
	return int(i), diags
}

// duration decodes a Go duration string; positive demands > 0, else >= 0.
// positiveDuration decodes a duration greater than zero (block, min_idle).
func (d *fileDecoder) positiveDuration(attr *hcl.Attribute) (time.Duration, hcl.Diagnostics) {
	return d.duration(attr, true)
}

// nonNegativeDuration decodes a duration of zero or more (shutdown_timeout).
func (d *fileDecoder) nonNegativeDuration(attr *hcl.Attribute) (time.Duration, hcl.Diagnostics) {
	return d.duration(attr, false)
}

func (d *fileDecoder) duration(attr *hcl.Attribute, positive bool) (time.Duration, hcl.Diagnostics) {
	s, diags := d.str(attr)
	if diags.HasErrors() {
		return 0, diags
	}
	dur, err := time.ParseDuration(s)
	if err != nil {
		return 0, append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid duration",
			Detail: fmt.Sprintf("%q is not a duration: %s. Write a Go duration such as \"250ms\", \"30s\" or \"1h\".",
				s, strings.TrimPrefix(err.Error(), "time: ")),
			Subject: attr.Expr.Range().Ptr(),
		})
	}
	switch {
	case positive && dur <= 0:
		return 0, append(diags, invalidValue(attr, fmt.Sprintf("%q must be greater than zero.", attr.Name)))
	case dur < 0:
		return 0, append(diags, invalidValue(attr, fmt.Sprintf("%q must not be negative.", attr.Name)))
	}
	return dur, diags
}

// strList decodes a non-empty list of non-empty strings.
func (d *fileDecoder) strList(attr *hcl.Attribute) ([]string, hcl.Diagnostics) {
	v, diags := d.value(attr, cty.List(cty.String), "a list of strings")
	if v == cty.NilVal {
		return nil, diags
	}
	var out []string
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		if e.IsNull() || e.AsString() == "" {
			return nil, append(diags, invalidValue(attr, fmt.Sprintf("%q must not contain empty or null strings.", attr.Name)))
		}
		out = append(out, e.AsString())
	}
	if len(out) == 0 {
		return nil, append(diags, invalidValue(attr, fmt.Sprintf("%q must not be empty.", attr.Name)))
	}
	return out, diags
}

func invalidValue(attr *hcl.Attribute, detail string) *hcl.Diagnostic {
	return &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "Invalid value",
		Detail:   detail,
		Subject:  attr.Expr.Range().Ptr(),
	}
}

// missingArg reports a missing attribute at the block that lacks it (SPEC §2).
func missingArg(block *hcl.Block, name, where string) *hcl.Diagnostic {
	return &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "Missing required argument",
		Detail:   fmt.Sprintf("The argument %q is required %s.", name, where),
		Subject:  block.DefRange.Ptr(),
	}
}

// notHere reports an attribute that the block takes in general but not in this combination.
func notHere(attr *hcl.Attribute, detail string) *hcl.Diagnostic {
	return &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "Unsupported argument",
		Detail:   detail,
		Subject:  attr.NameRange.Ptr(),
	}
}

// didYouMean returns ` Did you mean "x"?` for the closest option within hcl's own threshold.
func didYouMean(given string, options []string) string {
	best, bestDist := "", 3
	for _, o := range options {
		if d := levenshtein.Distance(given, o, nil); d < bestDist {
			best, bestDist = o, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" Did you mean %q?", best)
}

// quoteList renders `"a", "b" or "c"`.
func quoteList(items []string, conj string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	switch len(q) {
	case 0:
		return ""
	case 1:
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " " + conj + " " + q[len(q)-1]
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

// opt decodes attrs[name] with dec into *dst when the attribute is written, appending its
// diagnostics to *diags; it reports whether the attribute was written.
func opt[T any](attrs hcl.Attributes, name string, dec func(*hcl.Attribute) (T, hcl.Diagnostics), dst *T, diags *hcl.Diagnostics) bool {
	a, ok := attrs[name]
	if !ok {
		return false
	}
	v, ds := dec(a)
	*diags = append(*diags, ds...)
	*dst = v
	return true
}
