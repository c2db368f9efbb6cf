package plugins

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func httpBlock(url, extra string) string {
	return fmt.Sprintf("handler \"http\" {\n  url = %q\n%s}\n", url, extra)
}

func TestHTTPStatus(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name       string
		status     int
		retryAfter string
		body       string
		attempt    int
		want       Outcome
		backoffCap time.Duration // for retry_after without a usable Retry-After: Delay in [0, cap]
	}{
		{name: "200", status: 200, want: Ack()},
		{name: "201", status: 201, want: Ack()},
		{name: "204", status: 204, want: Ack()},
		{name: "299", status: 299, want: Ack()},
		{name: "400 with body", status: 400, body: "{\"error\": \"no amount\"}\n", want: DeadLetter(`http 400 Bad Request: {"error": "no amount"}`)},
		{name: "401", status: 401, want: DeadLetter("http 401 Unauthorized")},
		{name: "404", status: 404, body: "  \n", want: DeadLetter("http 404 Not Found")},
		{name: "409 long body", status: 409, body: strings.Repeat("x", 300), want: DeadLetter("http 409 Conflict: " + strings.Repeat("x", 200) + "…")},
		{name: "unknown 4xx", status: 499, want: DeadLetter("http 499")},
		{name: "302 not followed", status: 302, want: DeadLetter("http 302 Found")},
		{name: "304", status: 304, want: DeadLetter("http 304 Not Modified")},
		{name: "429 seconds", status: 429, retryAfter: "120", want: RetryAfter(120 * time.Second)},
		{name: "503 seconds", status: 503, retryAfter: " 7 ", want: RetryAfter(7 * time.Second)},
		{name: "500 zero", status: 500, retryAfter: "0", want: RetryAfter(0)},
		{name: "503 date", status: 503, retryAfter: now.Add(90 * time.Second).Format(http.TimeFormat), want: RetryAfter(90 * time.Second)},
		{name: "429 date in the past", status: 429, retryAfter: now.Add(-time.Hour).Format(http.TimeFormat), want: RetryAfter(0)},
		{name: "503 huge", status: 503, retryAfter: "99999999999999", want: RetryAfter(24 * time.Hour)},
		{name: "429 no header", status: 429, attempt: 1, backoffCap: time.Second},
		{name: "500 no header attempt 4", status: 500, attempt: 4, backoffCap: 8 * time.Second},
		{name: "502 garbage header", status: 502, retryAfter: "soon", attempt: 2, backoffCap: 2 * time.Second},
		{name: "504 negative", status: 504, retryAfter: "-5", attempt: 20, backoffCap: 5 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.retryAfter != "" {
					w.Header().Set("Retry-After", tt.retryAfter)
				}
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			h := build(t, "h.hcl", httpBlock(srv.URL, ""))
			h.(*httpHandler).now = func() time.Time { return now }

			res := call(h, message(`{"id":1}`, nil, max(tt.attempt, 1)))
			if res.Err != nil || len(res.Emits) != 0 {
				t.Fatalf("err %v, emits %v", res.Err, res.Emits)
			}
			if tt.backoffCap > 0 {
				if d := res.Outcome.Delay(); res.Outcome != RetryAfter(d) || d > tt.backoffCap {
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

// received is what a test server saw of one request.
type received struct {
	method, path, host string
	header             http.Header
	body               string
}

func recordingServer(t *testing.T) (*httptest.Server, func() received) {
	t.Helper()
	var mu sync.Mutex
	var got []received
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, received{r.Method, r.URL.Path, r.Host, r.Header.Clone(), string(b)})
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return srv, func() received {
		mu.Lock()
		defer mu.Unlock()
		if len(got) != 1 {
			t.Fatalf("server saw %d requests, want 1", len(got))
		}
		return got[0]
	}
}

func TestHTTPRequest(t *testing.T) {
	tests := []struct {
		name    string
		extra   string
		payload string
		headers map[string]string
		check   func(t *testing.T, r received)
	}{
		{
			name:    "defaults with JSON",
			payload: `{"id": 7, "amount": 12}`,
			headers: map[string]string{"x-retry-count": "2", "trace": "abc", "bad name": "x", "evil": "a\r\nInjected: 1"},
			check: func(t *testing.T, r received) {
				want(t, "method", r.method, "POST")
				want(t, "path", r.path, "/hook")
				want(t, "body", r.body, `{"id": 7, "amount": 12}`)
				want(t, "Content-Type", r.header.Get("Content-Type"), "application/json")
				want(t, "X-Flowrun-X-Retry-Count", r.header.Get("X-Flowrun-X-Retry-Count"), "2")
				want(t, "X-Flowrun-Trace", r.header.Get("X-Flowrun-Trace"), "abc")
				want(t, "User-Agent", r.header.Get("User-Agent"), "flowrun")
				for name := range r.header {
					if strings.Contains(strings.ToLower(name), "bad") || strings.EqualFold(name, "Injected") || strings.EqualFold(name, "X-Flowrun-Evil") {
						t.Errorf("unsendable header sent: %s", name)
					}
				}
			},
		},
		{
			name:    "bytes",
			payload: "not json",
			check: func(t *testing.T, r received) {
				want(t, "Content-Type", r.header.Get("Content-Type"), "application/octet-stream")
				want(t, "body", r.body, "not json")
			},
		},
		{
			name: "empty payload",
			check: func(t *testing.T, r received) {
				want(t, "Content-Type", r.header.Get("Content-Type"), "application/octet-stream")
				want(t, "body", r.body, "")
			},
		},
		{
			name:    "method, extra headers, prefix",
			extra:   "  method = \"put\"\n  headers = { Authorization = \"Bearer t\", \"Content-Type\" = \"application/vnd.x+json\", Host = \"hooks.example\" }\n  header_prefix = \"X-Msg-\"\n",
			payload: `[1]`,
			headers: map[string]string{"gateway": "down"},
			check: func(t *testing.T, r received) {
				want(t, "method", r.method, "PUT")
				want(t, "Authorization", r.header.Get("Authorization"), "Bearer t")
				want(t, "Content-Type", r.header.Get("Content-Type"), "application/vnd.x+json")
				want(t, "host", r.host, "hooks.example")
				want(t, "X-Msg-Gateway", r.header.Get("X-Msg-Gateway"), "down")
				want(t, "X-Flowrun-Gateway", r.header.Get("X-Flowrun-Gateway"), "")
			},
		},
		{
			name:    "no prefix",
			extra:   "  header_prefix = \"\"\n",
			headers: map[string]string{"x-retry-count": "1"},
			check: func(t *testing.T, r received) {
				want(t, "X-Retry-Count", r.header.Get("X-Retry-Count"), "1")
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, got := recordingServer(t)
			h := build(t, "h.hcl", httpBlock(srv.URL+"/hook", tt.extra))
			res := call(h, message(tt.payload, tt.headers, 1))
			if res.Outcome != Ack() || res.Err != nil {
				t.Fatalf("outcome %s, err %v", res.Outcome, res.Err)
			}
			tt.check(t, got())
		})
	}
}

func want(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %q, want %q", what, got, want)
	}
}

func TestHTTPTimeoutAndShutdown(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)

	t.Run("timeout", func(t *testing.T) {
		h := build(t, "h.hcl", httpBlock(srv.URL, "  timeout = \"100ms\"\n"))
		start := time.Now()
		res := call(h, message("{}", nil, 1))
		if res.Outcome != Retry() || !errors.Is(res.Err, context.DeadlineExceeded) {
			t.Fatalf("outcome %s, err %v; want retry with a deadline error", res.Outcome, res.Err)
		}
		if el := time.Since(start); el > 5*time.Second {
			t.Fatalf("took %s", el)
		}
	})
	t.Run("grace period over", func(t *testing.T) {
		h := build(t, "h.hcl", httpBlock(srv.URL, ""))
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(50 * time.Millisecond); cancel() }()
		res := Call(ctx, h, message("{}", nil, 1))
		if res.Outcome != Retry() || !errors.Is(res.Err, context.Canceled) {
			t.Fatalf("outcome %s, err %v; want retry with context.Canceled", res.Outcome, res.Err)
		}
	})
}

func TestHTTPConnectionErrors(t *testing.T) {
	// A port nobody listens on any more.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "http://" + l.Addr().String()
	_ = l.Close()

	// A server that hangs up without answering.
	hangup := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}))
	defer hangup.Close()

	for name, url := range map[string]string{"refused": closedURL, "hang up": hangup.URL} {
		t.Run(name, func(t *testing.T) {
			h := build(t, "h.hcl", httpBlock(url, ""))
			res := call(h, message("{}", nil, 1))
			if res.Outcome != Retry() || res.Err == nil || !strings.HasPrefix(res.Err.Error(), "http: ") {
				t.Fatalf("outcome %s, err %v; want retry with an http: error", res.Outcome, res.Err)
			}
		})
	}
}

func TestHTTPRedirects(t *testing.T) {
	var bodies []string
	var mu sync.Mutex
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, r.Method+" "+string(b))
		mu.Unlock()
	})
	mux.HandleFunc("/307", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusTemporaryRedirect) })
	mux.HandleFunc("/308", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusPermanentRedirect) })
	mux.HandleFunc("/301", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusMovedPermanently) })
	mux.HandleFunc("/303", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusSeeOther) })
	srv := httptest.NewServer(mux)
	defer srv.Close()

	tests := []struct {
		path   string
		want   Outcome
		bodies []string
	}{
		{"/307", Ack(), []string{`POST {"a":1}`}},
		{"/308", Ack(), []string{`POST {"a":1}`}},
		{"/301", DeadLetter("http 301 Moved Permanently"), nil},
		{"/303", DeadLetter("http 303 See Other"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			mu.Lock()
			bodies = nil
			mu.Unlock()
			h := build(t, "h.hcl", httpBlock(srv.URL+tt.path, ""))
			res := call(h, message(`{"a":1}`, nil, 1))
			if res.Outcome != tt.want || res.Err != nil {
				t.Fatalf("outcome %s, err %v; want %s", res.Outcome, res.Err, tt.want)
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(bodies, tt.bodies) {
				t.Fatalf("/ok saw %q, want %q", bodies, tt.bodies)
			}
		})
	}
}

// One client per handler, with bodies drained: sequential requests share one connection, even
// when the responses carry bodies the handler does not need.
func TestHTTPReusesConnections(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(503)
		_, _ = io.WriteString(w, strings.Repeat("busy ", 2000))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()

	h := build(t, "h.hcl", httpBlock(srv.URL, ""))
	for range 5 {
		if res := call(h, message("{}", nil, 1)); res.Outcome != RetryAfter(res.Outcome.Delay()) {
			t.Fatalf("outcome %s, want retry_after", res.Outcome)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for 5 sequential requests, want 1", n)
	}
}

func TestHTTPTLS(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
	srv.StartTLS()
	defer srv.Close()
	dir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	hclFile := filepath.Join(dir, "h.hcl")

	tests := []struct {
		name  string
		extra string
		ok    bool
	}{
		{name: "trusted CA relative to the file", extra: "  tls {\n    ca_file = \"ca.pem\"\n  }\n", ok: true},
		{name: "unknown CA", ok: false},
		{name: "insecure", extra: "  tls {\n    insecure_skip_verify = true\n  }\n", ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := build(t, hclFile, httpBlock(srv.URL, tt.extra))
			res := call(h, message("{}", nil, 1))
			if tt.ok && (res.Outcome != Ack() || res.Err != nil) {
				t.Fatalf("outcome %s, err %v; want ack", res.Outcome, res.Err)
			}
			if !tt.ok && (res.Outcome != Retry() || res.Err == nil || !strings.Contains(res.Err.Error(), "certificate")) {
				t.Fatalf("outcome %s, err %v; want retry with a certificate error", res.Outcome, res.Err)
			}
		})
	}
}

func TestHTTPConfigDiagnostics(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notpem.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "h.hcl")
	tests := []struct {
		name  string
		src   string
		diags []string
	}{
		{
			name:  "missing url",
			src:   "handler \"http\" {\n}\n",
			diags: []string{`h.hcl:1:1: Missing required argument: The argument "url" is required, but no definition was found.`},
		},
		{
			name: "bad values",
			src: "handler \"http\" {\n" +
				"  url     = \"ftp://x\"\n" +
				"  method  = \"GE T\"\n" +
				"  timeout = \"10 sec\"\n" +
				"  headers = { \"Bad Name\" = \"v\" }\n" +
				"  header_prefix = \"X:\"\n" +
				"}\n",
			diags: []string{
				`h.hcl:2:13: Invalid URL: "ftp://x" must be an absolute http:// or https:// URL.`,
				`h.hcl:3:13: Invalid value: "GE T" is not an HTTP method.`,
				`h.hcl:4:13: Invalid duration: "10 sec" is not a duration: unknown unit " sec" in duration "10 sec". Write a Go duration such as "250ms", "30s" or "1h".`,
				`h.hcl:5:13: Invalid value: "Bad Name" is not a valid HTTP header name.`,
				`h.hcl:6:19: Invalid value: "X:" cannot start an HTTP header name: use letters, digits and '-'.`,
			},
		},
		{
			name:  "relative url",
			src:   "handler \"http\" {\n  url = \"/hook\"\n}\n",
			diags: []string{`h.hcl:2:9: Invalid URL: "/hook" must be an absolute http:// or https:// URL.`},
		},
		{
			name:  "header value",
			src:   "handler \"http\" {\n  url = \"http://x\"\n  headers = { A = \"a\\nb\" }\n}\n",
			diags: []string{`h.hcl:3:13: Invalid value: The value of header "A" contains a line break or control character.`},
		},
		{
			name: "tls files",
			src: "handler \"http\" {\n  url = \"https://x\"\n  tls {\n" +
				"    ca_file   = \"missing.pem\"\n" +
				"    cert_file = \"c.pem\"\n" +
				"  }\n}\n",
			// In the order written, as the command line shows them: the tls header first.
			diags: []string{
				`h.hcl:3:3: Missing required argument: The argument "key_file" is required in a tls block with a cert_file.`,
				`h.hcl:4:17: Cannot read CA file: ` + filepath.Join(dir, "missing.pem") + `: no such file or directory.`,
			},
		},
		{
			name:  "not pem",
			src:   "handler \"http\" {\n  url = \"https://x\"\n  tls {\n    ca_file = \"notpem.txt\"\n  }\n}\n",
			diags: []string{`h.hcl:4:15: Invalid CA file: "notpem.txt" holds no PEM certificate.`},
		},
		{
			name: "bad key pair",
			src: "handler \"http\" {\n  url = \"https://x\"\n  tls {\n" +
				"    cert_file = \"notpem.txt\"\n    key_file = \"notpem.txt\"\n  }\n}\n",
			diags: []string{`h.hcl:4:17: Invalid client certificate: tls: failed to find any PEM data in certificate input.`},
		},
		{
			name:  "unknown attribute",
			src:   "handler \"http\" {\n  url = \"http://x\"\n  retries = 3\n}\n",
			diags: []string{`h.hcl:3:3: Unsupported argument: An argument named "retries" is not expected here.`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, diags := decodeHandler(t, file, tt.src)
			got := formatDiags(diags)
			for i := range got {
				got[i] = strings.TrimPrefix(got[i], dir+string(filepath.Separator))
			}
			if !slices.Equal(got, tt.diags) {
				t.Fatalf("diagnostics:\n got %q\nwant %q", got, tt.diags)
			}
		})
	}
}

func TestHTTPDefaults(t *testing.T) {
	cfg, diags := decodeHandler(t, "h.hcl", httpBlock("https://hooks.example.com/p", ""))
	if diags.HasErrors() {
		t.Fatal(formatDiags(diags))
	}
	c := cfg.Value().(httpConfig)
	if c.Method != "POST" || c.Timeout != 10*time.Second || c.HeaderPrefix != "X-Flowrun-" || c.TLS != nil {
		t.Fatalf("defaults: method %q timeout %s prefix %q tls %v", c.Method, c.Timeout, c.HeaderPrefix, c.TLS)
	}
	// The method is upper-cased for the request, not in the config Validate saw.
	h := build(t, "h.hcl", httpBlock("https://hooks.example.com/p", "  method = \"put\"\n"))
	if m := h.(*httpHandler).method; m != "PUT" {
		t.Fatalf("method %q, want PUT", m)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"3", 3 * time.Second, true},
		{"86400", 24 * time.Hour, true},
		{"86401", 24 * time.Hour, true},
		{"1.5", 0, false},
		{"-1", 0, false},
		{"Sat, 01 Mar 2025 12:00:30 GMT", 30 * time.Second, true},
		{"Saturday, 01-Mar-25 12:01:00 GMT", time.Minute, true}, // RFC 850, obsolete but allowed
		{"Sat Mar  1 12:00:05 2025", 5 * time.Second, true},     // asctime
		{"Sat, 01 Mar 2025 11:00:00 GMT", 0, true},
		{"Sun, 01 Mar 2026 12:00:00 GMT", 24 * time.Hour, true},
		{"tomorrow", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, ok := parseRetryAfter(tt.in, now)
			if got != tt.want || ok != tt.ok {
				t.Fatalf("parseRetryAfter(%q) = %s, %v; want %s, %v", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
}
