package transports

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/registry"
	"github.com/flowrun/flowrun/schema"
)

// isolate gives a test an empty registry of source and emit kinds and puts the previous one back
// after it.
func isolate(t *testing.T) {
	t.Helper()
	t.Cleanup(registry.Isolate(registry.Source, registry.Emit))
}

func newNothing() Config { return nil }

func nilSink(engine.Target, *Env) (engine.Sink, error) { return nil, nil }

func TestRegisterRefusesMistakes(t *testing.T) {
	isolate(t)
	Register(Kind{Name: "taken", New: newNothing})
	RegisterEmit(EmitKind{Name: "taken", Sink: nilSink})
	for name, f := range map[string]func(){
		"no name": func() { Register(Kind{New: newNothing}) },
		"no New":  func() { Register(Kind{Name: "x"}) },
		"redis in schema": func() {
			Register(Kind{Name: "x", New: newNothing, Schema: hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "redis"}}}})
		},
		"twice":        func() { Register(Kind{Name: "taken", New: newNothing}) },
		"emit no name": func() { RegisterEmit(EmitKind{Sink: nilSink}) },
		"emit no Sink": func() { RegisterEmit(EmitKind{Name: "x"}) },
		"emit twice":   func() { RegisterEmit(EmitKind{Name: "taken", Sink: nilSink}) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			f()
		})
	}
	if _, ok := Lookup("x"); ok {
		t.Error("a refused kind was registered")
	}
}

// registry.Register is Register: a kind registered with it decodes with the schema of its Attrs.
func TestRegistryRegistersKinds(t *testing.T) {
	isolate(t)
	registry.Register(Kind{Name: "direct", Attrs: []schema.Attr{schema.String("a").Require()}, New: newNothing})
	registry.Register(EmitKind{Name: "direct", Sink: nilSink})
	k, ok := Lookup("direct")
	if !ok || k.ModuleID() != "source.direct" {
		t.Fatalf("Lookup: %+v %v", k, ok)
	}
	if got := k.BodySchema().Attributes; len(got) != 1 || got[0].Name != "a" || !got[0].Required {
		t.Errorf("BodySchema: %+v", got)
	}
	if e, ok := LookupEmit("direct"); !ok || e.ModuleID() != "emit.direct" {
		t.Errorf("LookupEmit: %+v %v", e, ok)
	}
}

func TestKindsInOrder(t *testing.T) {
	isolate(t)
	for _, k := range []Kind{{Name: "b"}, {Name: "late", Order: 20}, {Name: "a"}, {Name: "early", Order: 10}} {
		k.New = newNothing
		Register(k)
		RegisterEmit(EmitKind{Name: k.Name, Order: k.Order, Sink: nilSink})
	}
	var names, emitNames []string
	for _, k := range Kinds() {
		names = append(names, k.Name)
	}
	for _, e := range EmitKinds() {
		emitNames = append(emitNames, e.Name)
	}
	want := []string{"early", "late", "a", "b"} // by Order, unnumbered last, then by name
	if !reflect.DeepEqual(names, want) || !reflect.DeepEqual(emitNames, want) {
		t.Fatalf("Kinds: %q, EmitKinds: %q; want %q", names, emitNames, want)
	}
	if k, ok := Lookup("late"); !ok || k.Order != 20 {
		t.Fatalf("Lookup: %+v %v", k, ok)
	}
	if _, ok := LookupEmit("nope"); ok {
		t.Fatal("LookupEmit found an unregistered kind")
	}
}

// block parses src as a source block's body, every attribute the kind's.
func block(t *testing.T, src string) *Block {
	t.Helper()
	f, diags := hclsyntax.ParseConfig([]byte(src), "t.hcl", hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	attrs, diags := f.Body.JustAttributes()
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	return &Block{Kind: "k", Body: &hcl.BodyContent{Attributes: attrs}, Dir: "/cfg"}
}

// The decoders store the value and report true, or report the mistake at the value, store the
// zero value and report false; an attribute not written is left alone.
func TestAttributeDecoders(t *testing.T) {
	b := block(t, `
s     = "x"
empty = ""
yes   = true
n     = 3
zero  = 0
d     = "1m30s"
neg   = "-1s"
list  = ["a", "b"]
rel   = "in.jsonl"
`)
	a := b.Attrs()
	var (
		s  = "default"
		ok bool
		n  int
		d  time.Duration
		l  []string
	)
	check := func(name string, got, want bool) {
		t.Helper()
		if got != want {
			t.Errorf("%s: got %v, want %v", name, got, want)
		}
	}
	check("missing", a.String("missing", &s) || s != "default", false)
	check("s", a.String("s", &s) && s == "x", true)
	check("empty string", a.String("empty", &s) && s == "", true)
	check("empty non-empty", a.NonEmpty("empty", &s), false)
	check("bool", a.Bool("yes", &ok) && ok, true)
	check("count", a.Count("n", &n) && n == 3, true)
	check("count zero", a.Count("zero", &n) || n != 0, false)
	check("duration", a.Duration("d", &d) && d == 90*time.Second, true)
	check("negative duration", a.Duration("neg", &d), false)
	check("strings", a.Strings("list", &l) && reflect.DeepEqual(l, []string{"a", "b"}), true)
	check("path", a.Path("rel", &s) && s == filepath.Join("/cfg", "in.jsonl"), true)
	check("wrong type", a.Bool("s", &ok), false)
	check("has", a.Has("s") && !a.Has("missing") && a.Get("missing") == nil, true)

	want := []string{
		`t.hcl:3:9: "empty" must not be empty.`,
		`t.hcl:6:9: "zero" must be at least 1.`,
		`t.hcl:8:9: "neg" must be greater than zero.`,
		`t.hcl:2:9: Inappropriate value for attribute "s": a bool is required.`,
	}
	var got []string
	for _, d := range b.Diagnostics() {
		got = append(got, fmt.Sprintf("%s:%d:%d: %s", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column, d.Detail))
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("diagnostics:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestRejectDeadLetterKey(t *testing.T) {
	b := block(t, `x = 1`)
	rng := hcl.Range{Filename: "t.hcl", Start: hcl.Pos{Line: 4, Column: 17}}
	b.Pipeline = Pipeline{DeadLetter: "jobs", DeadLetterRange: rng}
	b.RejectDeadLetterKey("other")
	b.RejectDeadLetterKey("")
	if len(b.Diagnostics()) != 0 {
		t.Fatalf("diagnostics for other keys: %v", b.Diagnostics())
	}
	b.RejectDeadLetterKey("jobs")
	ds := b.Diagnostics()
	if len(ds) != 1 || *ds[0].Subject != rng ||
		ds[0].Detail != `"jobs" is the key this pipeline's k source reads, so every dead letter would be read back as new work; choose another dead_letter key.` {
		t.Fatalf("diagnostics: %v", ds)
	}
}

func TestEnvClient(t *testing.T) {
	if _, err := (&Env{}).Client(); err == nil {
		t.Fatal("a source without a redis block got a client")
	}
	want := errors.New("opened")
	env := &Env{RedisBlock: "main", Redis: func(name string) (redis.UniversalClient, error) {
		if name != "main" {
			t.Errorf("asked for %q", name)
		}
		return nil, want
	}}
	if _, err := env.Client(); err != want {
		t.Fatalf("Client: %v", err)
	}
}
