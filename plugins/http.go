package plugins

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	"github.com/flowrun/flowrun/engine"
)

// Defaults and limits of the http handler.
const (
	httpDefaultMethod       = http.MethodPost
	httpDefaultTimeout      = 10 * time.Second
	httpDefaultHeaderPrefix = "X-Flowrun-"

	// Without a usable Retry-After, 429 and 5xx back off like backoff('1s', '5m').
	httpBackoffBase = time.Second
	httpBackoffMax  = 5 * time.Minute
	// A Retry-After beyond this is taken as this: a bogus header must not park a copy for years.
	httpMaxRetryAfter = 24 * time.Hour
	// Up to this much of a response body is read so the connection can be reused.
	httpDrainLimit = 64 << 10
	// Up to this much of a failed response's body goes into the dead-letter reason.
	httpReasonBody = 200
	// Idle connections kept per host: handlers run concurrently against one endpoint.
	httpIdlePerHost = 64
)

func init() {
	Register(Spec[httpConfig]{
		Name:      "http",
		Body:      httpBody,
		Doc:       "sends each message to an HTTP endpoint; 2xx acks, 429 and 5xx retry later, other statuses dead-letter",
		Validate:  validateHTTP,
		Provision: newHTTPHandler,
		Mock:      builtinMock{name: "http", decode: decodeHTTPMock},
	})
}

// httpConfig is the body of `handler "http" {}`.
type httpConfig struct {
	URL          string            `hcl:"url"`
	Method       string            `hcl:"method,optional"`
	Timeout      time.Duration     `hcl:"timeout,optional"`
	Headers      map[string]string `hcl:"headers,optional"`
	HeaderPrefix string            `hcl:"header_prefix,optional"`
	TLS          *httpTLSConfig    `hcl:"tls,block"`
}

// httpTLSConfig is the optional `tls {}` block. Paths are relative to the HCL file.
type httpTLSConfig struct {
	CAFile             string `hcl:"ca_file,optional"`
	CertFile           string `hcl:"cert_file,optional"`
	KeyFile            string `hcl:"key_file,optional"`
	ServerName         string `hcl:"server_name,optional"`
	InsecureSkipVerify bool   `hcl:"insecure_skip_verify,optional"`
}

// validateHTTP checks what the types cannot and loads the TLS files, so that `flowrun validate`
// reports a missing certificate at its attribute.
func validateHTTP(c httpConfig, b Block) error {
	var errs []error
	if u, err := url.Parse(c.URL); err != nil {
		errs = append(errs, b.Errorf("url", "Invalid URL", "%q is not a URL: %s.", c.URL, unwrapURLError(err)))
	} else if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, b.Errorf("url", "Invalid URL", "%q must be an absolute http:// or https:// URL.", c.URL))
	}
	if method := strings.ToUpper(c.Method); !validToken(method) {
		errs = append(errs, b.Errorf("method", "Invalid value", "%q is not an HTTP method.", method))
	}
	if c.Timeout <= 0 {
		errs = append(errs, b.Errorf("timeout", "Invalid value", "%q must be greater than zero.", "timeout"))
	}
	for _, name := range sortedKeys(c.Headers) {
		if !validToken(name) {
			errs = append(errs, b.Errorf("headers", "Invalid value", "%q is not a valid HTTP header name.", name))
		} else if !validHeaderValue(c.Headers[name]) {
			errs = append(errs, b.Errorf("headers", "Invalid value", "The value of header %q contains a line break or control character.", name))
		}
	}
	if c.HeaderPrefix != "" && !validToken(c.HeaderPrefix) {
		errs = append(errs, b.Errorf("header_prefix", "Invalid value",
			"%q cannot start an HTTP header name: use letters, digits and '-'.", c.HeaderPrefix))
	}
	if c.TLS != nil {
		tb, _ := b.Child("tls")
		_, problems := c.TLS.load(tb.Path)
		for _, p := range problems {
			errs = append(errs, tb.Errorf(p.attr, p.summary, "%s", p.detail))
		}
	}
	return errors.Join(errs...)
}

// problem is a mistake found in a config, about the named attribute ("" for the block).
type problem struct{ attr, summary, detail string }

// load reads the TLS files, their paths resolved by path.
func (t *httpTLSConfig) load(path func(string) string) (*tls.Config, []problem) {
	var problems []problem
	cfg := &tls.Config{ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
	if t.CAFile != "" {
		pem, err := os.ReadFile(path(t.CAFile))
		switch {
		case err != nil:
			problems = append(problems, problem{"ca_file", "Cannot read CA file", unwrapPathError(err)})
		default:
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				problems = append(problems, problem{"ca_file", "Invalid CA file", fmt.Sprintf("%q holds no PEM certificate.", t.CAFile)})
			}
			cfg.RootCAs = pool
		}
	}
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		problems = append(problems, problem{"", "Missing required argument", `The argument "key_file" is required in a tls block with a cert_file.`})
	case t.KeyFile != "" && t.CertFile == "":
		problems = append(problems, problem{"", "Missing required argument", `The argument "cert_file" is required in a tls block with a key_file.`})
	case t.CertFile != "":
		cert, err := tls.LoadX509KeyPair(path(t.CertFile), path(t.KeyFile))
		if err != nil {
			problems = append(problems, problem{"cert_file", "Invalid client certificate", unwrapPathError(err)})
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, problems
}

// httpHandler sends each delivery as one request. It is safe for concurrent use: one client,
// one connection pool, per pipeline.
type httpHandler struct {
	url     string
	method  string
	timeout time.Duration
	headers map[string]string
	prefix  string

	client    *http.Client
	transport *http.Transport
	log       zerolog.Logger
	now       func() time.Time
}

var (
	_ Handler = (*httpHandler)(nil)
	_ Closer  = (*httpHandler)(nil)
)

func newHTTPHandler(_ context.Context, cfg httpConfig, env Env) (Handler, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = httpIdlePerHost
	if cfg.TLS != nil {
		// Validate read these files moments ago; they can only have gone since.
		tc, problems := cfg.TLS.load(env.Path)
		if len(problems) > 0 {
			return nil, fmt.Errorf("http: tls: %s: %s", problems[0].summary, problems[0].detail)
		}
		tr.TLSClientConfig = tc
	}
	var rt http.RoundTripper = tr
	if env.transport != nil {
		rt = env.transport // a test's mock answers instead of the network
	}
	h := &httpHandler{
		url:     cfg.URL,
		method:  strings.ToUpper(cfg.Method),
		timeout: cfg.Timeout,
		headers: cfg.Headers,
		prefix:  cfg.HeaderPrefix,
		client: &http.Client{
			Transport: rt,
			// 301, 302 and 303 would turn a POST into a GET without a body and a 2xx at the
			// end would ack a message nobody received; only 307 and 308 keep method and body.
			CheckRedirect: func(req *http.Request, via []*http.Request) error {
				if code := req.Response.StatusCode; code != http.StatusTemporaryRedirect && code != http.StatusPermanentRedirect {
					return http.ErrUseLastResponse
				}
				if len(via) >= 10 {
					return errors.New("stopped after 10 redirects")
				}
				return nil
			},
		},
		transport: tr,
		log:       env.Logger,
		now:       time.Now,
	}
	return h, nil
}

// Close releases idle connections.
func (h *httpHandler) Close() error {
	h.transport.CloseIdleConnections()
	return nil
}

func (h *httpHandler) Handle(ctx context.Context, m Message, emit *Emitter) (Outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	payload := m.Payload()
	req, err := http.NewRequestWithContext(ctx, h.method, h.url, bytes.NewReader(payload))
	if err != nil {
		return Retry(), fmt.Errorf("http: %w", err)
	}
	h.setHeaders(req, m, json.Valid(payload))
	resp, err := h.client.Do(req)
	if err != nil {
		// Connection refused, TLS failure, timeout, or the shutdown grace running out.
		return Retry(), fmt.Errorf("http: %w", err)
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, httpDrainLimit))
		_ = resp.Body.Close()
	}()
	o := h.outcome(resp, m.Attempt())
	if o == Ack() && m.inRun() {
		return recordBody(resp, emit)
	}
	return o, nil
}

// recordBody records a 2xx response's body as the workflow step's output (SPEC §16) and acks.
func recordBody(resp *http.Response, emit *Emitter) (Outcome, error) {
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxOutput+1))
	if err != nil {
		// The server did the work; a retry repeats it under the same Idempotency-Key.
		return Retry(), fmt.Errorf("http: reading the response body: %w", err)
	}
	if len(b) > maxOutput {
		return DeadLetter(fmt.Sprintf("http %d: the response body exceeds %d bytes, the most a step's output may be", resp.StatusCode, maxOutput)), nil
	}
	emit.Output(textOutput(b))
	return Ack(), nil
}

// setHeaders writes the message headers under the prefix, the content type, then the configured
// headers, which win over both.
func (h *httpHandler) setHeaders(req *http.Request, m Message, isJSON bool) {
	// In name order, so that two message headers that differ only in case always resolve the
	// same way.
	var skipped []string
	for k, v := range m.Headers() {
		name := h.prefix + k
		if !validToken(name) || !validHeaderValue(v) {
			skipped = append(skipped, k)
			continue
		}
		req.Header.Set(name, v)
	}
	if len(skipped) > 0 {
		h.log.Debug().Strs("headers", skipped).Msg("message headers not sendable over HTTP left out")
	}
	if isJSON {
		req.Header.Set("Content-Type", "application/json")
	} else {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	req.Header.Set("User-Agent", "flowrun")
	// The handler span's traceparent (SPEC §14); the global propagator is a no-op unless
	// flowrun exports traces. Headers set in the block come after and win.
	otel.GetTextMapPropagator().Inject(req.Context(), propagation.HeaderCarrier(req.Header))
	// A workflow step's visit key (SPEC §16), under the name servers look for (IETF
	// draft-ietf-httpapi-idempotency-key-header), so a repeated call is recognised.
	if key, ok := m.LookupHeader(engine.HeaderIdempotencyKey); ok && key != "" && validHeaderValue(key) {
		req.Header.Set("Idempotency-Key", key)
	}
	for _, k := range sortedKeys(h.headers) {
		v := h.headers[k]
		if http.CanonicalHeaderKey(k) == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
}

// outcome maps a response to an outcome (SPEC §8).
func (h *httpHandler) outcome(resp *http.Response, attempt int) Outcome {
	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		return Ack()
	case code == http.StatusTooManyRequests || (code >= 500 && code < 600):
		if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), h.now()); ok {
			return RetryAfter(d)
		}
		return RetryAfter(Backoff(httpBackoffBase, httpBackoffMax, attempt))
	}
	return DeadLetter(httpReason(resp))
}

// httpReason is "http 400 Bad Request", plus the start of the response body when there is one.
func httpReason(resp *http.Response) string {
	reason := "http " + strconv.Itoa(resp.StatusCode)
	if text := http.StatusText(resp.StatusCode); text != "" {
		reason += " " + text
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, httpReasonBody+1))
	cut := len(b) > httpReasonBody
	if cut {
		b = b[:httpReasonBody]
	}
	// ToValidUTF8 also drops a rune the cut split.
	body := strings.Join(strings.Fields(strings.ToValidUTF8(string(b), "")), " ")
	if body != "" && cut {
		body += "…"
	}
	if body != "" {
		reason += ": " + body
	}
	return reason
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an HTTP date (RFC 9110 §10.2.3).
// A date in the past means now.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseUint(v, 10, 64); err == nil {
		if n > uint64(httpMaxRetryAfter/time.Second) {
			return httpMaxRetryAfter, true
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(max(t.Sub(now), 0), httpMaxRetryAfter), true
}

// validToken reports whether s is a non-empty RFC 9110 token: a header name or a method.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue rejects what would let a value break out of its header line.
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func unwrapURLError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

func unwrapPathError(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Sprintf("%s: %s.", pe.Path, pe.Err)
	}
	return err.Error() + "."
}

// HandlerTimeout lets validate warn when a call may outlast shutdown_timeout (SPEC §12).
func (c httpConfig) HandlerTimeout() time.Duration { return c.Timeout }
