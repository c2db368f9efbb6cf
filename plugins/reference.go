package plugins

import (
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2/gohcl"

	"github.com/flowrun/flowrun/schema"
)

// What the reference in docs/ says about the built-in handlers' blocks and their tests' mock
// blocks. A Spec's Body must name exactly what its config struct's hcl tags do (checkBody), and
// the mock blocks are decoded from mockBodies, so the reference cannot drift from the decoders.

// checkBody reports a difference between the attributes and blocks documented in b and those
// of t's hcl tags, nested blocks included.
func checkBody(b *schema.Body, t reflect.Type) error {
	s, _ := gohcl.ImpliedBodySchema(reflect.New(t).Interface())
	var tagged, documented []string
	for _, a := range s.Attributes {
		tagged = append(tagged, a.Name)
	}
	for _, bl := range s.Blocks {
		tagged = append(tagged, "block "+bl.Type)
	}
	for _, a := range b.Attrs {
		documented = append(documented, a.Name)
	}
	for _, bl := range b.Blocks {
		documented = append(documented, "block "+bl.Type)
	}
	slices.Sort(tagged)
	slices.Sort(documented)
	if !slices.Equal(tagged, documented) {
		return fmt.Errorf("Body documents [%s] but %s's hcl tags are [%s]", strings.Join(documented, ", "), t, strings.Join(tagged, ", "))
	}
	for _, bl := range b.Blocks {
		if bl.Body == nil {
			continue
		}
		for _, f := range fieldTags(t) {
			if f.kind == "block" && f.name == bl.Type {
				ft := t.Field(f.index).Type
				for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
					ft = ft.Elem()
				}
				if err := checkBody(bl.Body, ft); err != nil {
					return fmt.Errorf("block %s: %w", bl.Type, err)
				}
			}
		}
	}
	return nil
}

var httpBody = &schema.Body{
	Attrs: []schema.Attr{
		schema.String("url").Require().Describe("The endpoint, an absolute `http://` or `https://` URL. Only 307 and 308 redirects are followed."),
		schema.String("method").WithDefault(httpDefaultMethod).Describe("The request method."),
		schema.Duration("timeout").WithDefault(httpDefaultTimeout).Describe("The whole request's limit; on expiry the outcome is `retry`."),
		schema.StringMap("headers").Describe("Request headers sent with every request (`{ Authorization = env(\"HOOK_TOKEN\") }`)."),
		schema.String("header_prefix").WithDefault(httpDefaultHeaderPrefix).Describe("Each message header is sent as the request header `<header_prefix><Header>`."),
	},
	Blocks: []schema.Block{
		{Type: "tls", Occurs: "optional", Body: httpTLSBody, Doc: "TLS for an `https://` endpoint: a private certificate authority, a client certificate."},
	},
}

var httpTLSBody = &schema.Body{Attrs: []schema.Attr{
	schema.Path("ca_file").DefaultDoc("the system's roots").Describe("PEM certificate authorities that sign the server's certificate."),
	schema.Path("cert_file").Describe("PEM client certificate; needs `key_file`."),
	schema.Path("key_file").Describe("PEM private key of `cert_file`."),
	schema.String("server_name").DefaultDoc("the URL's host").Describe("The name the server's certificate must carry."),
	schema.Bool("insecure_skip_verify").WithDefault(false).Describe("Accept any server certificate; for tests only."),
}}

var execBody = &schema.Body{Attrs: []schema.Attr{
	schema.Strings("command").Require().Describe("The program and its arguments, run without a shell (`[\"./bin/charge\", \"--live\"]`). It gets the payload on stdin, each header as `FLOWRUN_HEADER_<NAME>` (upper case, `-` as `_`), and `FLOWRUN_KEY`, `FLOWRUN_ID`, `FLOWRUN_ATTEMPT`."),
	schema.Duration("timeout").WithDefault(execDefaultTimeout).Describe("How long one run may take; on expiry the process group is killed and the outcome is `retry`."),
	schema.Path("dir").DefaultDoc("flowrun's working folder").Describe("The folder the command runs in, relative to the HCL file; it must exist."),
	schema.String("emit_stdout").Describe("On exit 0, emit each non-empty line the command printed as a record with this key (to standard output)."),
}}

// mockBodies are the mock blocks of a test of a pipeline with the named handler (SPEC §9).
var mockBodies = map[string]*schema.Body{
	"http": {Attrs: []schema.Attr{
		schema.Int("status").WithDefault(http.StatusOK).Describe("The response status."),
		schema.StringMap("headers").Describe("Response headers (`{ \"Retry-After\" = \"7\" }`)."),
		{Name: "body", Type: "string or any value", Doc: "The response body: a string, or any other value as its JSON text. In a workflow step it is the step's output."},
	}},
	"exec": {Attrs: []schema.Attr{
		schema.Int("exit").WithDefault(0).Describe("The exit status: 0 acks, 75 retries, any other dead-letters."),
		schema.String("stdout").Describe("What the process prints on stdout (`emit_stdout` reads it; in a workflow step it is the step's output)."),
		schema.String("stderr").Describe("What it prints on stderr; its last line goes into the dead-letter reason."),
	}},
}

// mockDefault is the declared default of a mock attribute.
func mockDefault[T any](handler, attr string) T {
	a, _ := mockBodies[handler].Attr(attr)
	v, _ := a.Value.(T)
	return v
}

// checkDefaults reports a typed default of b that no field of t's hcl tags can hold, or that
// disagrees with what defaults (Spec.Defaults) sets: the declaration is the default, and the
// reference shows it.
func checkDefaults(b *schema.Body, t reflect.Type, defaults reflect.Value) error {
	for _, f := range fieldTags(t) {
		a, ok := b.Attr(f.name)
		if !ok || a.Value == nil || (f.kind != "attr" && f.kind != "optional") {
			continue
		}
		ft := t.Field(f.index).Type
		if !reflect.TypeOf(a.Value).AssignableTo(ft) {
			return fmt.Errorf("attribute %q declares a default of type %T, but its field is %s", f.name, a.Value, ft)
		}
		if defaults.IsValid() {
			if got := defaults.Field(f.index); !got.IsZero() && !reflect.DeepEqual(got.Interface(), a.Value) {
				return fmt.Errorf("Defaults sets %q to %v, but its declaration says %v", f.name, got.Interface(), a.Value)
			}
		}
	}
	return nil
}
