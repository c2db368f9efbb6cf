// Package hclutil holds the HCL value decoders and diagnostic constructors that config and the
// transport registry share, so that an attribute of a source block and one of a pipeline block
// are read, and their mistakes worded, the same way: every diagnostic points at the value, or,
// for a missing attribute, at the header of the block that lacks it (SPEC §2).
package hclutil

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/agext/levenshtein"
	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// Decoder evaluates attributes in one evaluation context (a file's functions).
type Decoder struct {
	Ctx *hcl.EvalContext
}

// Value evaluates an attribute and converts it to want; null counts as a type error, since no
// attribute takes null. what names the type for the message ("a string").
func (d Decoder) Value(attr *hcl.Attribute, want cty.Type, what string) (cty.Value, hcl.Diagnostics) {
	v, diags := attr.Expr.Value(d.Ctx)
	if diags.HasErrors() {
		return cty.NilVal, diags
	}
	if v.IsNull() {
		return cty.NilVal, append(diags, TypeDiag(attr, what))
	}
	if want == cty.DynamicPseudoType {
		return v, diags
	}
	cv, err := convert.Convert(v, want)
	if err != nil || cv.IsNull() {
		return cty.NilVal, append(diags, TypeDiag(attr, what))
	}
	return cv, diags
}

// Str decodes a string.
func (d Decoder) Str(attr *hcl.Attribute) (string, hcl.Diagnostics) {
	v, diags := d.Value(attr, cty.String, "a string")
	if v == cty.NilVal {
		return "", diags
	}
	return v.AsString(), diags
}

// NonEmpty decodes a string that must not be empty.
func (d Decoder) NonEmpty(attr *hcl.Attribute) (string, hcl.Diagnostics) {
	s, diags := d.Str(attr)
	if !diags.HasErrors() && s == "" {
		diags = append(diags, InvalidValue(attr, fmt.Sprintf("%q must not be empty.", attr.Name)))
	}
	return s, diags
}

// Bool decodes a bool.
func (d Decoder) Bool(attr *hcl.Attribute) (bool, hcl.Diagnostics) {
	v, diags := d.Value(attr, cty.Bool, "a bool")
	if v == cty.NilVal {
		return false, diags
	}
	return v.True(), diags
}

// Count decodes a whole number of at least 1 (batch, concurrency, max_attempts, attempt).
func (d Decoder) Count(attr *hcl.Attribute) (int, hcl.Diagnostics) { return d.Integer(attr, 1) }

// Integer decodes a whole number of at least min.
func (d Decoder) Integer(attr *hcl.Attribute, min int) (int, hcl.Diagnostics) {
	v, diags := d.Value(attr, cty.Number, "a number")
	if v == cty.NilVal {
		return 0, diags
	}
	bf := v.AsBigFloat()
	i, acc := bf.Int64()
	if !bf.IsInt() {
		return 0, append(diags, InvalidValue(attr, fmt.Sprintf("%q must be a whole number.", attr.Name)))
	}
	if acc != 0 || i > math.MaxInt32 {
		return 0, append(diags, InvalidValue(attr, fmt.Sprintf("%q must be at most %d.", attr.Name, math.MaxInt32)))
	}
	if i < int64(min) {
		return 0, append(diags, InvalidValue(attr, fmt.Sprintf("%q must be at least %d.", attr.Name, min)))
	}
	return int(i), diags
}

// PositiveDuration decodes a duration greater than zero (block, min_idle).
func (d Decoder) PositiveDuration(attr *hcl.Attribute) (time.Duration, hcl.Diagnostics) {
	return d.duration(attr, true)
}

// NonNegativeDuration decodes a duration of zero or more (shutdown_timeout).
func (d Decoder) NonNegativeDuration(attr *hcl.Attribute) (time.Duration, hcl.Diagnostics) {
	return d.duration(attr, false)
}

// duration decodes a Go duration string; positive demands > 0, else >= 0.
func (d Decoder) duration(attr *hcl.Attribute, positive bool) (time.Duration, hcl.Diagnostics) {
	s, diags := d.Str(attr)
	if diags.HasErrors() {
		return 0, diags
	}
	dur, ds := ParseDuration(attr, s, positive)
	return dur, append(diags, ds...)
}

// ParseDuration parses s, the string value of attr, as a Go duration ("250ms", "30s", "1h"):
// the one duration parser of every block, handler configs' included. positive demands > 0,
// else >= 0; each mistake is a diagnostic at the value, and the duration is then 0.
func ParseDuration(attr *hcl.Attribute, s string, positive bool) (time.Duration, hcl.Diagnostics) {
	dur, err := time.ParseDuration(s)
	if err != nil {
		return 0, hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Invalid duration",
			Detail: fmt.Sprintf("%q is not a duration: %s. Write a Go duration such as \"250ms\", \"30s\" or \"1h\".",
				s, strings.TrimPrefix(err.Error(), "time: ")),
			Subject: attr.Expr.Range().Ptr(),
		}}
	}
	switch {
	case positive && dur <= 0:
		return 0, hcl.Diagnostics{InvalidValue(attr, fmt.Sprintf("%q must be greater than zero.", attr.Name))}
	case dur < 0:
		return 0, hcl.Diagnostics{InvalidValue(attr, fmt.Sprintf("%q must not be negative.", attr.Name))}
	}
	return dur, nil
}

// StrList decodes a non-empty list of non-empty strings.
func (d Decoder) StrList(attr *hcl.Attribute) ([]string, hcl.Diagnostics) {
	v, diags := d.Value(attr, cty.List(cty.String), "a list of strings")
	if v == cty.NilVal {
		return nil, diags
	}
	var out []string
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		if e.IsNull() || e.AsString() == "" {
			return nil, append(diags, InvalidValue(attr, fmt.Sprintf("%q must not contain empty or null strings.", attr.Name)))
		}
		out = append(out, e.AsString())
	}
	if len(out) == 0 {
		return nil, append(diags, InvalidValue(attr, fmt.Sprintf("%q must not be empty.", attr.Name)))
	}
	return out, diags
}

// Opt decodes attrs[name] with dec into *dst when the attribute is written, appending its
// diagnostics to *diags; it reports whether the attribute was written.
func Opt[T any](attrs hcl.Attributes, name string, dec func(*hcl.Attribute) (T, hcl.Diagnostics), dst *T, diags *hcl.Diagnostics) bool {
	a, ok := attrs[name]
	if !ok {
		return false
	}
	v, ds := dec(a)
	*diags = append(*diags, ds...)
	*dst = v
	return true
}

// TypeDiag reports a value of the wrong type, at the value.
func TypeDiag(attr *hcl.Attribute, what string) *hcl.Diagnostic {
	return &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "Incorrect attribute value type",
		Detail:   fmt.Sprintf("Inappropriate value for attribute %q: %s is required.", attr.Name, what),
		Subject:  attr.Expr.Range().Ptr(),
	}
}

// InvalidValue reports a value of the right type that is still wrong, at the value.
func InvalidValue(attr *hcl.Attribute, detail string) *hcl.Diagnostic {
	return &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "Invalid value",
		Detail:   detail,
		Subject:  attr.Expr.Range().Ptr(),
	}
}

// MissingArg reports a missing attribute at the header of the block that lacks it (SPEC §2):
// `The argument "NAME" is required WHERE.`
func MissingArg(header hcl.Range, name, where string) *hcl.Diagnostic {
	return &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "Missing required argument",
		Detail:   fmt.Sprintf("The argument %q is required %s.", name, where),
		Subject:  header.Ptr(),
	}
}

// NotHere reports an attribute that the block takes in general but not in this combination, at
// its name.
func NotHere(attr *hcl.Attribute, detail string) *hcl.Diagnostic {
	return &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "Unsupported argument",
		Detail:   detail,
		Subject:  attr.NameRange.Ptr(),
	}
}

// DidYouMean returns ` Did you mean "x"?` for the closest option within hcl's own threshold.
func DidYouMean(given string, options []string) string {
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

// QuoteList renders `"a", "b" or "c"`.
func QuoteList(items []string, conj string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	return List(q, conj)
}

// List renders `a, b and c`.
func List(items []string, conj string) string {
	switch len(items) {
	case 0:
		return ""
	case 1:
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " " + conj + " " + items[len(items)-1]
}

// Article is "an" before a vowel, else "a": "an emit", "a stream source".
func Article(word string) string {
	if word != "" && strings.IndexByte("aeiou", word[0]) >= 0 {
		return "an"
	}
	return "a"
}

// ResolvePath makes p absolute, relative to dir when it is not already.
func ResolvePath(dir, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(dir, p)
}
