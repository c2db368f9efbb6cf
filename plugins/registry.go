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
	// Config returns a pointer to a new config struct with gohcl tags (`hcl:"url"`,
	// `hcl:"timeout,optional"`, `hcl:"tls,block"`), or Config is nil when the handler takes no
	// configuration (its block must then be empty). Defaults are set on the returned value:
	// decoding only overwrites the attributes the user wrote.
	Config func() any
	// New builds the handler from its decoded and validated config (the value Config returned,
	// nil when Config is nil). It is called once per pipeline that uses the handler, by
	// `flowrun run` only: `validate` and `test` stop after Decode. Keep slow I/O for Start.
	New func(ctx context.Context, cfg any, env Env) (engine.Handler, error)
}

// Env is what a handler is given when it is built.
type Env struct {
	// Pipeline is the name of the pipeline the handler serves.
	Pipeline string
	// Logger is scoped to this pipeline and handler: it already carries the pipeline, source and
	// handler fields. Log with it, never with a global logger.
	Logger zerolog.Logger
}

// Validator is an optional interface of a config struct: checks beyond types, returned as
// diagnostics so the user sees FILE:LINE:COL. rng is the handler block's header range. To point
// at one attribute instead, implement BlockValidator.
type Validator interface {
	Validate(rng hcl.Range) hcl.Diagnostics
}

// BlockValidator is an optional interface of a config struct, like Validator but given the
// block's attributes with their ranges, so a bad value is reported where it was written. When a
// config implements both, only ValidateBlock is called.
type BlockValidator interface {
	ValidateBlock(b Block) hcl.Diagnostics
}

// Starter is an optional interface of a built handler. `flowrun run` calls Start once per
// handler, right after its New, while it builds the pipelines one by one (so pipelines later in
// the files are not built yet), and before any pipeline reads; an error stops the run before
// anything is consumed (exit code 2), and Close is still called. ctx is the run's context: it
// is not cancelled when Start returns but at the stop signal, so work that outlives Start must
// not rely on it and must be stopped by Close.
type Starter interface {
	Start(ctx context.Context) error
}

// Closer is an optional interface of a built handler (io.Closer). `flowrun run` calls Close
// once, after the last Handle call has returned, and also when the run fails after New
// succeeded, so Close must cope with a handler that was never started.
type Closer interface {
	Close() error
}

// Start calls h's Start when h implements Starter.
func Start(ctx context.Context, h engine.Handler) error {
	if s, ok := h.(Starter); ok {
		return s.Start(ctx)
	}
	return nil
}

// Close calls h's Close when h implements Closer.
func Close(h engine.Handler) error {
	if c, ok := h.(Closer); ok {
		return c.Close()
	}
	return nil
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
	// hcl reports a missing attribute at the body's opening brace; point at the block header,
	// as every other missing attribute in flowrun's configuration is (SPEC §2).
	missing := body.MissingItemRange()
	for _, d := range diags {
		if d.Subject != nil && *d.Subject == missing {
			d.Subject = rng.Ptr()
		}
	}
	if diags.HasErrors() {
		return cfg, diags
	}
	switch v := cfg.(type) {
	case BlockValidator:
		diags = append(diags, v.ValidateBlock(newBlock(body, rng, cfg))...)
	case Validator:
		diags = append(diags, v.Validate(rng)...)
	}
	return cfg, diags
}
