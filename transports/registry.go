// Package transports is the source and emit namespaces of flowrun's module registry (package
// registry): source kinds ("source.stream") and emit kinds ("emit.list"). Each transport
// package registers what it provides in init, as Caddy modules do; config decodes source blocks
// and emit blocks through the registry, and cli builds, inspects and redrives sources and opens
// sinks through it, so neither of them names a kind.
//
// A source kind declares its block's schema (Kind.Schema), the pipeline attributes only it takes
// (Kind.PipelineAttrs) and a constructor of its Config, which decodes the block with positioned
// diagnostics (Config.Decode), builds the engine.Source for a run (Config.Build) and may
// implement the optional interfaces: RedisBlockReader (its block takes "redis"),
// FlowStoreProvider (where flow control keeps its state), TraceCarrier (the messaging system of
// its spans), ClusterChecker (load-time Redis Cluster checks), StdinReader, Inspector (flowrun
// inspect), DeadLetterStore (flowrun dlq), DeadLetterLocator, and the registry's lifecycle
// interfaces registry.Provisioner and registry.CleanerUpper, called around a run. (A Config need
// not be a registry.Validator: it reports its mistakes in Decode, with positions; the Validate
// of a built-in's Options is the transport's own guard at Build.) An emit kind declares what its
// block takes and a sink constructor.
//
// The built-in transports register themselves when package transports/builtin is imported;
// package cli imports it, so a custom binary whose main calls cli.Main has them, and a new
// transport is one package plus a blank import.
package transports

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/hashicorp/hcl/v2"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/registry"
	"github.com/flowrun/flowrun/schema"
)

// Kind is a source kind: what `source "NAME" {}` means.
type Kind struct {
	// Name is the source block's label.
	Name string
	// Order places the kind in lists shown to people (the diagnostics that name the kinds):
	// ascending, then by name; 0 sorts after every numbered kind. The built-in kinds take 10 to
	// 70 in SPEC §2's order.
	Order int
	// Attrs are the source block's attributes, documented: BodySchema derives the decoding
	// schema from them, and `go generate ./docs` writes the reference from them, so the two
	// cannot drift. A kind without Attrs (one from outside this repository) may set Schema's
	// attributes itself.
	Attrs []schema.Attr
	// Schema is the source block's body, less what Attrs declares (BodySchema is the whole).
	// config decodes the block with BodySchema: an attribute that is
	// not here is reported (naming the kinds that take it, or hcl's "Did you mean"), and a
	// Required attribute that is missing is reported at the block's header as `The argument
	// "NAME" is required for a KIND source.` Block.Body holds what was written.
	Schema hcl.BodySchema
	// Summary is one line for lists of kinds ("Redis stream, consumer group"); Doc is the
	// reference page's prose (Markdown): how the kind reads, settles each outcome and retries.
	Summary, Doc string
	// Example is a complete configuration using the kind, one that `flowrun validate` accepts:
	// the docs' tests load it.
	Example string
	// PipelineAttrs are pipeline attributes that only some kinds take (SPEC §2). A pipeline
	// whose source's kind does not list one reports it as an unsupported argument.
	PipelineAttrs []PipelineAttr
	// New returns an empty Config of this kind, for config to decode a block into.
	New func() Config
}

// PipelineAttr is a pipeline attribute that only some source kinds take, such as delayed_retry.
type PipelineAttr struct {
	// Attr names and documents the attribute.
	schema.Attr
	// AppliesTo says which sources take it, for the message on a pipeline whose source does not:
	// `"delay_key" only applies to APPLIES_TO; this pipeline's source is a list source.` Kinds
	// that share an attribute should share the wording; the first kind in Order's is used.
	AppliesTo string
}

// EmitKind is what `emit "NAME" {}` in a rule means, and where emitted messages of that kind go.
type EmitKind struct {
	// Name is the emit block's label, and engine.Target.Kind.
	Name string
	// Doc says where the emit writes and how (Markdown), for the reference.
	Doc string
	// Order places the kind in lists shown to people, as Kind.Order does.
	Order int
	// Redis says the emit writes to a redis block: its block takes "redis" (default: the
	// source's own redis block, else the only one), resolved into engine.Target.Redis.
	Redis bool
	// Path says the emit block takes "path", a file resolved against the HCL file's folder
	// into engine.Target.Path.
	Path bool
	// GoesTo says where an emit without Redis writes, for the message on a "redis" attribute
	// written in its block: `a record goes to GOES_TO.`
	GoesTo string
	// Sink opens the sink of a target of this kind; the engine caches it per target. Whatever
	// it opens that needs closing it registers with env.OnClose.
	Sink func(t engine.Target, env *Env) (engine.Sink, error)
}

// ModuleID is the kind's ID in the registry: "source.NAME".
func (k Kind) ModuleID() registry.ID { return registry.NewID(registry.Source, k.Name) }

// BodySchema is the source block's hcl schema: Schema, with an attribute for each of Attrs.
func (k Kind) BodySchema() hcl.BodySchema {
	s := hcl.BodySchema{Attributes: slices.Clone(k.Schema.Attributes), Blocks: k.Schema.Blocks}
	for _, a := range k.Attrs {
		s.Attributes = append(s.Attributes, hcl.AttributeSchema{Name: a.Name, Required: a.Required})
	}
	return s
}

// Validate is called by registry.Register: a kind needs a Name and New, declares its attributes
// in Attrs or in Schema but not both, and must not declare "redis", which config adds for a kind
// whose Config is a RedisBlockReader.
func (k Kind) Validate() error {
	if k.Name == "" || k.New == nil {
		return errors.New("transports: Register needs a Name and New")
	}
	if len(k.Attrs) > 0 && len(k.Schema.Attributes) > 0 {
		return fmt.Errorf("transports: source kind %q sets both Attrs and Schema.Attributes", k.Name)
	}
	for _, a := range k.BodySchema().Attributes {
		if a.Name == "redis" {
			return fmt.Errorf("transports: source kind %q lists \"redis\" in its Schema; implement RedisBlockReader instead", k.Name)
		}
	}
	return nil
}

// ReadsRedisBlock reports whether the kind's Config is a RedisBlockReader that reads one.
func (k Kind) ReadsRedisBlock() bool {
	r, ok := k.New().(RedisBlockReader)
	return ok && r.ReadsRedisBlock()
}

// ModuleID is the emit kind's ID in the registry: "emit.NAME".
func (e EmitKind) ModuleID() registry.ID { return registry.NewID(registry.Emit, e.Name) }

// WritesRedis reports Redis, for plugins.To, which resolves an emit kind through the registry
// without importing this package.
func (e EmitKind) WritesRedis() bool { return e.Redis }

// TakesPath reports Path, for plugins.To.
func (e EmitKind) TakesPath() bool { return e.Path }

// Validate is called by registry.Register: an emit kind needs a Name and Sink.
func (e EmitKind) Validate() error {
	if e.Name == "" || e.Sink == nil {
		return errors.New("transports: RegisterEmit needs a Name and Sink")
	}
	return nil
}

// Register adds a source kind to the registry; transport packages call it in init. It is
// registry.Register with this namespace's messages: it panics on a programmer's mistake (an
// empty or duplicate name, no New, "redis" declared), found the first time the binary starts.
// registry.Register(Kind{…}) does the same; this name stays because every transport, test and
// page calls it.
func Register(k Kind) {
	if err := k.Validate(); err != nil {
		panic(err.Error())
	}
	if _, dup := Lookup(k.Name); dup {
		panic(fmt.Sprintf("transports: source kind %q registered twice", k.Name))
	}
	registry.Register(k)
}

// Lookup finds a registered source kind.
func Lookup(name string) (Kind, bool) {
	return registry.Get[Kind](registry.NewID(registry.Source, name))
}

// Kinds lists the registered source kinds by Order, then name.
func Kinds() []Kind {
	out := registry.Namespace[Kind](registry.Source)
	slices.SortStableFunc(out, func(a, b Kind) int { return compare(a.Order, a.Name, b.Order, b.Name) })
	return out
}

// RegisterEmit adds an emit kind to the registry; transport packages call it in init. It is
// registry.Register with this namespace's messages: it panics on an empty or duplicate name or a
// nil Sink. registry.Register(EmitKind{…}) does the same; this name stays because every
// transport, test and page calls it.
func RegisterEmit(e EmitKind) {
	if err := e.Validate(); err != nil {
		panic(err.Error())
	}
	if _, dup := LookupEmit(e.Name); dup {
		panic(fmt.Sprintf("transports: emit kind %q registered twice", e.Name))
	}
	registry.Register(e)
}

// LookupEmit finds a registered emit kind.
func LookupEmit(name string) (EmitKind, bool) {
	return registry.Get[EmitKind](registry.NewID(registry.Emit, name))
}

// EmitKinds lists the registered emit kinds by Order, then name.
func EmitKinds() []EmitKind {
	out := registry.Namespace[EmitKind](registry.Emit)
	slices.SortStableFunc(out, func(a, b EmitKind) int { return compare(a.Order, a.Name, b.Order, b.Name) })
	return out
}

func compare(ao int, an string, bo int, bn string) int {
	rank := func(o int) int {
		if o <= 0 {
			return math.MaxInt
		}
		return o
	}
	if ra, rb := rank(ao), rank(bo); ra != rb {
		if ra < rb {
			return -1
		}
		return 1
	}
	switch {
	case an < bn:
		return -1
	case an > bn:
		return 1
	}
	return 0
}
