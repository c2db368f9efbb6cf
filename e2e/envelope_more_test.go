package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// envelopeEmits: the list emits both tests below expect from a payload of bytes that are not
// UTF-8 and from an envelope with a numeric header, each emitted with header n (SPEC §3).
var envelopeEmits = []string{
	`{"headers":{"n":"5"},"payload":"x"}`,
	`{"headers":{"n":"none"},"payload":"AP/+gAo=","encoding":"base64"}`,
}

const envelopeRule = `  rule "emit" {
    emit "list" {
      key     = "out"
      headers = { n = "headers['n'] ?? 'none'" }
    }
    outcome = "ack"
  }
`

// TestPubSubEnvelopesKeepEveryByte: through the binary, a Pub/Sub message of bytes that are not
// UTF-8 is retried (published back as an envelope) and emitted with every byte kept (base64),
// and an envelope with a numeric header keeps its headers.
func TestPubSubEnvelopesKeepEveryByte(t *testing.T) {
	t.Parallel()
	e := newRedisEnv(t)
	cfg := e.config(`pipeline "ev" {
  source "pubsub" {
    channels = ["ev"]
  }
  concurrency  = 1
  max_attempts = 2
  dead_letter  = "ev.dlq"
  rule "retry-first" {
    when    = "attempt == 1"
    outcome = "retry"
  }
` + envelopeRule + `}
`)
	p := start(t, "run", cfg)
	e.subscribers("ev", 1)
	e.publish("ev", string([]byte{0x00, 0xff, 0xfe, 0x80, 0x0a}))
	e.publish("ev", `{"payload":"x","headers":{"seq":"L7","n":5}}`)
	eventually(t, 10*time.Second, "two emits after the retry copies", func() bool {
		return e.llen("out") == 2
	})
	stop(t, p)
	got := e.lrange("out")
	slices.Sort(got)
	if !slices.Equal(got, envelopeEmits) {
		t.Errorf("out holds %q, want %q", got, envelopeEmits)
	}
	if n := len(e.deadLetters("ev.dlq")); n != 0 {
		t.Errorf("%d dead letters, want none", n)
	}
}

// TestRecordEnvelopesKeepEveryByte: through the binary, a record whose payload is base64
// (bytes that are not UTF-8) and a record with a numeric header are emitted to a list with
// every byte and header kept.
func TestRecordEnvelopesKeepEveryByte(t *testing.T) {
	t.Parallel()
	e := newRedisEnv(t)
	dir := t.TempDir()
	data := writeFile(t, dir, "in.jsonl",
		`{"key":"k","payload":"AP/+gAo=","encoding":"base64"}`+"\n"+
			`{"key":"k","headers":{"seq":"L7","n":5},"payload":"x"}`+"\n")
	cfg := e.config(fmt.Sprintf(`pipeline "rec" {
  source "file" {
    path = %q
  }
  concurrency = 1
`+envelopeRule+`}
`, data))
	p := start(t, "run", cfg)
	if code := p.wait(20 * time.Second); code != 0 {
		t.Fatalf("replay exited %d, want 0", code)
	}
	got := e.lrange("out")
	slices.Sort(got)
	if !slices.Equal(got, envelopeEmits) {
		t.Errorf("out holds %q, want %q", got, envelopeEmits)
	}
}
