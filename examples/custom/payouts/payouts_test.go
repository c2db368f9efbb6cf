package payouts

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/plugins"
)

// build reads src, one `handler "payout" {}` block, as flowrun's loader does and provisions the
// handler as `flowrun run` does, then starts it.
func build(t *testing.T, src string) plugins.Handler {
	t.Helper()
	h, err := plugins.Build(context.Background(), "payouts.hcl", src)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	if err := h.(plugins.Starter).Start(context.Background()); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = h.(plugins.Closer).Close() })
	return h
}

func message(payload string, headers map[string]string, attempt int) plugins.TestMessage {
	return plugins.TestMessage{Key: "payouts", Headers: headers, Payload: []byte(payload), Attempt: attempt}
}

func TestPayout(t *testing.T) {
	h := build(t, `
handler "payout" {
  base          = "100ms"
  max           = "1s"
  fail_attempts = 1
  done_key      = "payouts.done"
}
`)
	tests := []struct {
		name     string
		payload  string
		headers  map[string]string
		attempt  int
		want     plugins.Outcome
		retryCap time.Duration // want retry_after with a delay in [0, retryCap]
		emit     string
	}{
		{name: "paid", payload: `{"id": 7, "amount": 12.5}`, attempt: 2, want: plugins.Ack(), emit: `{"id":7,"paid":true}`},
		{name: "string id", payload: `{"id": "p-9", "amount": 1}`, attempt: 2, want: plugins.Ack(), emit: `{"id":"p-9","paid":true}`},
		{name: "not json", payload: `amount=12`, attempt: 1,
			want: plugins.DeadLetter("payout: payload is not a JSON object: invalid character 'a' looking for beginning of value")},
		{name: "not an object", payload: `[1]`, attempt: 1,
			want: plugins.DeadLetter("payout: payload is not a JSON object: json: cannot unmarshal array into Go value of type payouts.payout")},
		{name: "missing id", payload: `{"amount": 12}`, attempt: 1, want: plugins.DeadLetter("payout: missing id")},
		{name: "empty id", payload: `{"id": "", "amount": 12}`, attempt: 1, want: plugins.DeadLetter("payout: missing id")},
		{name: "missing amount", payload: `{"id": 3}`, attempt: 1, want: plugins.DeadLetter("payout 3: missing amount")},
		{name: "zero amount", payload: `{"id": 3, "amount": 0}`, attempt: 1, want: plugins.DeadLetter("payout 3: amount must be positive, got 0")},
		{name: "negative amount", payload: `{"id": "x", "amount": -5.25}`, attempt: 1, want: plugins.DeadLetter("payout x: amount must be positive, got -5.25")},
		{name: "first attempt fails", payload: `{"id": 1, "amount": 1}`, attempt: 1, retryCap: 100 * time.Millisecond},
		{name: "gateway down", payload: `{"id": 1, "amount": 1}`, headers: map[string]string{"gateway": "down"}, attempt: 3, retryCap: 400 * time.Millisecond},
		{name: "gateway down, capped", payload: `{"id": 1, "amount": 1}`, headers: map[string]string{"gateway": "down"}, attempt: 30, retryCap: time.Second},
		// Invalid payouts are dead-lettered even when the gateway is down: retrying cannot help.
		{name: "invalid beats gateway", payload: `{"id": 1, "amount": -1}`, headers: map[string]string{"gateway": "down"}, attempt: 1,
			want: plugins.DeadLetter("payout 1: amount must be positive, got -1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := plugins.Call(context.Background(), h, message(tt.payload, tt.headers, tt.attempt))
			if res.Err != nil {
				t.Fatalf("err %v", res.Err)
			}
			if tt.retryCap > 0 {
				if d := res.Outcome.Delay(); res.Outcome != plugins.RetryAfter(d) || d > tt.retryCap {
					t.Fatalf("outcome %s, want retry_after in [0, %s]", res.Outcome, tt.retryCap)
				}
			} else if res.Outcome != tt.want {
				t.Fatalf("outcome %s, want %s", res.Outcome, tt.want)
			}
			var emits []string
			for _, e := range res.Emits {
				if e.To != plugins.ToRecord("payouts.done") || len(e.Headers) != 1 || e.Headers["payout-id"] == "" {
					t.Fatalf("emit to %s with headers %v", e.To, e.Headers)
				}
				emits = append(emits, string(e.Payload))
			}
			if want := []string{tt.emit}; tt.emit == "" && len(emits) != 0 || tt.emit != "" && !slices.Equal(emits, want) {
				t.Fatalf("emits %q, want %q", emits, tt.emit)
			}
		})
	}
}

// The backoff grows with the attempt: the largest of many draws approaches each cap.
func TestPayoutBackoffGrows(t *testing.T) {
	h := build(t, "handler \"payout\" {\n  base = \"10ms\"\n  max = \"80ms\"\n}\n")
	for attempt, cap := range map[int]time.Duration{1: 10 * time.Millisecond, 2: 20 * time.Millisecond, 3: 40 * time.Millisecond, 4: 80 * time.Millisecond, 9: 80 * time.Millisecond} {
		var hi time.Duration
		for range 500 {
			res := plugins.Call(context.Background(), h, message(`{"id":1,"amount":1}`, map[string]string{"gateway": "down"}, attempt))
			if d := res.Outcome.Delay(); res.Outcome != plugins.RetryAfter(d) || d > cap {
				t.Fatalf("attempt %d: outcome %s, want retry_after ≤ %s", attempt, res.Outcome, cap)
			}
			hi = max(hi, res.Outcome.Delay())
		}
		if hi < cap*8/10 {
			t.Errorf("attempt %d: largest delay %s, want near %s", attempt, hi, cap)
		}
	}
}

func TestPayoutNoEmitWithoutDoneKey(t *testing.T) {
	h := build(t, `handler "payout" {}`)
	res := plugins.Call(context.Background(), h, message(`{"id":1,"amount":1}`, nil, 1))
	if res.Outcome != plugins.Ack() || len(res.Emits) != 0 {
		t.Fatalf("outcome %s, emits %d", res.Outcome, len(res.Emits))
	}
}

// When the stop's grace period runs out mid-call, the delivery is retried with the error.
func TestPayoutShutdownMidCall(t *testing.T) {
	h := build(t, "handler \"payout\" {\n  latency = \"1m\"\n}\n")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	res := plugins.Call(ctx, h, message(`{"id":1,"amount":1}`, nil, 1))
	if res.Outcome != plugins.Retry() || !errors.Is(res.Err, context.Canceled) {
		t.Fatalf("outcome %s, err %v; want retry with context.Canceled", res.Outcome, res.Err)
	}
}

func TestPayoutConfigDiagnostics(t *testing.T) {
	tests := []struct {
		name  string
		src   string
		diags []string
	}{
		{name: "defaults", src: `handler "payout" {}`},
		{
			name: "bad values",
			src: "handler \"payout\" {\n" +
				"  base = \"fast\"\n" +
				"  max = \"0s\"\n" +
				"  latency = \"1 s\"\n" +
				"  fail_attempts = -1\n" +
				"}\n",
			diags: []string{
				`payouts.hcl:2:10: error: Invalid duration: "fast" is not a duration: invalid duration "fast". Write a Go duration such as "250ms", "30s" or "1h".`,
				`payouts.hcl:3:9: error: Invalid value: "max" must be greater than zero.`,
				`payouts.hcl:4:13: error: Invalid duration: "1 s" is not a duration: unknown unit " s" in duration "1 s". Write a Go duration such as "250ms", "30s" or "1h".`,
				`payouts.hcl:5:19: error: Invalid value: "fail_attempts" must not be negative.`,
			},
		},
		{
			name:  "base above the default max",
			src:   "handler \"payout\" {\n  base = \"5m\"\n}\n",
			diags: []string{`payouts.hcl:2:10: error: Invalid value: "base" (5m0s) must not exceed "max" (1m0s).`},
		},
		{
			name:  "negative",
			src:   "handler \"payout\" {\n  latency = \"-1ms\"\n}\n",
			diags: []string{`payouts.hcl:2:13: error: Invalid value: "latency" must not be negative.`},
		},
		{
			name:  "unknown attribute",
			src:   "handler \"payout\" {\n  gateway = \"down\"\n}\n",
			diags: []string{`payouts.hcl:2:3: error: Unsupported argument: An argument named "gateway" is not expected here.`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			if err := plugins.Check("payouts.hcl", tt.src); err != nil {
				got = strings.Split(err.Error(), "\n")
			}
			if !slices.Equal(got, tt.diags) {
				t.Fatalf("diagnostics:\n got %q\nwant %q", got, tt.diags)
			}
		})
	}
}

// The example's own HCL file holds a valid payout block, inside its pipeline.
func TestExampleFileDecodes(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "payouts.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := plugins.Build(context.Background(), filepath.Join("..", "payouts.hcl"), string(src))
	if err != nil {
		t.Fatal(err)
	}
	if c := h.(*Handler).cfg; c != (Config{Base: 100 * time.Millisecond, Max: 2 * time.Second, DoneKey: "payouts.done"}) {
		t.Fatalf("config %+v", c)
	}
}
