// Package otlptest is an OTLP/HTTP trace receiver for tests: a real HTTP server that decodes
// what an exporter sends to /v1/traces and keeps the spans.
package otlptest

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is a received span, with ids in hex as they appear in a traceparent.
type Span struct {
	Name     string
	Kind     tracepb.Span_SpanKind
	TraceID  string
	SpanID   string
	ParentID string // "" for a root span
	Attrs    map[string]string
	Error    bool // status code error
	// Start and End are the span's times; Events its events' names (an error recorded:
	// "exception").
	Start, End time.Time
	Events     []string
}

// Receiver collects spans.
type Receiver struct {
	URL string // the base endpoint, as otlp_endpoint takes it

	srv   *httptest.Server
	mu    sync.Mutex
	spans []Span
}

// Start starts a receiver, closed when the test ends.
func Start(t testing.TB) *Receiver {
	r := &Receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	r.URL = r.srv.URL
	t.Cleanup(r.srv.Close)
	return r
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/v1/traces" || req.Method != http.MethodPost {
		http.NotFound(w, req)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	for _, rs := range msg.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				sp := Span{
					Name: s.Name, Kind: s.Kind,
					TraceID: hex.EncodeToString(s.TraceId), SpanID: hex.EncodeToString(s.SpanId),
					Attrs: map[string]string{},
					Error: s.Status != nil && s.Status.Code == tracepb.Status_STATUS_CODE_ERROR,
					Start: time.Unix(0, int64(s.StartTimeUnixNano)), End: time.Unix(0, int64(s.EndTimeUnixNano)),
				}
				for _, ev := range s.Events {
					sp.Events = append(sp.Events, ev.Name)
				}
				if len(s.ParentSpanId) > 0 {
					sp.ParentID = hex.EncodeToString(s.ParentSpanId)
				}
				for _, kv := range s.Attributes {
					sp.Attrs[kv.Key] = value(kv.Value)
				}
				got = append(got, sp)
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.mu.Unlock()
	b, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(b)
}

func value(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		if x.BoolValue {
			return "true"
		}
		return "false"
	}
	return v.String()
}

// Spans returns what was received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// WaitFor polls until cond holds for the spans received, or fails the test after timeout.
func (r *Receiver) WaitFor(t testing.TB, what string, timeout time.Duration, cond func([]Span) bool) []Span {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := r.Spans()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; %d spans received", what, timeout, len(s))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Traceparent parses a W3C traceparent into its trace id and span id ("" when malformed).
func Traceparent(h string) (traceID, spanID string) {
	// version "-" trace-id(32) "-" parent-id(16) "-" flags
	if len(h) != 55 || h[2] != '-' || h[35] != '-' || h[52] != '-' {
		return "", ""
	}
	return h[3:35], h[36:52]
}
