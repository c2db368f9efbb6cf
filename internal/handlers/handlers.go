// Package handlers is the handler namespace of flowrun's module registry (package registry,
// "handler.NAME"), between package plugins, the API handler authors write against, and flowrun's
// loader (config) and runner (cli). It speaks the engine's types so that plugins does not have
// to: an author imports plugins and never sees an engine.Handler.
//
// plugins.Register is the only writer; config looks handlers up and decodes their blocks, cli
// provisions, starts and closes them.
package handlers

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/hcl/v2"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/registry"
	"github.com/flowrun/flowrun/schema"
)

// Plugin is one registered Go handler.
type Plugin struct {
	// Name is what a pipeline's handler "NAME" block refers to.
	Name string
	// Doc is one line shown by `flowrun plugins`.
	Doc string
	// Body documents the handler block's body, MockBody a test's mock block for it, for the
	// reference in docs/; nil when undocumented.
	Body, MockBody *schema.Body
	// Decode decodes and validates the body of a handler block whose header is rng, with
	// positioned diagnostics. The Config is nil when the diagnostics hold an error.
	Decode func(body hcl.Body, ctx *hcl.EvalContext, rng hcl.Range) (Config, hcl.Diagnostics)
	// DecodeMock decodes the `mock {}` block of a test of a pipeline with this handler (SPEC §9):
	// what stands in for the server or the process the handler talks to, with positioned
	// diagnostics; rng is the block's header. The Mock is nil when the diagnostics hold an
	// error. DecodeMock is nil for a handler that cannot be mocked.
	DecodeMock func(body hcl.Body, ctx *hcl.EvalContext, rng hcl.Range) (Mock, hcl.Diagnostics)
}

// Mock is a test's decoded `mock {}` block, made by Plugin.DecodeMock and handed back to the
// same plugin's Config.Provision through Env.Mock, which then builds a handler that talks to
// the mock instead of the outside world.
type Mock interface {
	// String says what the mock answers, for messages: "status 503", "exit 75".
	String() string
}

// Config is a handler block that decoded and validated cleanly.
type Config interface {
	// Value is the author's config struct, as decoded.
	Value() any
	// Provision builds the handler for one pipeline (`flowrun run`), or for one test (`flowrun
	// test`, with Env.Mock when the test has a mock block).
	Provision(ctx context.Context, env Env) (Instance, error)
}

// Instance is a provisioned handler. Start and Close do nothing for a handler that does not
// implement plugins.Starter or plugins.Closer.
type Instance interface {
	engine.Handler
	Start(ctx context.Context) error
	Close() error
}

// Env is what the runner tells a handler it provisions.
type Env struct {
	// Pipeline is the name of the pipeline the handler serves.
	Pipeline string
	// Logger is scoped to the pipeline and handler.
	Logger zerolog.Logger
	// Redis is the redis block that Redis emits naming none go through: the source's own, else
	// the only one ("" when there is none).
	Redis string
	// Mock, when set (by `flowrun test` only), stands in for the server or the process the
	// handler talks to. It was made by this plugin's DecodeMock; Provision fails on any other.
	Mock Mock
}

// ModuleID is the handler's ID in the registry: "handler.NAME".
func (p Plugin) ModuleID() registry.ID { return registry.NewID(registry.Handler, p.Name) }

// Validate is called by registry.Register: a handler needs a Name and Decode.
func (p Plugin) Validate() error {
	if p.Name == "" || p.Decode == nil {
		return errors.New("plugins: Register needs a Name and Provision")
	}
	return nil
}

// Register adds a handler to the registry. It panics on an empty or duplicate name or a nil
// Decode: a programmer's mistake, found the first time the binary starts.
func Register(p Plugin) {
	if err := p.Validate(); err != nil {
		panic(err.Error())
	}
	if _, dup := Lookup(p.Name); dup {
		panic(fmt.Sprintf("plugins: handler %q registered twice", p.Name))
	}
	registry.Register(p)
}

// Lookup finds a registered handler by name.
func Lookup(name string) (Plugin, bool) {
	return registry.Get[Plugin](registry.NewID(registry.Handler, name))
}

// Mockable lists, in name order, the registered handlers whose tests can have a `mock {}`.
func Mockable() []string {
	var names []string
	for _, p := range registry.Namespace[Plugin](registry.Handler) {
		if p.DecodeMock != nil {
			names = append(names, p.Name)
		}
	}
	return names
}

// Names lists the registered handlers in name order.
func Names() []string {
	names := []string{}
	for _, p := range registry.Namespace[Plugin](registry.Handler) {
		names = append(names, p.Name)
	}
	return names
}
