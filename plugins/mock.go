package plugins

import (
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/zclconf/go-cty/cty"
	ctyjson "github.com/zclconf/go-cty/cty/json"

	"github.com/flowrun/flowrun/internal/handlers"
	"github.com/flowrun/flowrun/internal/hclutil"
	"github.com/flowrun/flowrun/schema"
)

// Mocks: what stands in for the outside world when `flowrun test` runs a pipeline whose handler
// is http or exec (SPEC §9). A test's `mock {}` block is decoded here, each mistake a positioned
// diagnostic; the handler is then provisioned with the mock in place of its transport (http) or
// of the process it runs (exec), and runs its real logic on the mocked answer: request headers,
// Retry-After, the exit status and the last line of stderr, emit_stdout.
//
//	mock { status = 503, headers = { "Retry-After" = "7" }, body = "try later" }  # http
//	mock { exit = 75, stdout = "...", stderr = "gateway busy" }                     # exec

// mock is a decoded `mock {}` block (handlers.Mock).
type mock interface {
	handlers.Mock
	// handler names the handler the mock is for.
	handler() string
	// install puts the mock into the Env that Provision gets.
	install(env *Env)
}

// mockAttrs is every attribute a mock block may hold (mockBodies), with the handler that takes it.
var mockAttrs = func() map[string]string {
	m := map[string]string{}
	for handler, b := range mockBodies {
		for _, a := range b.Attrs {
			m[a.Name] = handler
		}
	}
	return m
}()

// mockOf says what a handler's mock stands in for, in a misplaced attribute's diagnostic.
var mockOf = map[string]string{"http": "the HTTP response", "exec": "the process"}

// mockAttributes reads the attributes of a mock block for handler. One that belongs to another
// handler's mock, or to none, is reported at its name and left out.
func mockAttributes(handler string, body hcl.Body) (map[string]*hcl.Attribute, hcl.Diagnostics) {
	attrs, diags := body.JustAttributes()
	var own []string
	for _, name := range sortedKeys(mockAttrs) {
		if mockAttrs[name] == handler {
			own = append(own, name)
		}
	}
	slices.SortFunc(own, func(a, b string) int { return mockOrder(a) - mockOrder(b) })
	takes := fmt.Sprintf("A mock for the %s handler stands in for %s and takes %s.", handler, mockOf[handler], hclutil.QuoteList(own, "and"))
	names := make([]string, 0, len(attrs))
	for name := range attrs {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int { return attrs[a].Range.Start.Byte - attrs[b].Range.Start.Byte })
	for _, name := range names {
		other, known := mockAttrs[name]
		var detail string
		switch {
		case other == handler:
			continue
		case known:
			detail = fmt.Sprintf("%q mocks %s, for the %s handler. %s", name, mockOf[other], other, takes)
		default:
			detail = fmt.Sprintf("An argument named %q is not expected in a mock.%s %s", name, hclutil.DidYouMean(name, own), takes)
		}
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Unsupported argument",
			Detail:   detail,
			Subject:  attrs[name].NameRange.Ptr(),
		})
		delete(attrs, name)
	}
	return attrs, diags
}

// mockOrder puts a handler's mock attributes in the order the documentation lists them.
func mockOrder(name string) int {
	b := mockBodies[mockAttrs[name]]
	if b == nil {
		return -1
	}
	return slices.IndexFunc(b.Attrs, func(a schema.Attr) bool { return a.Name == name })
}

// mockInt decodes a whole number in [lo, hi].
func mockInt(a *hcl.Attribute, ctx *hcl.EvalContext, lo, hi int, what string) (int, hcl.Diagnostics) {
	var n int
	diags := gohcl.DecodeExpression(a.Expr, ctx, &n)
	if diags.HasErrors() {
		return 0, diags
	}
	if n < lo || n > hi {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid value",
			Detail:   fmt.Sprintf("%q must be %s, %d to %d; got %d.", a.Name, what, lo, hi, n),
			Subject:  a.Expr.Range().Ptr(),
		})
	}
	return n, diags
}

// mockText decodes a string, or any other value as its JSON text (as a test's payload).
func mockText(a *hcl.Attribute, ctx *hcl.EvalContext) (string, hcl.Diagnostics) {
	v, diags := a.Expr.Value(ctx)
	if diags.HasErrors() {
		return "", diags
	}
	switch {
	case v.IsNull():
		return "", diags
	case !v.IsWhollyKnown():
		return "", append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid value",
			Detail:   fmt.Sprintf("The value of %q must be known when the file is read.", a.Name),
			Subject:  a.Expr.Range().Ptr(),
		})
	case v.Type() == cty.String:
		return v.AsString(), diags
	}
	b, err := ctyjson.Marshal(v, v.Type())
	if err != nil {
		return "", append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid value",
			Detail:   fmt.Sprintf("The value of %q cannot be written as JSON: %s.", a.Name, err),
			Subject:  a.Expr.Range().Ptr(),
		})
	}
	return string(b), diags
}

// httpMock answers every request of an http handler with one response.
type httpMock struct {
	status  int
	headers map[string]string
	body    string
}

var (
	_ mock              = (*httpMock)(nil)
	_ http.RoundTripper = (*httpMock)(nil)
)

// decodeHTTPMock decodes `mock { status = 503, headers = {...}, body = "..." }`; status defaults
// to 200.
func decodeHTTPMock(body hcl.Body, ctx *hcl.EvalContext, _ hcl.Range) (mock, hcl.Diagnostics) {
	attrs, diags := mockAttributes("http", body)
	m := &httpMock{status: mockDefault[int]("http", "status")}
	if a, ok := attrs["status"]; ok {
		n, ds := mockInt(a, ctx, 100, 599, "an HTTP status code")
		diags = append(diags, ds...)
		m.status = n
	}
	if a, ok := attrs["headers"]; ok {
		ds := gohcl.DecodeExpression(a.Expr, ctx, &m.headers)
		diags = append(diags, ds...)
		for _, name := range sortedKeys(m.headers) {
			detail := ""
			switch {
			case !validToken(name):
				detail = fmt.Sprintf("%q is not a valid HTTP header name.", name)
			case !validHeaderValue(m.headers[name]):
				detail = fmt.Sprintf("The value of header %q contains a line break or control character.", name)
			default:
				continue
			}
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid value", Detail: detail, Subject: a.Expr.Range().Ptr()})
		}
	}
	if a, ok := attrs["body"]; ok {
		s, ds := mockText(a, ctx)
		diags = append(diags, ds...)
		m.body = s
	}
	if diags.HasErrors() {
		return nil, diags
	}
	return m, diags
}

func (m *httpMock) String() string { return "status " + strconv.Itoa(m.status) }

func (m *httpMock) handler() string { return "http" }

func (m *httpMock) install(env *Env) { env.transport = m }

// RoundTrip reads the request as a server would and answers with the mocked response.
func (m *httpMock) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	h := make(http.Header, len(m.headers))
	for k, v := range m.headers {
		h.Set(k, v)
	}
	return &http.Response{
		Status:        strings.TrimSpace(strconv.Itoa(m.status) + " " + http.StatusText(m.status)),
		StatusCode:    m.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(strings.NewReader(m.body)),
		ContentLength: int64(len(m.body)),
		Request:       req,
	}, nil
}

// execMock stands in for the process of an exec handler: it takes stdin, writes stdout and
// stderr, and exits.
type execMock struct {
	exit           int
	stdout, stderr string
}

var _ mock = (*execMock)(nil)

// decodeExecMock decodes `mock { exit = 75, stdout = "...", stderr = "..." }`; exit defaults to 0.
func decodeExecMock(body hcl.Body, ctx *hcl.EvalContext, _ hcl.Range) (mock, hcl.Diagnostics) {
	attrs, diags := mockAttributes("exec", body)
	m := &execMock{exit: mockDefault[int]("exec", "exit")}
	if a, ok := attrs["exit"]; ok {
		n, ds := mockInt(a, ctx, 0, 255, "an exit status")
		diags = append(diags, ds...)
		m.exit = n
	}
	for _, f := range []struct {
		name string
		dst  *string
	}{{"stdout", &m.stdout}, {"stderr", &m.stderr}} {
		if a, ok := attrs[f.name]; ok {
			s, ds := mockText(a, ctx)
			diags = append(diags, ds...)
			*f.dst = s
		}
	}
	if diags.HasErrors() {
		return nil, diags
	}
	return m, diags
}

func (m *execMock) String() string { return "exit " + strconv.Itoa(m.exit) }

func (m *execMock) handler() string { return "exec" }

func (m *execMock) install(env *Env) { env.runner = m.run }

// run is an execRunner: what the command would have done, without a process.
func (m *execMock) run(cmd *exec.Cmd) error {
	if cmd.Stdin != nil {
		_, _ = io.Copy(io.Discard, cmd.Stdin)
	}
	if cmd.Stdout != nil {
		_, _ = io.WriteString(cmd.Stdout, m.stdout)
	}
	if cmd.Stderr != nil {
		_, _ = io.WriteString(cmd.Stderr, m.stderr)
	}
	if m.exit == 0 {
		return nil
	}
	return mockExit(m.exit)
}

// mockExit is a mocked process's exit status other than 0, as *exec.ExitError reports one.
type mockExit int

func (e mockExit) Error() string { return "exit status " + strconv.Itoa(int(e)) }

func (e mockExit) ExitCode() int { return int(e) }
