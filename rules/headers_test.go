package rules

import (
	"testing"
	"time"

	"github.com/flowrun/flowrun/engine"
)

func TestMissingHeaderDefaults(t *testing.T) {
	o, err := CompileOutcome("retry_after(headers['delay'] ?? '50ms')")
	if err != nil {
		t.Fatal(err)
	}
	v, err := CompileValue("headers['customer'] ?? 'unknown'")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		headers  map[string]string
		delay    time.Duration
		customer string
	}{
		{map[string]string{}, 50 * time.Millisecond, "unknown"},
		{map[string]string{"delay": "2s", "customer": "c-1"}, 2 * time.Second, "c-1"},
	}
	for _, tt := range tests {
		s := state{d: &engine.Delivery{Message: engine.Message{Headers: tt.headers}}}
		out, err := o.eval(&s)
		if err != nil || out != engine.RetryAfter(tt.delay) {
			t.Errorf("headers %v: outcome %v, %v; want retry_after(%v)", tt.headers, out, err, tt.delay)
		}
		got, err := v.run(&s)
		if err != nil || got != tt.customer {
			t.Errorf("headers %v: value %v, %v; want %q", tt.headers, got, err, tt.customer)
		}
	}
}
