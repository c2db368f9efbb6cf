package plugins

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/internal/handlers"
)

// decodeMock decodes the `mock {}` block in src for the named handler, as `flowrun test` does
// through the registry.
func decodeMock(t *testing.T, handler, src string) (handlers.Mock, hcl.Diagnostics) {
	t.Helper()
	f, diags := hclparse.NewParser().ParseHCL([]byte(src), "t.hcl")
	if diags.HasErrors() {
		t.Fatalf("parse: %s", diags)
	}
	content, diags := f.Body.Content(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "mock"}}})
	if diags.HasErrors() || len(content.Blocks) != 1 {
		t.Fatalf("want one mock block: %s", diags)
	}
	p, _ := handlers.Lookup(handler)
	if p.DecodeMock == nil {
		t.Fatalf("handler %q cannot be mocked", handler)
	}
	b := content.Blocks[0]
	return p.DecodeMock(b.Body, nil, b.DefRange)
}

// mocked provisions the handler block handlerSrc with the mock block mockSrc in place of the
// outside world, as `flowrun test` does, and closes it when the test ends.
func mocked(t *testing.T, handlerSrc, mockSrc string) Handler {
	t.Helper()
	cfg, diags := decodeHandler(t, "h.hcl", handlerSrc)
	if diags.HasErrors() {
		t.Fatalf("handler: %s", diags)
	}
	m, diags := decodeMock(t, handlerNameOf(handlerSrc), mockSrc)
	if diags.HasErrors() {
		t.Fatalf("mock: %s", diags)
	}
	inst, err := cfg.Provision(context.Background(), handlers.Env{Pipeline: "p", Logger: zerolog.Nop(), Mock: m})
	if err != nil {
		t.Fatalf("provision: %v", err)
	}
	t.Cleanup(func() { _ = inst.Close() })
	return inst.(*adapter).h
}

func handlerNameOf(src string) string {
	_, rest, _ := strings.Cut(src, `handler "`)
	name, _, _ := strings.Cut(rest, `"`)
	return name
}

func TestHTTPMock(t *testing.T) {
	// Nothing listens on this address: a request that got past the mock would be a retry.
	block := httpBlock("http://127.0.0.1:1/hook", "")
	tests := []struct {
		name       string
		mock       string
		attempt    int
		want       Outcome
		backoffCap time.Duration // retry_after without a usable Retry-After: Delay in [0, cap]
	}{
		{name: "default 200", mock: `mock {}`, want: Ack()},
		{name: "204", mock: `mock { status = 204 }`, want: Ack()},
		{name: "503 Retry-After seconds", mock: `mock {
  status  = 503
  headers = { "Retry-After" = "7" }
}`, want: RetryAfter(7 * time.Second)},
		{name: "429 Retry-After date in the past", mock: `mock {
  status  = 429
  headers = { "retry-after" = "Mon, 01 Jan 2001 00:00:00 GMT" }
}`, want: RetryAfter(0)},
		{name: "500 without Retry-After backs off", mock: `mock { status = 500 }`, attempt: 3, backoffCap: 4 * time.Second},
		{name: "400 body in the reason", mock: `mock {
  status = 400
  body   = jsonencode({ error = "no amount" })
}`, want: DeadLetter(`http 400 Bad Request: {"error":"no amount"}`)},
		{name: "400 body as a value", mock: `mock {
  status = 400
  body   = { error = "no amount" }
}`, want: DeadLetter(`http 400 Bad Request: {"error":"no amount"}`)},
		{name: "302 is a status like any other", mock: `mock {
  status  = 302
  headers = { Location = "http://127.0.0.1:1/elsewhere" }
}`, want: DeadLetter("http 302 Found")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := tt.mock
			if strings.Contains(src, "jsonencode") { // no functions without the loader
				src = strings.Replace(src, `jsonencode({ error = "no amount" })`, `"{\"error\":\"no amount\"}"`, 1)
			}
			h := mocked(t, block, src)
			res := call(h, message(`{"id":1}`, map[string]string{"a": "b"}, tt.attempt))
			if res.Err != nil {
				t.Fatalf("err: %v", res.Err)
			}
			if tt.backoffCap > 0 {
				if res.Outcome != RetryAfter(res.Outcome.Delay()) || res.Outcome.Delay() > tt.backoffCap {
					t.Fatalf("outcome %s, want retry_after in [0, %s]", res.Outcome, tt.backoffCap)
				}
				return
			}
			if res.Outcome != tt.want {
				t.Fatalf("outcome %s, want %s", res.Outcome, tt.want)
			}
		})
	}
}

// The handler builds its request as it always does; the mock reads it as a server would.
func TestHTTPMockSeesTheRequest(t *testing.T) {
	var got *http.Request
	var body []byte
	h := mocked(t, httpBlock("https://hooks.example.com/p", "  headers = { Authorization = \"Bearer x\" }\n"), `mock {}`)
	mock := h.(*httpHandler).client.Transport.(*httpMock)
	h.(*httpHandler).client.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
		got = r
		body, _ = io.ReadAll(r.Body)
		return mock.RoundTrip(r)
	})
	if res := call(h, message(`{"id":1}`, map[string]string{"tenant": "t1"}, 1)); res.Outcome != Ack() {
		t.Fatalf("outcome %s, err %v", res.Outcome, res.Err)
	}
	if got.Method != "POST" || got.URL.String() != "https://hooks.example.com/p" || string(body) != `{"id":1}` ||
		got.Header.Get("X-Flowrun-Tenant") != "t1" || got.Header.Get("Authorization") != "Bearer x" ||
		got.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("request %s %s %q headers %v", got.Method, got.URL, body, got.Header)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestExecMock(t *testing.T) {
	// The program does not exist: a mocked test runs no process.
	block := "handler \"exec\" {\n  command = [\"./no-such-program\", \"--live\"]\n  emit_stdout = \"charges.done\"\n}\n"
	tests := []struct {
		name  string
		mock  string
		want  Outcome
		emits []string
	}{
		{name: "default exit 0", mock: `mock {}`, want: Ack()},
		{name: "exit 0 with stdout", mock: `mock { stdout = "charged 1\n\ncharged 2\n" }`, want: Ack(), emits: []string{"charged 1", "charged 2"}},
		{name: "exit 75 retries", mock: `mock {
  exit   = 75
  stderr = "gateway busy"
}`, want: Retry()},
		{name: "exit 2 dead-letters with the last stderr line", mock: `mock {
  exit   = 2
  stdout = "ignored"
  stderr = "starting\ncard declined\n"
}`, want: DeadLetter("exec: exit status 2: card declined")},
		{name: "exit 1 without stderr", mock: `mock { exit = 1 }`, want: DeadLetter("exec: exit status 1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := mocked(t, block, tt.mock)
			res := call(h, message(`{"id":1}`, nil, 1))
			if res.Outcome != tt.want || res.Err != nil {
				t.Fatalf("outcome %s, err %v; want %s", res.Outcome, res.Err, tt.want)
			}
			if got := payloads(res.Emits); !slices.Equal(got, tt.emits) && len(got)+len(tt.emits) > 0 {
				t.Fatalf("emits %q, want %q", got, tt.emits)
			}
		})
	}
}

func TestMockDiagnostics(t *testing.T) {
	tests := []struct {
		name, handler, src string
		diags              []string
	}{
		{name: "status for exec", handler: "exec", src: "mock {\n  status = 503\n  exit = 2\n}\n", diags: []string{
			`t.hcl:2:3: Unsupported argument: "status" mocks the HTTP response, for the http handler. A mock for the exec handler stands in for the process and takes "exit", "stdout" and "stderr".`,
		}},
		{name: "exit for http", handler: "http", src: "mock {\n  exit = 75\n  stdout = \"x\"\n}\n", diags: []string{
			`t.hcl:2:3: Unsupported argument: "exit" mocks the process, for the exec handler. A mock for the http handler stands in for the HTTP response and takes "status", "headers" and "body".`,
			`t.hcl:3:3: Unsupported argument: "stdout" mocks the process, for the exec handler. A mock for the http handler stands in for the HTTP response and takes "status", "headers" and "body".`,
		}},
		{name: "typo", handler: "http", src: "mock {\n  statsu = 503\n}\n", diags: []string{
			`t.hcl:2:3: Unsupported argument: An argument named "statsu" is not expected in a mock. Did you mean "status"? A mock for the http handler stands in for the HTTP response and takes "status", "headers" and "body".`,
		}},
		{name: "bad status", handler: "http", src: "mock {\n  status = 1000\n}\n", diags: []string{
			`t.hcl:2:12: Invalid value: "status" must be an HTTP status code, 100 to 599; got 1000.`,
		}},
		{name: "status not a number", handler: "http", src: "mock {\n  status = \"teapot\"\n}\n", diags: []string{
			`t.hcl:2:13: Unsuitable value type: Unsuitable value: a number is required`,
		}},
		{name: "bad header", handler: "http", src: "mock {\n  headers = { \"Retry After\" = \"7\" }\n}\n", diags: []string{
			`t.hcl:2:13: Invalid value: "Retry After" is not a valid HTTP header name.`,
		}},
		{name: "bad exit", handler: "exec", src: "mock {\n  exit = 256\n}\n", diags: []string{
			`t.hcl:2:10: Invalid value: "exit" must be an exit status, 0 to 255; got 256.`,
		}},
		{name: "negative exit", handler: "exec", src: "mock {\n  exit = -1\n}\n", diags: []string{
			`t.hcl:2:10: Invalid value: "exit" must be an exit status, 0 to 255; got -1.`,
		}},
		{name: "nested block", handler: "exec", src: "mock {\n  process {}\n}\n", diags: []string{
			`t.hcl:2:3: Unexpected "process" block: Blocks are not allowed here.`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, diags := decodeMock(t, tt.handler, tt.src)
			if got := formatDiags(diags); !slices.Equal(got, tt.diags) {
				t.Fatalf("diagnostics:\n got %q\nwant %q", got, tt.diags)
			}
			if m != nil {
				t.Fatalf("a mock with errors: %v", m)
			}
		})
	}
}

// A handler is provisioned only with its own kind of mock: an exec handler given an http mock
// would run the real process.
func TestMockOfAnotherHandler(t *testing.T) {
	m, diags := decodeMock(t, "http", "mock { status = 200 }")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	for _, src := range []string{shBlock("exit 0", ""), `handler "log" {}`} {
		cfg, diags := decodeHandler(t, "h.hcl", src)
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		_, err := cfg.Provision(context.Background(), handlers.Env{Logger: zerolog.Nop(), Mock: m})
		if err == nil || !strings.Contains(err.Error(), "cannot be mocked with status 200") {
			t.Errorf("%s: provision with an http mock: %v", handlerNameOf(src), err)
		}
	}
	if got := handlers.Mockable(); !slices.Equal(got, []string{"exec", "http"}) {
		t.Errorf("Mockable() = %q", got)
	}
}
