package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// A file replay ends with a summary line (SPEC §10 "Progress"): records read, handled per
// outcome, malformed lines skipped, copies and dead letters written, elapsed time (elapsed_ms); progress
// lines come at --progress-interval while it works.
func TestReplaySummaryAndProgress(t *testing.T) {
	dir := t.TempDir()
	var in strings.Builder
	for i := 1; i <= 2000; i++ {
		fmt.Fprintf(&in, `{"key":"orders","payload":{"n":%d}}`+"\n", i)
	}
	in.WriteString("not a record\n")
	writeFile(t, dir, "orders.jsonl", in.String())
	cfg := writeFile(t, dir, "flow.hcl", `
pipeline "replay" {
  source "file" {
    path = "orders.jsonl"
  }
  max_attempts = 1
  dead_letter  = "orders.dlq"
  rule "odd" {
    when    = "int(payload.n) % 100 == 0"
    outcome = "retry"
  }
  rule "even" {
    when    = "int(payload.n) % 2 == 0"
    outcome = "drop"
  }
}
`)
	r := flowrun(t, "", "run", "--progress-interval", "1ms", cfg)
	if r.code != 0 {
		t.Fatalf("exit %d:\n%s", r.code, r.stderr)
	}
	var summary map[string]any
	progress := 0
	for _, l := range strings.Split(r.stderr, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil {
			continue
		}
		switch m["message"] {
		case "input done":
			summary = m
		case "progress":
			progress++
		}
	}
	if summary == nil {
		t.Fatalf("no summary line:\n%s", r.stderr)
	}
	want := map[string]any{"pipeline": "replay", "read": 2000.0, "handled": 2000.0, "malformed": 1.0, "copies": 0.0, "dead_letters": 20.0}
	for k, v := range want {
		if summary[k] != v {
			t.Errorf("summary %s = %v, want %v (%v)", k, summary[k], v, summary)
		}
	}
	outcomes, _ := summary["outcomes"].(map[string]any)
	if outcomes["ack"] != 1000.0 || outcomes["drop"] != 980.0 || outcomes["dead_letter"] != 20.0 {
		t.Errorf("summary outcomes = %v", outcomes)
	}
	// Durations in logs are milliseconds in a field named *_ms (docs/logging.md).
	if ms, ok := summary["elapsed_ms"].(float64); !ok || ms <= 0 {
		t.Errorf("summary without a positive elapsed_ms: %v", summary)
	}
	if _, ok := summary["elapsed"]; ok {
		t.Errorf("summary has elapsed without its unit: %v", summary)
	}
	t.Logf("%d progress lines", progress)
}
