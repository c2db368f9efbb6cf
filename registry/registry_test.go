package registry

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

type mod struct {
	id  ID
	bad error
}

func (m mod) ModuleID() ID    { return m.id }
func (m mod) Validate() error { return m.bad }

func TestRegister(t *testing.T) {
	t.Cleanup(Isolate())
	Register(mod{id: "source.b"})
	Register(mod{id: "source.a"})
	Register(mod{id: "emit.a"})
	for name, m := range map[string]mod{
		"no namespace":      {id: "b"},
		"unknown namespace": {id: "sink.b"},
		"no name":           {id: "source."},
		"twice":             {id: "source.a"},
		"invalid":           {id: "handler.x", bad: errors.New("no Decode")},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if r := recover(); r == nil || !strings.HasPrefix(r.(string), "registry: ") {
					t.Fatalf("recovered %v, want a registry: panic", r)
				}
			}()
			Register(m)
		})
	}
	if _, ok := Lookup("handler.x"); ok {
		t.Error("a refused module was registered")
	}
	var ids []ID
	for _, m := range Namespace[mod](Source) {
		ids = append(ids, m.id)
	}
	if !slices.Equal(ids, []ID{"source.a", "source.b"}) {
		t.Errorf("Namespace(source) = %v", ids)
	}
	if m, ok := Get[mod]("emit.a"); !ok || m.id.Namespace() != Emit || m.id.Name() != "a" {
		t.Errorf("Get(emit.a) = %v, %v", m, ok)
	}
	restore := Isolate(Source)
	if len(Namespace[mod](Source)) != 0 || len(Namespace[mod](Emit)) != 1 {
		t.Error("Isolate(source) did not empty source only")
	}
	Register(mod{id: "source.c"})
	restore()
	if _, ok := Lookup("source.c"); ok || len(Namespace[mod](Source)) != 2 {
		t.Error("restore did not put source back")
	}
}

// life records its lifecycle calls.
type life struct {
	calls []string
	fail  bool
}

func (l *life) Provision(context.Context) error {
	l.calls = append(l.calls, "provision")
	if l.fail {
		return errors.New("no")
	}
	return nil
}

func (l *life) Cleanup() error {
	l.calls = append(l.calls, "cleanup")
	return nil
}

// A failed Provision is cleaned up at once, as Caddy does; an instance without the interfaces is
// left alone.
func TestLifecycle(t *testing.T) {
	ok := &life{}
	if err := Provision(t.Context(), ok); err != nil || !slices.Equal(ok.calls, []string{"provision"}) {
		t.Errorf("Provision: %v, calls %v", err, ok.calls)
	}
	bad := &life{fail: true}
	if err := Provision(t.Context(), bad); err == nil || !slices.Equal(bad.calls, []string{"provision", "cleanup"}) {
		t.Errorf("failed Provision: %v, calls %v", err, bad.calls)
	}
	if Provision(t.Context(), 1) != nil || Validate(1) != nil || Cleanup(1) != nil {
		t.Error("an instance without lifecycle methods got an error")
	}
}
