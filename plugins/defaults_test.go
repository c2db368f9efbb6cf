package plugins

import (
	"reflect"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/flowrun/flowrun/internal/handlers"
	"github.com/flowrun/flowrun/schema"
)

// requiredExample is a valid value of each required attribute of the registered handlers, so
// that a block can be decoded with everything else left out.
var requiredExample = map[string]string{"url": `"http://127.0.0.1:1/hook"`, "command": `["true"]`}

// For every registered handler that documents its body, the default the reference shows for
// an attribute is what decoding a block that leaves it out yields; likewise for the mocks.
func TestDocumentedHandlerDefaultsAreDecoded(t *testing.T) {
	for _, name := range handlers.Names() {
		p, _ := handlers.Lookup(name)
		if p.Body == nil {
			continue
		}
		src := ""
		for _, a := range p.Body.Attrs {
			if a.Required {
				ex, ok := requiredExample[a.Name]
				if !ok {
					t.Fatalf("%s: add an example value of the required %q to requiredExample", name, a.Name)
				}
				src += a.Name + " = " + ex + "\n"
			}
		}
		cfg, diags := p.Decode(parseBody(t, src), nil, hcl.Range{Filename: "t.hcl"})
		if diags.HasErrors() {
			t.Fatalf("%s: %v", name, diags)
		}
		v := reflect.ValueOf(cfg.Value())
		for _, f := range fieldTags(v.Type()) {
			a, ok := p.Body.Attr(f.name)
			if !ok || a.Value == nil {
				continue
			}
			if got := v.Field(f.index).Interface(); !reflect.DeepEqual(got, a.Value) {
				t.Errorf("%s: %q decodes to %v from a block without it; the reference says %s", name, f.name, got, a.Default)
			}
			if a.Default != schema.Value(a.Value) {
				t.Errorf("%s: %q documents %s, declares %v", name, f.name, a.Default, a.Value)
			}
		}
	}
	for _, c := range []struct {
		handler string
		got     func(mock) any
		attr    string
	}{
		{"http", func(m mock) any { return m.(*httpMock).status }, "status"},
		{"exec", func(m mock) any { return m.(*execMock).exit }, "exit"},
	} {
		decodeMock := map[string]func(hcl.Body, *hcl.EvalContext, hcl.Range) (mock, hcl.Diagnostics){
			"http": decodeHTTPMock, "exec": decodeExecMock,
		}[c.handler]
		m, diags := decodeMock(parseBody(t, ""), nil, hcl.Range{})
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		a, _ := mockBodies[c.handler].Attr(c.attr)
		if got := c.got(m); got != a.Value {
			t.Errorf("a %s mock's %q decodes to %v from an empty block; the reference says %s", c.handler, c.attr, got, a.Default)
		}
	}
}

func parseBody(t *testing.T, src string) hcl.Body {
	t.Helper()
	f, diags := hclsyntax.ParseConfig([]byte(src), "t.hcl", hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	return f.Body
}

// A Defaults that disagrees with the Body's declared default, or a default of a type its field
// cannot hold, is a programmer's mistake Register reports.
func TestCheckDefaults(t *testing.T) {
	type cfg struct {
		N int `hcl:"n,optional"`
	}
	body := &schema.Body{Attrs: []schema.Attr{schema.Int("n").WithDefault(3)}}
	typ := reflect.TypeFor[cfg]()
	if err := checkDefaults(body, typ, reflect.ValueOf(cfg{N: 3})); err != nil {
		t.Errorf("agreeing Defaults: %v", err)
	}
	if err := checkDefaults(body, typ, reflect.ValueOf(cfg{N: 4})); err == nil {
		t.Error("a Defaults that disagrees must be reported")
	}
	type wrong struct {
		N string `hcl:"n,optional"`
	}
	if err := checkDefaults(body, reflect.TypeFor[wrong](), reflect.Value{}); err == nil {
		t.Error("a default its field cannot hold must be reported")
	}
}
