package plugins

import (
	"fmt"
	"reflect"

	"github.com/hashicorp/hcl/v2"

	"github.com/flowrun/flowrun/schema"
)

// Mocker lets a test of a pipeline with the handler have a `mock {}` block (SPEC §9), standing in
// for the server or the process the handler talks to: set it in Spec.Mock. MockSpec is the usual
// one; the built-in http and exec handlers have their own.
type Mocker interface {
	// DecodeMock decodes a test's mock block, whose header is rng, with positioned diagnostics.
	// What it returns (nil when the diagnostics hold an error) reaches the handler's Provision
	// as Env.Mock, and only that handler's.
	DecodeMock(body hcl.Body, ctx *hcl.EvalContext, rng hcl.Range) (any, hcl.Diagnostics)
	// MockBody documents the mock block for the reference in docs/; nil when undocumented.
	MockBody() *schema.Body
}

// MockSpec is a Mocker whose block decodes into the struct M, exactly as a handler block decodes
// into its config C: hcl tags name the attributes, Body (when set) documents them and must name
// the same ones, Defaults and Validate work as Spec's do. Provision gets the decoded M as Env.Mock
// and builds a handler that talks to it instead of the outside world. An M that implements
// fmt.Stringer says what it answers ("status 503") in `flowrun test`'s output.
type MockSpec[M any] struct {
	Body     *schema.Body
	Defaults func() M
	Validate func(m M, b Block) error
}

// DecodeMock decodes the block into a fresh M and validates it.
func (s MockSpec[M]) DecodeMock(body hcl.Body, ctx *hcl.EvalContext, rng hcl.Range) (any, hcl.Diagnostics) {
	cfg, diags := Spec[M]{Body: s.Body, Defaults: s.Defaults, Validate: s.Validate}.decode(body, ctx, rng)
	if cfg == nil {
		return nil, diags
	}
	return cfg.Value(), diags
}

// MockBody is Body.
func (s MockSpec[M]) MockBody() *schema.Body { return s.Body }

// check is what Register checks of a MockSpec, as of a Spec: M is a struct gohcl can decode into,
// and Body, when set, names its tags.
func (s MockSpec[M]) check() error {
	t := reflect.TypeFor[M]()
	if err := checkConfigType(t); err != nil {
		return fmt.Errorf("Mock: %w", err)
	}
	if s.Body == nil {
		return nil
	}
	var defaults reflect.Value
	if s.Defaults != nil {
		defaults = reflect.ValueOf(s.Defaults())
	}
	if err := checkBody(s.Body, t); err != nil {
		return fmt.Errorf("Mock: %w", err)
	}
	if err := checkDefaults(s.Body, t, defaults); err != nil {
		return fmt.Errorf("Mock: %w", err)
	}
	return nil
}

// builtinMock is the Mocker of the built-in http and exec handlers: their blocks name each
// other's attributes in diagnostics (mockAttributes), and their mocks install themselves in the
// Env (install).
type builtinMock struct {
	name   string
	decode func(body hcl.Body, ctx *hcl.EvalContext, rng hcl.Range) (mock, hcl.Diagnostics)
}

func (b builtinMock) DecodeMock(body hcl.Body, ctx *hcl.EvalContext, rng hcl.Range) (any, hcl.Diagnostics) {
	m, diags := b.decode(body, ctx, rng)
	if m == nil {
		return nil, diags // never a typed nil in the interface
	}
	return m, diags
}

func (b builtinMock) MockBody() *schema.Body { return mockBodies[b.name] }

// decodedMock is a test's decoded mock block as config holds it (handlers.Mock): the value the
// handler's Mocker made, and which handler that is.
type decodedMock struct {
	handler string
	v       any
}

// String says what the mock answers: the value's own String, else the value.
func (m decodedMock) String() string {
	if s, ok := m.v.(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprintf("%v", m.v)
}
