package e2e

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/flowrun/flowrun/internal/redistest"
)

// TestListEnvelopesKeepEveryByte: through the binary, a retry copy and a list emit keep a bare
// element's bytes that are not UTF-8 (base64 in the envelope), a payload that arrived as the
// JSON string "true" or "12345678901234567890" stays a string, and an envelope with a numeric
// header keeps its headers (SPEC §3).
func TestListEnvelopesKeepEveryByte(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	dir := t.TempDir()
	cfg := writeFile(t, dir, "env.hcl", fmt.Sprintf(`redis "main" {
  url = %q
}

pipeline "env" {
  source "list" {
    key      = "in"
    consumer = "w1"
    block    = "100ms"
  }
  max_attempts = 2
  dead_letter  = "in.dlq"
  rule "emit-then-retry" {
    when = "attempt == 1"
    emit "list" {
      key     = "out"
      headers = { n = "headers['n'] ?? 'none'" }
    }
    outcome = "retry"
  }
  rule "copy-read-back" {
    emit "list" {
      key             = "seen"
      forward_headers = true
    }
    outcome = "ack"
  }
}
`, srv.URL))
	binary := []byte{0x00, 0xff, 0xfe, 0x80, 0x0a}
	elems := []any{binary,
		`{"payload":"true","headers":{"a":"b"}}`,
		`{"payload":"12345678901234567890","headers":{"a":"b"}}`,
		`{"payload":"x","headers":{"seq":"L7","n":5}}`}
	if err := rdb.LPush(ctx, "in", elems...).Err(); err != nil {
		t.Fatal(err)
	}
	p := start(t, "run", cfg)
	eventually(t, 15*time.Second, "four emits and every retry copy settled", func() bool {
		return rdb.LLen(ctx, "out").Val() == 4 && rdb.LLen(ctx, "seen").Val() == 4 &&
			rdb.LLen(ctx, "in").Val() == 0 && rdb.LLen(ctx, "in:processing:w1").Val() == 0
	})
	p.signal(syscall.SIGTERM)
	if code := p.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	out, err := rdb.LRange(ctx, "out", 0, -1).Result() // LPUSHed: newest first
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{
		`{"headers":{"n":"none"},"payload":"AP/+gAo=","encoding":"base64"}`: true,
		`{"headers":{"n":"none"},"payload":"true"}`:                         true,
		`{"headers":{"n":"none"},"payload":"12345678901234567890"}`:         true,
		`{"headers":{"n":"5"},"payload":"x"}`:                               true,
	}
	for _, o := range out {
		if !want[o] {
			t.Errorf("emitted %q, not one of %v", o, want)
		}
		delete(want, o)
	}
	for o := range want {
		t.Errorf("missing emit %q", o)
	}
	// The retry copies, read again on attempt 2 and forwarded (x-retry-count stays behind), have
	// every byte and the form they first arrived in.
	seen, err := rdb.LRange(ctx, "seen", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	wantSeen := map[string]bool{
		string(binary):                                           true,
		`{"headers":{"a":"b"},"payload":"true"}`:                 true,
		`{"headers":{"a":"b"},"payload":"12345678901234567890"}`: true,
		`{"headers":{"n":"5","seq":"L7"},"payload":"x"}`:         true,
	}
	for _, o := range seen {
		if !wantSeen[o] {
			t.Errorf("copy read back as %q (bytes % x)", o, []byte(o))
		}
		delete(wantSeen, o)
	}
	for o := range wantSeen {
		t.Errorf("missing copy %q", o)
	}
	if n := rdb.LLen(ctx, "in.dlq").Val(); n != 0 {
		t.Errorf("in.dlq has %d letters", n)
	}
}
