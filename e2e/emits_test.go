package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flowrun/flowrun/internal/redistest"
)

// TestRuleEmitsToRedis: a rule emits to a stream, a list and a channel of the source's own redis
// block and to a list of a second, named block, all before the delivery is settled (SPEC §7).
func TestRuleEmitsToRedis(t *testing.T) {
	main, other := redistest.Start(t), redistest.Start(t)
	rdb, rdb2 := main.Client(t), other.Client(t)
	ctx := context.Background()

	sub := rdb.Subscribe(ctx, "emits.ch")
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(ctx); err != nil { // the subscription is confirmed
		t.Fatal(err)
	}

	dir := t.TempDir()
	cfg := writeFile(t, dir, "emits.hcl", fmt.Sprintf(`redis "main" {
  url = %q
}

redis "other" {
  url = %q
}

pipeline "emits" {
  source "stream" {
    redis  = "main"
    stream = "in"
    block  = "100ms"
  }
  rule "fan-out" {
    emit "stream" {
      key     = "emits.stream"
      payload = "{'id': payload.id}"
      headers = { via = "'stream'" }
    }
    emit "list" {
      key = "emits.list"
    }
    emit "pubsub" {
      key     = "emits.ch"
      headers = { n = "payload.id" }
    }
    emit "list" {
      redis = "other"
      key   = "emits.elsewhere"
    }
    outcome = "ack"
  }
}
`, main.URL, other.URL))
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "in", Values: []string{"payload", `{"id":7}`, "h", "v"}}).Err(); err != nil {
		t.Fatal(err)
	}
	p := start(t, "run", cfg)
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"headers":{"n":"7"},"payload":{"id":7}}`; msg.Payload != want {
		t.Errorf("published %s, want %s", msg.Payload, want)
	}
	eventually(t, 10*time.Second, "the delivery acknowledged", func() bool {
		pend, err := rdb.XPending(ctx, "in", "emits").Result()
		return err == nil && pend.Count == 0 && rdb.XLen(ctx, "emits.stream").Val() == 1
	})
	p.signal(syscall.SIGTERM)
	if code := p.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}

	entries := rdb.XRange(ctx, "emits.stream", "-", "+").Val()
	if len(entries) != 1 || fmt.Sprint(entries[0].Values) != fmt.Sprint(map[string]any{"payload": `{"id":7}`, "via": "stream"}) {
		t.Errorf("emits.stream = %+v", entries)
	}
	// An emit with no headers writes the payload bare (SPEC §3: envelopes only with headers).
	if got := rdb.LRange(ctx, "emits.list", 0, -1).Val(); strings.Join(got, "|") != `{"id":7}` {
		t.Errorf("emits.list = %q", got)
	}
	if got := rdb2.LRange(ctx, "emits.elsewhere", 0, -1).Val(); strings.Join(got, "|") != `{"id":7}` {
		t.Errorf("emits.elsewhere on the second server = %q", got)
	}
	if n := rdb.Exists(ctx, "emits.elsewhere").Val(); n != 0 {
		t.Errorf("the named-block emit also landed on the source's server")
	}
}

// TestRunSelectsPipelines: --pipeline runs only the named pipelines; an unknown name is a config
// error and nothing starts.
func TestRunSelectsPipelines(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "in.jsonl", `{"key":"k","payload":1}`+"\n")
	cfg := writeFile(t, dir, "two.hcl", `pipeline "a" {
  source "file" {
    path = "in.jsonl"
  }
  rule "r" {
    emit "record" { key = "from-a" }
    outcome = "ack"
  }
}

pipeline "b" {
  source "file" {
    path = "in.jsonl"
  }
  rule "r" {
    emit "record" { key = "from-b" }
    outcome = "ack"
  }
}
`)
	r := flowrun(t, "", "run", cfg, "--pipeline", "b")
	if r.code != 0 || r.stdout != `{"key":"from-b","payload":1}`+"\n" {
		t.Fatalf("--pipeline b: exit %d stdout %q\n%s", r.code, r.stdout, r.stderr)
	}
	r = flowrun(t, "", "run", "--pipeline", "a", "--pipeline", "b", cfg)
	if r.code != 0 || strings.Count(r.stdout, "\n") != 2 {
		t.Fatalf("--pipeline a --pipeline b: exit %d stdout %q", r.code, r.stdout)
	}
	r = flowrun(t, "", "run", "--pipeline", "c", cfg)
	if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, `"c"`) {
		t.Fatalf("--pipeline c: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestLogFlags: console and json formats, the level filter, and bad values refused with exit 1.
func TestLogFlags(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "in.jsonl", "not a record\n")
	cfg := writeFile(t, dir, "l.hcl", `pipeline "l" {
  source "file" {
    path = "in.jsonl"
  }
  rule "r" { outcome = "ack" }
}
`)
	r := flowrun(t, "", "run", "--log-format", "console", cfg)
	if r.code != 0 || strings.Contains(r.stderr, `{"level"`) || !strings.Contains(r.stderr, "WRN") {
		t.Errorf("console: exit %d stderr:\n%s", r.code, r.stderr)
	}
	r = flowrun(t, "", "run", "--log-format", "json", "--log-level", "error", cfg)
	if r.code != 0 || r.stderr != "" {
		t.Errorf("json at error level: exit %d stderr:\n%s", r.code, r.stderr)
	}
	for _, bad := range [][]string{{"--log-format", "xml"}, {"--log-level", "trace"}} {
		r = flowrun(t, "", append(append([]string{"run"}, bad...), cfg)...)
		if r.code != 1 || !strings.Contains(r.stderr, bad[0]) {
			t.Errorf("%v: exit %d stderr %q, want 1 naming the flag", bad, r.code, r.stderr)
		}
	}
}

// TestOnePipeReadsStdin: two selected pipe pipelines would race for one stdin; run refuses,
// pointing at the second, and --pipeline picks one.
func TestOnePipeReadsStdin(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "pipes.hcl", `pipeline "p1" {
  source "pipe" {}
  out_retry = "r"
  rule "r" { outcome = "ack" }
}

pipeline "p2" {
  source "pipe" {}
  out_retry = "r"
  rule "r" { outcome = "ack" }
}
`)
	r := flowrun(t, "", "run", cfg)
	if r.code != 1 || !strings.Contains(r.stderr, cfg+":8:3: error: Two pipelines read standard input") {
		t.Fatalf("exit %d stderr:\n%s", r.code, r.stderr)
	}
	if r = flowrun(t, "", "run", "--pipeline", "p2", cfg); r.code != 0 {
		t.Fatalf("--pipeline p2: exit %d\n%s", r.code, r.stderr)
	}
}

// TestEmitForwardHeaders: an emit with forward_headers carries the entry's own headers (tenant,
// trace) but not flowrun's x- headers, and a header whose expression gives nil is not written:
// XRANGE shows no such field (SPEC §7).
func TestEmitForwardHeaders(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	dir := t.TempDir()
	cfg := writeFile(t, dir, "fwd.hcl", fmt.Sprintf(`redis "main" {
  url = %q
}

pipeline "fwd" {
  source "stream" {
    stream = "in"
    block  = "100ms"
  }
  rule "forward" {
    emit "stream" {
      key             = "fwd.out"
      forward_headers = true
      headers = {
        stage   = "'billed'"
        missing = "headers['missing'] ?? nil"
        never   = "nil"
      }
    }
    emit "stream" {
      key     = "fwd.plain"
      headers = { trace = "headers['trace'] ?? nil", missing = "headers['missing'] ?? nil" }
    }
    outcome = "ack"
  }
}
`, srv.URL))
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "in", Values: []string{
		"payload", `{"id":1}`, "tenant", "acme", "trace", "t-1", "x-retry-count", "1",
	}}).Err(); err != nil {
		t.Fatal(err)
	}
	p := start(t, "run", cfg)
	eventually(t, 10*time.Second, "both emits written and the entry acknowledged", func() bool {
		pend, err := rdb.XPending(ctx, "in", "fwd").Result()
		return err == nil && pend.Count == 0 && rdb.XLen(ctx, "fwd.out").Val() == 1 && rdb.XLen(ctx, "fwd.plain").Val() == 1
	})
	p.signal(syscall.SIGTERM)
	if code := p.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	want := map[string]any{"payload": `{"id":1}`, "tenant": "acme", "trace": "t-1", "stage": "billed"}
	if got := rdb.XRange(ctx, "fwd.out", "-", "+").Val(); len(got) != 1 || fmt.Sprint(got[0].Values) != fmt.Sprint(want) {
		t.Errorf("fwd.out = %+v, want the fields %v and no others (no missing, never, x-retry-count)", got, want)
	}
	want = map[string]any{"payload": `{"id":1}`, "trace": "t-1"}
	if got := rdb.XRange(ctx, "fwd.plain", "-", "+").Val(); len(got) != 1 || fmt.Sprint(got[0].Values) != fmt.Sprint(want) {
		t.Errorf("fwd.plain = %+v, want the fields %v (no empty missing field)", got, want)
	}
}
