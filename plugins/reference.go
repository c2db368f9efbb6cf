package plugins

import (
	"fmt"
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
		{Name: "url", Type: "string", Required: true, Doc: "The endpoint, an absolute `http://` or `https://` URL. Only 307 and 308 redirects are followed."},
		{Name: "method", Type: "string", Default: schema.Value(httpDefaultMethod), Doc: "The request method."},
		{Name: "timeout", Type: "duration", Default: schema.Value(httpDefaultTimeout), Doc: "The whole request's limit; on expiry the outcome is `retry`."},
		{Name: "headers", Type: "map of strings", Doc: "Request headers sent with every request (`{ Authorization = env(\"HOOK_TOKEN\") }`)."},
		{Name: "header_prefix", Type: "string", Default: schema.Value(httpDefaultHeaderPrefix), Doc: "Each message header is sent as the request header `<header_prefix><Header>`."},
	},
	Blocks: []schema.Block{
		{Type: "tls", Occurs: "optional", Body: httpTLSBody, Doc: "TLS for an `https://` endpoint: a private certificate authority, a client certificate."},
	},
}

var httpTLSBody = &schema.Body{Attrs: []schema.Attr{
	{Name: "ca_file", Type: "path", Default: "the system's roots", Doc: "PEM certificate authorities that sign the server's certificate."},
	{Name: "cert_file", Type: "path", Doc: "PEM client certificate; needs `key_file`."},
	{Name: "key_file", Type: "path", Doc: "PEM private key of `cert_file`."},
	{Name: "server_name", Type: "string", Default: "the URL's host", Doc: "The name the server's certificate must carry."},
	{Name: "insecure_skip_verify", Type: "bool", Default: schema.Value(false), Doc: "Accept any server certificate; for tests only."},
}}

var execBody = &schema.Body{Attrs: []schema.Attr{
	{Name: "command", Type: "list of strings", Required: true, Doc: "The program and its arguments, run without a shell (`[\"./bin/charge\", \"--live\"]`). It gets the payload on stdin, each header as `FLOWRUN_HEADER_<NAME>` (upper case, `-` as `_`), and `FLOWRUN_KEY`, `FLOWRUN_ID`, `FLOWRUN_ATTEMPT`."},
	{Name: "timeout", Type: "duration", Default: schema.Value(execDefaultTimeout), Doc: "How long one run may take; on expiry the process group is killed and the outcome is `retry`."},
	{Name: "dir", Type: "path", Default: "flowrun's working folder", Doc: "The folder the command runs in, relative to the HCL file; it must exist."},
	{Name: "emit_stdout", Type: "string", Doc: "On exit 0, emit each non-empty line the command printed as a record with this key (to standard output)."},
}}

// mockBodies are the mock blocks of a test of a pipeline with the named handler (SPEC §9).
var mockBodies = map[string]*schema.Body{
	"http": {Attrs: []schema.Attr{
		{Name: "status", Type: "number", Default: schema.Value(200), Doc: "The response status."},
		{Name: "headers", Type: "map of strings", Doc: "Response headers (`{ \"Retry-After\" = \"7\" }`)."},
		{Name: "body", Type: "string or any value", Doc: "The response body: a string, or any other value as its JSON text."},
	}},
	"exec": {Attrs: []schema.Attr{
		{Name: "exit", Type: "number", Default: schema.Value(0), Doc: "The exit status: 0 acks, 75 retries, any other dead-letters."},
		{Name: "stdout", Type: "string", Doc: "What the process prints on stdout (`emit_stdout` reads it)."},
		{Name: "stderr", Type: "string", Doc: "What it prints on stderr; its last line goes into the dead-letter reason."},
	}},
}
