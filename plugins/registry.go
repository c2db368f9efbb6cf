// Package plugins is the registry of compiled Go handlers (SPEC §8). A handler package registers
// itself in init; a custom binary is the flowrun command line plus one more blank import.
package plugins

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
)

// Plugin describes one Go handler.
type Plugin struct {
	// Name is what a pipeline's handler "NAME" block refers to.
	Name string
	// Doc is one line shown by `flowrun plugins`.
	Doc string
	// Config returns a pointer to a new, zero config struct with gohcl tags
	// (`hcl:"url"`, `hcl:"timeout,optional"`), or nil when the handler takes no configuration.
	// Defaults may be set on the returned value; decoding only overwrites attributes present.
	Config func() any
	// New builds the handler from its decoded config (the value Config returned).
	New func(ctx context.Context, cfg any, env Env) (engine.Handler, error)
}

// Env is what a handler is given when it is built.
type Env struct {
	Pipeline string
	Logger   zerolog.Logger // already carries the pipeline field
}

// Validator is an optional interface of a config struct: checks beyond types, returned as
// diagnostics so the user sees FILE:LINE:COL. rng is the handler block's range.
type Validator interface {
	Validate(rng hcl.Range) hcl.Diagnostics
}

var (
	mu       sync.RWMutex
	registry = map[string]Plugin{}
)

// Register adds a handler. It panics on an empty or duplicate name: that is a programmer's
// mistake, found the first time the binary starts.
func Register(p Plugin) {
	if p.Name == "" || p.New == nil {
		panic("plugins: Register needs a Name and New")
	}
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[p.Name]; dup {
		panic(fmt.Sprintf("plugins: handler %q registered twice", p.Name))
	}
	registry[p.Name] = p
}

// Lookup finds a registered handler by name.
func Lookup(name string) (Plugin, bool) {
	mu.RLock()
	defer mu.RUnlock()
	p, ok := registry[name]
	return p, ok
}

// Names lists the registered handlers in name order.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Decode decodes a handler block's body into a fresh config value, with positioned diagnostics.
// rng is the handler block's range, used for checks that concern the block as a whole.
func (p Plugin) Decode(body hcl.Body, ctx *hcl.EvalContext, rng hcl.Range) (any, hcl.Diagnostics) {
	if p.Config == nil {
		// No configuration: the body must be empty.
		_, diags := body.Content(&hcl.BodySchema{})
		return nil, diags
	}
	cfg := p.Config()
	diags := gohcl.DecodeBody(body, ctx, cfg)
	if diags.HasErrors() {
		return cfg, diags
	}
	if v, ok := cfg.(Validator); ok {
		diags = append(diags, v.Validate(rng)...)
	}
	return cfg, diags
}
