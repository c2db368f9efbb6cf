package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// records parses stdout's JSON-lines records, sorted by key then payload, for outputs whose
// order depends on concurrency.
type record struct {
	Key     string            `json:"key"`
	Headers map[string]string `json:"headers"`
	Payload json.RawMessage   `json:"payload"`
}

func parseRecords(t *testing.T, out string) []record {
	t.Helper()
	var rs []record
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var r record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("stdout line %q is not a record: %v", line, err)
		}
		rs = append(rs, r)
	}
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].Key != rs[j].Key {
			return rs[i].Key < rs[j].Key
		}
		return string(rs[i].Payload) < string(rs[j].Payload)
	})
	return rs
}

func TestCustomBinary(t *testing.T) {
	custom := filepath.Join(t.TempDir(), "payouts")
	build := exec.Command("go", "build", "-o", custom, "../examples/custom")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build examples/custom: %v\n%s", err, out)
	}
	out, err := exec.Command(custom, "plugins").Output()
	if err != nil || !regexp.MustCompile(`(?m)^payout\s`).Match(out) || !regexp.MustCompile(`(?m)^http\s`).Match(out) {
		t.Fatalf("custom plugins: %v %s", err, out)
	}

	cmd := exec.Command(custom, "run", "../examples/custom/payouts.hcl")
	cmd.Stdin = strings.NewReader(`{"key":"payouts","payload":{"id":1,"amount":12}}
{"key":"payouts","payload":{"id":2,"amount":-5}}
{"key":"payouts","headers":{"gateway":"down"},"payload":{"id":3,"amount":7}}
{"key":"payouts","headers":{"gateway":"down","x-retry-count":"2"},"payload":{"id":4,"amount":7}}
`)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("custom run: %v\n%s", err, stderr.String())
	}
	rs := parseRecords(t, string(stdout))
	if len(rs) != 4 {
		t.Fatalf("%d records, want 4:\n%s", len(rs), stdout)
	}
	if rs[0].Key != "payouts.dlq" || rs[0].Headers["x-dead-letter-reason"] != "payout 2: amount must be positive, got -5" || rs[0].Headers["x-attempts"] != "1" {
		t.Errorf("invalid payout: %+v", rs[0])
	}
	if rs[1].Key != "payouts.dlq" || !strings.HasPrefix(rs[1].Headers["x-dead-letter-reason"], "max_attempts 3 reached") || rs[1].Headers["x-attempts"] != "3" || rs[1].Headers["x-original-key"] != "payouts" {
		t.Errorf("third failed attempt: %+v", rs[1])
	}
	if _, err := time.Parse(time.RFC3339, rs[1].Headers["x-failed-at"]); err != nil {
		t.Errorf("x-failed-at %q: %v", rs[1].Headers["x-failed-at"], err)
	}
	if rs[2].Key != "payouts.done" {
		t.Errorf("paid payout: %+v", rs[2])
	}
	if rs[3].Key != "payouts.retry" || rs[3].Headers["x-retry-count"] != "1" || string(rs[3].Payload) != `{"id":3,"amount":7}` {
		t.Errorf("retry copy: %+v", rs[3])
	}
}

func TestHTTPHandlerThroughTheBinary(t *testing.T) {
	var got struct {
		body, retry, ctype string
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.body, got.retry, got.ctype = string(b), r.Header.Get("X-Flowrun-Trace"), r.Header.Get("Content-Type")
		http.Error(w, "no such account", http.StatusBadRequest)
	}))
	defer srv.Close()
	dir := t.TempDir()
	cfg := writeFile(t, dir, "hook.hcl", `pipeline "hook" {
  source "pipe" {}
  out_retry   = "hook.retry"
  dead_letter = "hook.dlq"
  handler "http" {
    url     = "`+srv.URL+`"
    timeout = "5s"
  }
}
`)
	r := flowrun(t, `{"key":"in","headers":{"trace":"t-1"},"payload":{"account":9}}`+"\n", "run", cfg)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if got.body != `{"account":9}` || got.retry != "t-1" || got.ctype != "application/json" {
		t.Errorf("request: %+v", got)
	}
	rs := parseRecords(t, r.stdout)
	if len(rs) != 1 || rs[0].Key != "hook.dlq" || !strings.HasPrefix(rs[0].Headers["x-dead-letter-reason"], "http 400 Bad Request") {
		t.Fatalf("stdout: %s", r.stdout)
	}
}

func TestExecHandlerThroughTheBinary(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "exec.hcl", `pipeline "exec" {
  source "pipe" {}
  out_retry    = "exec.retry"
  max_attempts = 2
  handler "exec" {
    command = ["/bin/sh", "-c", "test \"$FLOWRUN_HEADER_MODE\" = ok || exit 75"]
  }
}
`)
	in := `{"key":"in","headers":{"mode":"ok"},"payload":"a"}
{"key":"in","headers":{"mode":"flaky"},"payload":"b"}
{"key":"in","headers":{"mode":"flaky","x-retry-count":"1"},"payload":"c"}
`
	r := flowrun(t, in, "run", cfg)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	// a: acked; b: exit 75 → a retry copy; c: its last attempt → rejected (no dead_letter).
	want := `{"key":"exec.retry","headers":{"mode":"flaky","x-retry-count":"1"},"payload":"b"}` + "\n"
	if r.stdout != want {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
	if !strings.Contains(r.stderr, `"outcome":"rejected"`) {
		t.Errorf("the capped delivery is not logged as rejected:\n%s", r.stderr)
	}
}

func TestFlowrunTestReportsFailures(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "t.hcl", `pipeline "p" {
  source "pipe" {}
  out_retry = "r"
  rule "big" {
    when    = "payload.amount > 100"
    outcome = "drop"
  }
}

test "small ones pass" {
  pipeline = "p"
  message { payload = jsonencode({ amount = 1 }) }
  expect { outcome = "ack" }
}

test "wrong expectation" {
  pipeline = "p"
  message { payload = jsonencode({ amount = 1000 }) }
  expect { outcome = "retry_after('5s')" }
}
`)
	r := flowrun(t, "", "test", cfg)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1:\n%s%s", r.code, r.stdout, r.stderr)
	}
	want := "PASS small ones pass\nFAIL wrong expectation\n  " + cfg + `:19:3: outcome: got drop (rule "big"), want retry_after('5s')` + "\n1 passed, 1 failed\n"
	if r.stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", r.stdout, want)
	}
}
