package payouts

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/rs/zerolog"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/plugins"
)

// decode parses src, one `handler "payout" {}` block in the file filename, and decodes it with
// the registered plugin, as flowrun's loader does.
func decode(t *testing.T, filename, src string) (any, hcl.Diagnostics) {
	t.Helper()
	f, diags := hclparse.NewParser().ParseHCL([]byte(src), filename)
	if diags.HasErrors() {
		t.Fatalf("parse: %s", diags)
	}
	content, diags := f.Body.Content(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "handler", LabelNames: []string{"name"}}}})
	if diags.HasErrors() {
		t.Fatalf("content: %s", diags)
	}
	b := content.Blocks[0]
	p, ok := plugins.Lookup(b.Labels[0])
	if !ok {
		t.Fatalf("handler %q is not registered", b.Labels[0])
	}
	return p.Decode(b.Body, nil, b.DefRange)
}

func build(t *testing.T, src string) engine.Handler {
	t.Helper()
	cfg, diags := decode(t, "payouts.hcl", src)
	if diags.HasErrors() {
		t.Fatalf("decode: %s", diags)
	}
	p, _ := plugins.Lookup("payout")
	h, err := p.New(context.Background(), cfg, plugins.Env{Pipeline: "payouts", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatalf("new: %v", err)
	}
	if err := plugins.Start(context.Background(), h); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = plugins.Close(h) })
	return h
}

func delivery(payload string, headers map[string]string, attempt int) *engine.Delivery {
	if headers == nil {
		headers = map[string]string{}
	}
	return &engine.Delivery{Message: engine.Message{Key: "payouts", Headers: headers, Payload: []byte(payload)}, Attempt: attempt}
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
		want     engine.Outcome
		retryCap time.Duration // want retry_after with a delay in [0, retryCap]
		emit     string
	}{
		{name: "paid", payload: `{"id": 7, "amount": 12.5}`, attempt: 2, want: engine.Ack(), emit: `{"id":7,"paid":true}`},
		{name: "string id", payload: `{"id": "p-9", "amount": 1}`, attempt: 2, want: engine.Ack(), emit: `{"id":"p-9","paid":true}`},
		{name: "not json", payload: `amount=12`, attempt: 1,
			want: engine.DeadLetter("payout: payload is not a JSON object: invalid character 'a' looking for beginning of value")},
		{name: "not an object", payload: `[1]`, attempt: 1,
			want: engine.DeadLetter("payout: payload is not a JSON object: json: cannot unmarshal array into Go value of type payouts.payout")},
		{name: "missing id", payload: `{"amount": 12}`, attempt: 1, want: engine.DeadLetter("payout: missing id")},
		{name: "empty id", payload: `{"id": "", "amount": 12}`, attempt: 1, want: engine.DeadLetter("payout: missing id")},
		{name: "missing amount", payload: `{"id": 3}`, attempt: 1, want: engine.DeadLetter("payout 3: missing amount")},
		{name: "zero amount", payload: `{"id": 3, "amount": 0}`, attempt: 1, want: engine.DeadLetter("payout 3: amount must be positive, got 0")},
		{name: "negative amount", payload: `{"id": "x", "amount": -5.25}`, attempt: 1, want: engine.DeadLetter("payout x: amount must be positive, got -5.25")},
		{name: "first attempt fails", payload: `{"id": 1, "amount": 1}`, attempt: 1, retryCap: 100 * time.Millisecond},
		{name: "gateway down", payload: `{"id": 1, "amount": 1}`, headers: map[string]string{"gateway": "down"}, attempt: 3, retryCap: 400 * time.Millisecond},
		{name: "gateway down, capped", payload: `{"id": 1, "amount": 1}`, headers: map[string]string{"gateway": "down"}, attempt: 30, retryCap: time.Second},
		// Invalid payouts are dead-lettered even when the gateway is down: retrying cannot help.
		{name: "invalid beats gateway", payload: `{"id": 1, "amount": -1}`, headers: map[string]string{"gateway": "down"}, attempt: 1,
			want: engine.DeadLetter("payout 1: amount must be positive, got -1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := h.Handle(context.Background(), delivery(tt.payload, tt.headers, tt.attempt))
			if res.Err != nil {
				t.Fatalf("err %v", res.Err)
			}
			if tt.retryCap > 0 {
				if res.Outcome.Kind != engine.KindRetryAfter || res.Outcome.Delay < 0 || res.Outcome.Delay > tt.retryCap {
					t.Fatalf("outcome %s, want retry_after in [0, %s]", res.Outcome, tt.retryCap)
				}
			} else if res.Outcome != tt.want {
				t.Fatalf("outcome %s, want %s", res.Outcome, tt.want)
			}
			var emits []string
			for _, e := range res.Emits {
				if e.Target != (engine.Target{Kind: "record"}) || e.Message.Key != "payouts.done" {
					t.Fatalf("emit to %+v key %q", e.Target, e.Message.Key)
				}
				emits = append(emits, string(e.Message.Payload))
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
			res := h.Handle(context.Background(), delivery(`{"id":1,"amount":1}`, map[string]string{"gateway": "down"}, attempt))
			if res.Outcome.Kind != engine.KindRetryAfter || res.Outcome.Delay > cap {
				t.Fatalf("attempt %d: outcome %s, want retry_after ≤ %s", attempt, res.Outcome, cap)
			}
			hi = max(hi, res.Outcome.Delay)
		}
		if hi < cap*8/10 {
			t.Errorf("attempt %d: largest delay %s, want near %s", attempt, hi, cap)
		}
	}
}

func TestPayoutNoEmitWithoutDoneKey(t *testing.T) {
	h := build(t, `handler "payout" {}`)
	res := h.Handle(context.Background(), delivery(`{"id":1,"amount":1}`, nil, 1))
	if res.Outcome != engine.Ack() || len(res.Emits) != 0 {
		t.Fatalf("outcome %s, emits %d", res.Outcome, len(res.Emits))
	}
}

// When the stop's grace period runs out mid-call, the delivery is retried with the error.
func TestPayoutShutdownMidCall(t *testing.T) {
	h := build(t, "handler \"payout\" {\n  latency = \"1m\"\n}\n")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	res := h.Handle(ctx, delivery(`{"id":1,"amount":1}`, nil, 1))
	if res.Outcome != engine.Retry() || !errors.Is(res.Err, context.Canceled) {
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
				`payouts.hcl:2:10: Invalid duration: "fast" is not a duration: invalid duration "fast". Write a Go duration such as "250ms", "30s" or "1h".`,
				`payouts.hcl:3:9: Invalid value: "max" must be greater than zero.`,
				`payouts.hcl:4:13: Invalid duration: "1 s" is not a duration: unknown unit " s" in duration "1 s". Write a Go duration such as "250ms", "30s" or "1h".`,
				`payouts.hcl:5:19: Invalid value: "fail_attempts" must not be negative.`,
			},
		},
		{
			name:  "base above the default max",
			src:   "handler \"payout\" {\n  base = \"5m\"\n}\n",
			diags: []string{`payouts.hcl:2:10: Invalid value: "base" (5m0s) must not exceed "max" (1m0s).`},
		},
		{
			name:  "unknown attribute",
			src:   "handler \"payout\" {\n  gateway = \"down\"\n}\n",
			diags: []string{`payouts.hcl:2:3: Unsupported argument: An argument named "gateway" is not expected here.`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, diags := decode(t, "payouts.hcl", tt.src)
			var got []string
			for _, d := range diags {
				got = append(got, fmt.Sprintf("%s:%d:%d: %s: %s", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column, d.Summary, d.Detail))
			}
			if !slices.Equal(got, tt.diags) {
				t.Fatalf("diagnostics:\n got %q\nwant %q", got, tt.diags)
			}
		})
	}
}

// The example's own HCL file holds a valid payout block.
func TestExampleFileDecodes(t *testing.T) {
	path := filepath.Join("..", "payouts.hcl")
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, diags := hclparse.NewParser().ParseHCL(src, path)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	// Find the handler block inside the pipeline block without knowing the rest of the schema.
	content, _, diags := f.Body.PartialContent(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "pipeline", LabelNames: []string{"name"}}}})
	if diags.HasErrors() || len(content.Blocks) != 1 {
		t.Fatalf("want one pipeline: %s", diags)
	}
	inner, _, diags := content.Blocks[0].Body.PartialContent(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "handler", LabelNames: []string{"name"}}}})
	if diags.HasErrors() || len(inner.Blocks) != 1 || inner.Blocks[0].Labels[0] != "payout" {
		t.Fatalf("want one handler \"payout\": %s", diags)
	}
	p, _ := plugins.Lookup("payout")
	cfg, diags := p.Decode(inner.Blocks[0].Body, nil, inner.Blocks[0].DefRange)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if c := cfg.(*Config); c.base != 100*time.Millisecond || c.max != 2*time.Second || c.DoneKey != "payouts.done" {
		t.Fatalf("config %+v", c)
	}
}
