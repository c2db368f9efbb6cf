package e2e

import (
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A followed file source with no key never reads its own dead letters (SPEC §2): one record that
// always fails gives one retry copy and one dead letter, and the file stops growing. (Before, it
// read each dead letter back and grew to 41 lines in 4 s.)
func TestFileSourceNeverReadsItsDeadLetters(t *testing.T) {
	dir := t.TempDir()
	data := writeFile(t, dir, "in.jsonl", `{"key":"jobs","payload":{"n":1}}`+"\n")
	cfg := writeFile(t, dir, "follow.hcl", `pipeline "jobs" {
  source "file" {
    path   = "in.jsonl"
    follow = true
  }
  max_attempts = 2
  dead_letter  = "jobs.dlq"
  rule "always-fails" {
    outcome = "retry"
  }
}
`)
	p := start(t, "run", "--log-level", "debug", cfg)
	eventually(t, 10*time.Second, "the dead letter", func() bool {
		return strings.Contains(readFile(t, data), `"key":"jobs.dlq"`)
	})
	time.Sleep(1500 * time.Millisecond) // 15 polls of a followed file: a loop would show by now
	p.signal(syscall.SIGTERM)
	if code := p.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, p.err.String())
	}
	got := readFile(t, data)
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want the record, one retry copy and one dead letter:\n%s", len(lines), got)
	}
	if !strings.Contains(lines[1], `"x-retry-count":"1"`) || !strings.HasPrefix(lines[2], `{"key":"jobs.dlq"`) {
		t.Errorf("file:\n%s", got)
	}
	if n := strings.Count(p.err.String(), `"outcome":"dead_letter"`); n != 1 {
		t.Errorf("%d dead-letter outcomes logged, want 1:\n%s", n, p.err.String())
	}
}

// validate reports keys that must share a Redis Cluster slot and do not, from the files alone,
// at the attribute to change, with a name that works; the cluster is never contacted.
func TestValidateClusterSlots(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "cluster.hcl", `redis "c" {
  cluster = ["192.0.2.1:7000", "192.0.2.2:7000"]
}

pipeline "delayed" {
  source "stream" {
    stream = "{a}jobs"
  }
  delayed_retry = "durable_zset"
  delay_key     = "jobs:delayed"
  rule "r" {
    outcome = "retry_after('1m')"
  }
}

pipeline "untagged" {
  source "stream" {
    stream = "orders"
  }
  delayed_retry = "durable_zset"
  rule "r" {
    outcome = "retry_after('1m')"
  }
}

pipeline "queue" {
  source "list" {
    key = "queue"
  }
  max_held = 100
  rule "r" {
    outcome = "ack"
  }
}
`)
	start := time.Now()
	r := flowrun(t, "", "validate", cfg)
	if r.code != 1 || r.stdout != "" {
		t.Fatalf("exit %d stdout %q, want 1 and nothing", r.code, r.stdout)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("validate took %v: did it try to connect?", el)
	}
	for _, want := range []string{
		`cluster.hcl:10:19: error: Keys in different cluster slots: .*Use delay_key = "\{a\}jobs:delayed"`,
		`cluster.hcl:18:14: error: Keys in different cluster slots: .*stream = "\{orders\}", and the default delay_key becomes "\{orders\}:delayed"`,
		`cluster.hcl:28:11: error: Keys in different cluster slots: .*key = "\{queue\}"`,
	} {
		if !regexp.MustCompile(want).MatchString(r.stderr) {
			t.Errorf("stderr lacks %s:\n%s", want, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "{{") {
		t.Errorf("a suggestion nests braces:\n%s", r.stderr)
	}
	if n := len(errorLines(r.stderr)); n != 3 {
		t.Errorf("%d errors, want 3:\n%s", n, r.stderr)
	}
}
