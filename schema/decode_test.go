package schema

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

var testDecls = []Attr{
	String("stream").NonEmpty().Require(),
	String("group").NonEmpty().DefaultFrom(FromPipelineName),
	String("start").WithDefault("$"),
	Count("batch").WithDefault(10),
	Bool("reliable").WithDefault(true),
	Duration("block").WithDefault(time.Second),
	Duration("grace").AllowZero(),
	Path("checkpoint"),
	Strings("channels"),
	StringMap("headers"),
}

func decodeHCL(t *testing.T, src string) (*Values, hcl.Diagnostics) {
	t.Helper()
	f, diags := hclsyntax.ParseConfig([]byte(src), "t.hcl", hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	attrs, diags := f.Body.JustAttributes()
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	v := Decode(attrs, testDecls, Env{Dir: "/cfg", From: map[string]any{FromPipelineName: "orders"}})
	return v, decodeAll(v)
}

// decodeAll reads every written attribute, in the order they are written, and returns the
// mistakes found so far.
func decodeAll(v *Values) hcl.Diagnostics {
	for _, name := range sortedByPosition(v.written) {
		v.Get(name)
	}
	return v.diags
}

func TestDecodeDefaults(t *testing.T) {
	v, diags := decodeHCL(t, "")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	for _, a := range testDecls {
		want := a.Value
		switch {
		case a.From != "":
			want = "orders"
		case want == nil:
			want = a.Zero()
		}
		if got := v.Get(a.Name); !equal(got, want) {
			t.Errorf("%s = %#v, want the declared default %#v", a.Name, got, want)
		}
		if v.Written(a.Name) || v.OK(a.Name) {
			t.Errorf("%s: Written or OK without being written", a.Name)
		}
	}
	if v.String("group") != "orders" || v.Int("batch") != 10 || !v.Bool("reliable") || v.Duration("block") != time.Second {
		t.Errorf("typed getters: %q %d %v %v", v.String("group"), v.Int("batch"), v.Bool("reliable"), v.Duration("block"))
	}
}

func equal(a, b any) bool {
	switch a := a.(type) {
	case []string:
		b, _ := b.([]string)
		return len(a) == 0 && len(b) == 0
	case map[string]string:
		b, _ := b.(map[string]string)
		return len(a) == 0 && len(b) == 0
	}
	return a == b
}

func TestDecodeWritten(t *testing.T) {
	v, diags := decodeHCL(t, `
stream = "s"
group = "g"
batch = 3
reliable = false
block = "250ms"
grace = "0s"
checkpoint = "cp"
channels = ["a", "b"]
headers = { A = "1" }
`)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if v.String("stream") != "s" || v.String("group") != "g" || v.Int("batch") != 3 || v.Bool("reliable") ||
		v.Duration("block") != 250*time.Millisecond || v.Duration("grace") != 0 || v.String("checkpoint") != "/cfg/cp" ||
		strings.Join(v.Strings("channels"), ",") != "a,b" || v.StringMap("headers")["A"] != "1" {
		t.Errorf("decoded: %+v", v.vals)
	}
	if !v.OK("batch") || !v.Written("batch") || v.Attr("batch") == nil || v.Attr("start") != nil {
		t.Error("Written, OK or Attr")
	}
}

func TestDecodeMistakes(t *testing.T) {
	v, diags := decodeHCL(t, `
strem = "s"
group = ""
batch = 0
block = "soon"
grace = "-1s"
channels = []
`)
	want := []string{
		`t.hcl:2,1-6: Unsupported argument; An argument named "strem" is not expected here. Did you mean "stream"?`,
		`t.hcl:3,9-11: Invalid value; "group" must not be empty.`,
		`t.hcl:4,9-10: Invalid value; "batch" must be at least 1.`,
		`t.hcl:5,9-15: Invalid duration; "soon" is not a duration: invalid duration "soon". Write a Go duration such as "250ms", "30s" or "1h".`,
		`t.hcl:6,9-14: Invalid value; "grace" must not be negative.`,
		`t.hcl:7,12-14: Invalid value; "channels" must not be empty.`,
	}
	if len(diags) != len(want) {
		t.Fatalf("got %d diagnostics, want %d: %v", len(diags), len(want), diags)
	}
	for i, d := range diags {
		if got := d.Error(); got != want[i] {
			t.Errorf("diagnostic %d:\n got %s\nwant %s", i, got, want[i])
		}
	}
	if v.OK("batch") || v.Int("batch") != 0 {
		t.Error("a mistaken value is the zero value and not OK")
	}
}

func TestDeclarations(t *testing.T) {
	a := Duration("block").WithDefault(time.Second).Describe("How long.")
	if a.Type != "duration" || a.Default != "`\"1s\"`" || a.Doc != "How long." || a.Kind != KindDuration {
		t.Errorf("%+v", a)
	}
	if g := String("group").DefaultFrom(FromPipelineName); g.Default != FromPipelineName || g.Value != nil {
		t.Errorf("%+v", g)
	}
	if p := String("processing").DefaultDoc("`\"<key>:processing\"`"); p.Default != "`\"<key>:processing\"`" || p.Value != nil {
		t.Errorf("%+v", p)
	}
	defer func() {
		if recover() == nil {
			t.Error("a default of the wrong type must panic")
		}
	}()
	Count("batch").WithDefault("10")
}

// A written attribute is decoded when it is read, so its mistake is reported between the
// reader's own checks, in the order it reads; Report gets each as it is found.
func TestDecodeReportsInReadOrder(t *testing.T) {
	f, _ := hclsyntax.ParseConfig([]byte("batch = 0\nblock = \"x\"\n"), "t.hcl", hcl.InitialPos)
	attrs, _ := f.Body.JustAttributes()
	var got []string
	v := Decode(attrs, testDecls, Env{Report: func(ds ...*hcl.Diagnostic) {
		for _, d := range ds {
			got = append(got, d.Summary)
		}
	}})
	v.Duration("block")
	v.Int("batch")
	v.Int("batch")
	if strings.Join(got, ",") != "Invalid duration,Invalid value" || len(v.Diagnostics()) != 2 {
		t.Errorf("reported %v, collected %v", got, v.Diagnostics())
	}
}
