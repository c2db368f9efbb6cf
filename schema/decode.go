package schema

import (
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"github.com/flowrun/flowrun/internal/hclutil"
)

// Env is what Decode needs besides the attributes: the file's evaluation context, its folder
// (a Path resolves against it), the values of the context defaults (Attr.From), and where
// mistakes go as they are found (nil: Values.Diagnostics collects them only).
type Env struct {
	Ctx    *hcl.EvalContext
	Dir    string
	From   map[string]any
	Report func(...*hcl.Diagnostic)
}

// Values are a block's attributes decoded against their declarations: every declared
// attribute has a value, the written one, else its default. A written attribute is decoded
// when it is first read, so its mistakes are reported in the order the block's reader asks,
// between the checks it makes of the values before.
type Values struct {
	env     Env
	decls   map[string]Attr
	written hcl.Attributes
	vals    map[string]any
	ok      map[string]bool
	diags   hcl.Diagnostics
}

// Decode decodes the written attributes against decls. A written attribute that decls do not
// declare is reported at once, at its name, with the closest declared name; a value of the
// wrong type or out of bounds is reported at its value when it is read, worded as
// internal/hclutil words it, and its value is then the kind's zero. A missing Required
// attribute is not reported here: the block's owner reports it at the block's header, in its
// own words.
func Decode(written hcl.Attributes, decls []Attr, env Env) *Values {
	v := &Values{env: env, decls: make(map[string]Attr, len(decls)), written: written,
		vals: make(map[string]any, len(decls)), ok: map[string]bool{}}
	names := make([]string, 0, len(decls))
	for _, a := range decls {
		names = append(names, a.Name)
		v.decls[a.Name] = a
	}
	for _, name := range sortedByPosition(written) {
		if _, ok := v.decls[name]; !ok {
			v.report(&hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Unsupported argument",
				Detail:   fmt.Sprintf("An argument named %q is not expected here.%s", name, hclutil.DidYouMean(name, names)),
				Subject:  written[name].NameRange.Ptr(),
			})
		}
	}
	return v
}

func (v *Values) report(diags ...*hcl.Diagnostic) {
	v.diags = append(v.diags, diags...)
	if v.env.Report != nil {
		v.env.Report(diags...)
	}
}

// Diagnostics are the mistakes found so far.
func (v *Values) Diagnostics() hcl.Diagnostics { return v.diags }

// Get is an attribute's value: the written one, else its default; nil for one not declared
// or declared without a Kind.
func (v *Values) Get(name string) any {
	if val, done := v.vals[name]; done {
		return val
	}
	a, declared := v.decls[name]
	if !declared || a.Kind == KindNone {
		return nil
	}
	val := a.defaultIn(v.env)
	if attr := v.written[name]; attr != nil {
		var diags hcl.Diagnostics
		val, diags = a.decode(attr, v.env)
		v.report(diags...)
		v.ok[name] = !diags.HasErrors()
	}
	v.vals[name] = val
	return val
}

// defaultIn is what an unwritten attribute means in env.
func (a Attr) defaultIn(env Env) any {
	switch {
	case a.From != "":
		if v, ok := env.From[a.From]; ok {
			return v
		}
	case a.Value != nil:
		return a.Value
	}
	return a.Zero()
}

// decode converts one written attribute; on a mistake the value is the kind's zero.
func (a Attr) decode(attr *hcl.Attribute, env Env) (any, hcl.Diagnostics) {
	d := hclutil.Decoder{Ctx: env.Ctx}
	switch a.Kind {
	case KindString:
		if a.nonEmpty {
			return d.NonEmpty(attr)
		}
		return d.Str(attr)
	case KindPath:
		p, diags := d.NonEmpty(attr)
		if diags.HasErrors() {
			return p, diags
		}
		return hclutil.ResolvePath(env.Dir, p), diags
	case KindInt:
		return d.Integer(attr, a.min)
	case KindNumber:
		cv, diags := d.Value(attr, cty.Number, "a number")
		if cv == cty.NilVal || !cv.IsKnown() {
			return float64(0), diags
		}
		f, _ := cv.AsBigFloat().Float64()
		return f, diags
	case KindBool:
		return d.Bool(attr)
	case KindDuration:
		if a.allowZero {
			return d.NonNegativeDuration(attr)
		}
		return d.PositiveDuration(attr)
	case KindStrings:
		return d.StrList(attr)
	case KindStringMap:
		cv, diags := d.Value(attr, cty.Map(cty.String), "a map of strings")
		if cv == cty.NilVal {
			return map[string]string(nil), diags
		}
		m := map[string]string{}
		for k, e := range cv.AsValueMap() {
			if !e.IsNull() {
				m[k] = e.AsString()
			}
		}
		return m, diags
	}
	return nil, nil
}

func sortedByPosition(attrs hcl.Attributes) []string {
	names := make([]string, 0, len(attrs))
	for name := range attrs {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int {
		if c := attrs[a].NameRange.Start.Byte - attrs[b].NameRange.Start.Byte; c != 0 {
			return c
		}
		return compareStrings(a, b)
	})
	return names
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// String is a String or Path attribute's value.
func (v *Values) String(name string) string { s, _ := v.Get(name).(string); return s }

// Int is an Int attribute's value.
func (v *Values) Int(name string) int { n, _ := v.Get(name).(int); return n }

// Number is a Number attribute's value.
func (v *Values) Number(name string) float64 { f, _ := v.Get(name).(float64); return f }

// Bool is a Bool attribute's value.
func (v *Values) Bool(name string) bool { b, _ := v.Get(name).(bool); return b }

// Duration is a Duration attribute's value.
func (v *Values) Duration(name string) time.Duration { d, _ := v.Get(name).(time.Duration); return d }

// Strings is a Strings attribute's value.
func (v *Values) Strings(name string) []string { s, _ := v.Get(name).([]string); return s }

// StringMap is a StringMap attribute's value.
func (v *Values) StringMap(name string) map[string]string {
	m, _ := v.Get(name).(map[string]string)
	return m
}

// Attr is the written attribute, nil when it is not written: for a diagnostic about its value.
func (v *Values) Attr(name string) *hcl.Attribute { return v.written[name] }

// Written reports whether the attribute is written.
func (v *Values) Written(name string) bool { return v.written[name] != nil }

// OK reports whether the attribute is written and decoded without a mistake: a check of what
// its type cannot say runs only then.
func (v *Values) OK(name string) bool {
	v.Get(name)
	return v.ok[name]
}
