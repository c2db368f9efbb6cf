// Package registry holds every extension point of flowrun under one namespaced ID, in the manner
// of Caddy's module registry: "source.stream" is a source kind, "emit.list" an emit kind,
// "handler.http" a Go handler. A module is a value that says its ID and carries its constructor:
// a transports.Kind its New (a source block's Config), a transports.EmitKind its Sink, a Go
// handler's registration its Decode (a handler block's config). Each is registered with
// Register, in init, and config and cli find it with Lookup or Namespace.
//
// transports.Register and transports.RegisterEmit are Register with their namespace's messages
// (registry.Register(transports.Kind{…}) does the same); plugins.Register builds a handler's
// module from its Spec (the decoder from its config struct), then calls Register.
//
// The lifecycle interfaces are optional: Register calls a module's Validate (Validator); `flowrun
// run` calls Provision (Provisioner) on a pipeline's source Config before it builds the source,
// and Cleanup (CleanerUpper) once the pipeline has stopped, or at once when Provision or the
// build fails. A Go handler has the same moments through plugins: Spec.Validate at every load,
// Spec.Provision, and the Starter and Closer interfaces of its Handler.
package registry

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// The namespaces of flowrun's extension points: the part of an ID before the first dot.
const (
	Source  = "source"  // source "NAME" {}: a transports.Kind
	Emit    = "emit"    // emit "NAME" {} and plugins.To: a transports.EmitKind
	Handler = "handler" // handler "NAME" {}: a Go handler, registered by plugins.Register
)

var namespaces = []string{Source, Emit, Handler}

// ID is a module's namespaced ID, "NAMESPACE.NAME": "source.stream", "emit.record".
type ID string

// NewID returns the ID of the module name in namespace.
func NewID(namespace, name string) ID { return ID(namespace + "." + name) }

// Namespace is the part of the ID before the first dot.
func (id ID) Namespace() string {
	ns, _, _ := strings.Cut(string(id), ".")
	return ns
}

// Name is the part of the ID after the first dot: the label of the HCL block that uses it.
func (id ID) Name() string {
	_, name, _ := strings.Cut(string(id), ".")
	return name
}

// Module is a registered extension: a value that says its ID.
type Module interface {
	ModuleID() ID
}

// Provisioner is implemented by a module's instance that sets itself up before use: a source
// Config, by `flowrun run`, before the source is built from it. ctx bounds the set-up only.
type Provisioner interface {
	Provision(ctx context.Context) error
}

// Validator is implemented by a module that checks itself when it is registered: Register panics
// with the error, a programmer's mistake found the first time the binary starts. (A decoded
// source block checks itself in its Decode, with positions; a handler's config in its
// Spec.Validate.)
type Validator interface {
	Validate() error
}

// CleanerUpper is implemented by a module's instance that holds something to release once it is
// no longer used: a pipeline's source Config when the pipeline has stopped. It is also called
// after a failed Provision, so it must cope with a half set-up instance.
type CleanerUpper interface {
	Cleanup() error
}

// Provision calls v's Provision when v is a Provisioner, and on its error v's Cleanup when v is a
// CleanerUpper, so a half set-up instance releases what it took.
func Provision(ctx context.Context, v any) error {
	p, ok := v.(Provisioner)
	if !ok {
		return nil
	}
	err := p.Provision(ctx)
	if err == nil {
		return nil
	}
	if cerr := Cleanup(v); cerr != nil {
		err = errors.Join(err, fmt.Errorf("cleanup: %w", cerr))
	}
	return err
}

// Validate calls v's Validate when v is a Validator.
func Validate(v any) error {
	if vv, ok := v.(Validator); ok {
		return vv.Validate()
	}
	return nil
}

// Cleanup calls v's Cleanup when v is a CleanerUpper.
func Cleanup(v any) error {
	if c, ok := v.(CleanerUpper); ok {
		return c.Cleanup()
	}
	return nil
}

var (
	mu      sync.RWMutex
	modules = map[ID]Module{}
)

// Register adds a module; call it from init (or through transports.Register,
// transports.RegisterEmit or plugins.Register, which call it). It panics on a programmer's
// mistake, found the first time the binary starts: an ID without a known namespace or a name, an
// ID registered twice, or a module whose Validate fails.
func Register(m Module) {
	id := m.ModuleID()
	ns, name, _ := strings.Cut(string(id), ".")
	if name == "" || !known(ns) {
		panic(fmt.Sprintf("registry: module ID %q must be NAMESPACE.NAME, the namespace one of %s", id, strings.Join(namespaces, ", ")))
	}
	if err := Validate(m); err != nil {
		panic(fmt.Sprintf("registry: %s: %v", id, err))
	}
	mu.Lock()
	defer mu.Unlock()
	if _, dup := modules[id]; dup {
		panic(fmt.Sprintf("registry: %s registered twice", id))
	}
	modules[id] = m
}

func known(ns string) bool {
	for _, n := range namespaces {
		if n == ns {
			return true
		}
	}
	return false
}

// Lookup finds a registered module.
func Lookup(id ID) (Module, bool) {
	mu.RLock()
	defer mu.RUnlock()
	m, ok := modules[id]
	return m, ok
}

// Get finds a registered module of type M: false when there is none, or it is of another type.
func Get[M Module](id ID) (M, bool) {
	m, ok := Lookup(id)
	if !ok {
		var zero M
		return zero, false
	}
	mm, ok := m.(M)
	return mm, ok
}

// Namespace lists the modules of a namespace of type M, by ID.
func Namespace[M Module](namespace string) []M {
	mu.RLock()
	ids := make([]ID, 0, len(modules))
	for id := range modules {
		if id.Namespace() == namespace {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	out := make([]M, 0, len(ids))
	for _, id := range ids {
		if m, ok := modules[id].(M); ok {
			out = append(out, m)
		}
	}
	mu.RUnlock()
	return out
}

// Isolate empties the namespaces named (every one when none is) until the returned function puts
// back what they held: for a test that registers modules of its own.
func Isolate(namespace ...string) (restore func()) {
	if len(namespace) == 0 {
		namespace = namespaces
	}
	mu.Lock()
	defer mu.Unlock()
	saved := map[ID]Module{}
	for id, m := range modules {
		for _, ns := range namespace {
			if id.Namespace() == ns {
				saved[id] = m
				delete(modules, id)
			}
		}
	}
	return func() {
		mu.Lock()
		defer mu.Unlock()
		for id := range modules {
			for _, ns := range namespace {
				if id.Namespace() == ns {
					delete(modules, id)
				}
			}
		}
		for id, m := range saved {
			modules[id] = m
		}
	}
}

// Snapshot returns a function that puts the registry back as it is now, removing what was
// registered since: for a test that registers modules of its own beside the built-in ones.
func Snapshot() (restore func()) {
	mu.RLock()
	saved := make(map[ID]Module, len(modules))
	for id, m := range modules {
		saved[id] = m
	}
	mu.RUnlock()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		modules = saved
	}
}
