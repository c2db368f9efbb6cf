package rules

import (
	"errors"
	"testing"
	"time"

	"github.com/flowrun/flowrun/engine"
)

func TestFilterMatch(t *testing.T) {
	failed := time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339)
	m := &engine.Message{Key: "pay.dlq", ID: "1-1", Payload: []byte(`{"amount":12,"cur":"EUR"}`), Headers: map[string]string{
		engine.HeaderDeadLetterReason: "http 400", engine.HeaderOriginalKey: "pay",
		engine.HeaderAttempts: "3", engine.HeaderFailedAt: failed, "tenant": "a",
	}}
	text := &engine.Message{Key: "pay.dlq", Payload: []byte("not json")}
	for _, tc := range []struct {
		expr string
		m    *engine.Message
		want bool
	}{
		{`payload.amount > 10`, m, true},
		{`payload.cur == "USD"`, m, false},
		{`reason startsWith "http 4"`, m, true},
		{`key == "pay" && id == "1-1" && attempt == 3`, m, true},
		{`headers.tenant == "a"`, m, true},
		{`failed_at < now() - duration("1h")`, m, true},
		{`failed_at > now() - duration("1h")`, m, false},
		{`failed_at.IsZero()`, text, true},
		{`payload == "not json" && raw contains "json"`, text, true},
		{`key == "pay.dlq" && reason == ""`, text, true},
	} {
		f, err := CompileFilter(tc.expr)
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		got, err := f.Match(tc.m)
		if err != nil || got != tc.want {
			t.Errorf("%s = %v, %v; want %v", tc.expr, got, err, tc.want)
		}
	}
}

func TestFilterCompileErrors(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{`payload.a == paylod`, `1:14: unknown name "paylod"`},
		{`reason`, ``},
		{`1 + 2`, ``},
		{``, `1:1: empty expression`},
	} {
		_, err := CompileFilter(tc.expr)
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%q: got %v, want a positioned error", tc.expr, err)
			continue
		}
		if tc.want != "" && err.Error() != tc.want {
			t.Errorf("%q: got %q, want %q", tc.expr, err, tc.want)
		}
	}
}
