// Package schema declares the body of an HCL block once, with what a reader of the reference
// needs (each attribute's type, default and meaning), so that the schema a block is decoded with
// and the generated reference in docs/ come from the same declaration and cannot drift apart.
//
// config declares its blocks (redis, pipeline, rule, emit, test ...) with it, a source kind
// declares its attributes with it (transports.Kind.Attrs), and a Go handler its block body
// (plugins.Spec.Docs); `go generate ./docs` renders them.
package schema

import (
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// Attr is one attribute of a block.
type Attr struct {
	Name string
	// Type is the value's type as a reader writes it: "string", "number", "bool", "duration"
	// (a Go duration string such as "30s"), "path" (a string resolved against the folder of the
	// HCL file), "list of strings", "map of strings", "expression" (an expr-lang expression in a
	// string), "map of expressions".
	Type string
	// Required says a block without the attribute is a config error. An attribute required only
	// in some combinations says so in Doc and is not Required.
	Required bool
	// Default is what leaving the attribute out means, as the reference shows it: a value in
	// HCL syntax (`"1s"`, `100`, `true`) or a short phrase ("the pipeline's name"); "" when
	// there is none.
	Default string
	// Doc says what the attribute does: one or a few sentences of Markdown.
	Doc string

	// Kind is the value's type for Decode; KindNone for an attribute declared as prose only,
	// which its block decodes itself. The constructors (String, Int, Duration ...) set it.
	Kind Kind
	// Value is the typed default, what Decode yields when the attribute is not written (nil:
	// the kind's zero value, or From). WithDefault sets it and Default's text together, so
	// the reference shows the value decoding uses.
	Value any
	// From names a default taken from the block's context ("the pipeline's name"), which
	// Decode reads from Env.From; it is also Default's text.
	From string

	nonEmpty  bool // a string (or list element) must not be empty
	min       int  // an Int's least value
	allowZero bool // a Duration may be zero (else it must be greater)
}

// Block is a nested block a body may hold.
type Block struct {
	Type string
	// Labels names the block's labels: `source "KIND"` has Labels ["kind"].
	Labels []string
	// Occurs says how many times it may appear: "one", "optional", "any number",
	// "one or more" ... as the reference shows it.
	Occurs string
	// Doc says what the block is for: Markdown.
	Doc string
	// Body is the block's own body; nil when it is declared elsewhere (a source block's body is
	// its kind's, a handler block's its handler's), which Ref then names for the reference.
	Body *Body
	Ref  string
}

// Body is what a block holds.
type Body struct {
	Attrs  []Attr
	Blocks []Block
}

// HCL is the schema to decode the body with. Attributes are never hcl-Required: flowrun reports
// a missing attribute itself, at the header of the block that lacks it.
func (b *Body) HCL() *hcl.BodySchema {
	s := &hcl.BodySchema{}
	for _, a := range b.Attrs {
		s.Attributes = append(s.Attributes, hcl.AttributeSchema{Name: a.Name})
	}
	for _, bl := range b.Blocks {
		s.Blocks = append(s.Blocks, hcl.BlockHeaderSchema{Type: bl.Type, LabelNames: bl.Labels})
	}
	return s
}

// Attr finds an attribute by name.
func (b *Body) Attr(name string) (Attr, bool) {
	for _, a := range b.Attrs {
		if a.Name == name {
			return a, true
		}
	}
	return Attr{}, false
}

// Block finds a nested block by type.
func (b *Body) Block(typ string) (Block, bool) {
	for _, bl := range b.Blocks {
		if bl.Type == typ {
			return bl, true
		}
	}
	return Block{}, false
}

// Value renders a default value as the reference shows it, in HCL syntax as Markdown code:
// a string or a time.Duration as "`\"1s\"`", a number or a bool as "`100`".
func Value(v any) string {
	switch v := v.(type) {
	case string:
		return "`" + strconv.Quote(v) + "`"
	case time.Duration:
		return "`" + strconv.Quote(v.String()) + "`"
	}
	return fmt.Sprintf("`%v`", v)
}
