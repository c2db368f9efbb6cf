package rules

import (
	"context"
	"testing"

	"github.com/flowrun/flowrun/engine"
)

// BenchmarkRuleSet runs SPEC §2's three rules on a small JSON payload; the sub-benchmark names
// say which rule decides.
func BenchmarkRuleSet(b *testing.B) {
	rs := specRules(b, "")
	cases := []struct {
		name    string
		payload string
		headers map[string]string
		want    engine.Kind
	}{
		{"too-large/drop", `{"id":7,"amount":20000,"currency":"EUR"}`, map[string]string{"gateway": "up"}, engine.KindDrop},
		{"gateway-down/retry_after", `{"id":7,"amount":120,"currency":"EUR"}`, map[string]string{"gateway": "down"}, engine.KindRetryAfter},
		{"ok/ack+emit", `{"id":7,"amount":120,"currency":"EUR"}`, map[string]string{"gateway": "up"}, engine.KindAck},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			d := delivery(c.payload, c.headers)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				d.Decoded = nil // a fresh delivery: its payload is decoded again
				res := rs.Handle(ctx, d)
				if res.Err != nil || res.Outcome.Kind != c.want {
					b.Fatalf("got %+v", res)
				}
			}
		})
	}
}

// BenchmarkNoPayload is a rule set that never reads the payload: it is never decoded.
func BenchmarkNoPayload(b *testing.B) {
	rs := &RuleSet{Rules: []Rule{
		{Name: "down", When: mustCond(b, "headers['gateway'] == 'down'"), Outcome: mustOutcome(b, "retry_after(backoff('1s', '5m'))")},
		{Name: "late", When: mustCond(b, "attempt > 3"), Outcome: mustOutcome(b, "drop")},
	}}
	d := delivery(`{"id":7,"amount":120,"currency":"EUR"}`, map[string]string{"gateway": "down"})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if res := rs.Handle(ctx, d); res.Outcome.Kind != engine.KindRetryAfter {
			b.Fatalf("got %+v", res)
		}
	}
}
