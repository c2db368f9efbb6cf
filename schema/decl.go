package schema

import (
	"fmt"
	"reflect"
	"time"
)

// Kind is the type of an attribute's value, which Decode checks and converts.
type Kind int

// The kinds of value an attribute may hold.
const (
	KindNone      Kind = iota // declared as prose only; its block decodes it
	KindString                // a string
	KindInt                   // a whole number
	KindNumber                // any number, as a float64
	KindBool                  // a bool
	KindDuration              // a Go duration string ("250ms", "30s", "1h")
	KindPath                  // a non-empty string resolved against the HCL file's folder
	KindStrings               // a non-empty list of non-empty strings
	KindStringMap             // a map of strings
)

// typeText is each kind's Attr.Type, as the reference shows it.
var typeText = map[Kind]string{
	KindString:    "string",
	KindInt:       "number",
	KindNumber:    "number",
	KindBool:      "bool",
	KindDuration:  "duration",
	KindPath:      "path",
	KindStrings:   "list of strings",
	KindStringMap: "map of strings",
}

// Defaults taken from a block's context (Attr.From), as the reference words them; Env.From maps
// each to its value for one block.
const (
	FromPipelineName = "the pipeline's name"
	FromHostName     = "the host name"
)

func typed(name string, k Kind) Attr { return Attr{Name: name, Type: typeText[k], Kind: k} }

// String declares a string attribute.
func String(name string) Attr { return typed(name, KindString) }

// Int declares a whole-number attribute; Min bounds it below.
func Int(name string) Attr {
	a := typed(name, KindInt)
	a.min = minIntUnset
	return a
}

// Number declares a number attribute, decoded as a float64.
func Number(name string) Attr { return typed(name, KindNumber) }

// Count declares a whole number of at least 1 (batch, concurrency).
func Count(name string) Attr { return Int(name).Min(1) }

// Bool declares a bool attribute.
func Bool(name string) Attr { return typed(name, KindBool) }

// Duration declares a Go duration greater than zero (AllowZero: zero or more).
func Duration(name string) Attr { return typed(name, KindDuration) }

// Path declares a path, relative to the HCL file's folder.
func Path(name string) Attr { return typed(name, KindPath) }

// Strings declares a non-empty list of non-empty strings.
func Strings(name string) Attr { return typed(name, KindStrings) }

// StringMap declares a map of strings.
func StringMap(name string) Attr { return typed(name, KindStringMap) }

// minIntUnset marks an Int without a lower bound.
const minIntUnset = -1 << 31

// The setters below each return a copy with one part set, so that a declaration reads as one
// expression: schema.Count("batch").WithDefault(100).Describe("…").

// WithDefault sets the typed default and the reference's text for it (Value).
func (a Attr) WithDefault(v any) Attr {
	if err := a.check(v); err != nil {
		panic(fmt.Sprintf("schema: attribute %q: %v", a.Name, err))
	}
	a.Value, a.Default, a.From = v, Value(v), ""
	return a
}

// DefaultFrom says the default comes from the block's context (FromPipelineName ...).
func (a Attr) DefaultFrom(from string) Attr {
	a.From, a.Default, a.Value = from, from, nil
	return a
}

// DefaultDoc sets only the reference's text for a default its block works out itself
// (`"<key>:processing:<consumer>"`).
func (a Attr) DefaultDoc(text string) Attr {
	a.Default = text
	return a
}

// Describe sets the reference's description (Markdown).
func (a Attr) Describe(doc string) Attr {
	a.Doc = doc
	return a
}

// Require makes the attribute required.
func (a Attr) Require() Attr {
	a.Required = true
	return a
}

// NonEmpty makes a string attribute reject "".
func (a Attr) NonEmpty() Attr {
	a.nonEmpty = true
	return a
}

// Min sets an Int's least value.
func (a Attr) Min(n int) Attr {
	a.min = n
	return a
}

// AllowZero lets a Duration be zero.
func (a Attr) AllowZero() Attr {
	a.allowZero = true
	return a
}

// check reports a default of the wrong Go type for the attribute's kind (not that of its Zero):
// a programmer's mistake.
func (a Attr) check(v any) error {
	if a.Kind != KindNone && reflect.TypeOf(v) != reflect.TypeOf(a.Zero()) {
		return fmt.Errorf("a default of type %T for a %s", v, a.Type)
	}
	return nil
}

// Zero is what Decode yields for an attribute that is neither written nor defaulted.
func (a Attr) Zero() any {
	switch a.Kind {
	case KindString, KindPath:
		return ""
	case KindInt:
		return 0
	case KindNumber:
		return float64(0)
	case KindBool:
		return false
	case KindDuration:
		return time.Duration(0)
	case KindStrings:
		return []string(nil)
	case KindStringMap:
		return map[string]string(nil)
	}
	return nil
}
