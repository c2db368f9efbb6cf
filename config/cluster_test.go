package config

import (
	"fmt"
	"strings"
	"testing"
)

// The checks follow the redis block: only a cluster block's pipelines are checked.
func TestClusterSlotsOnlyOnCluster(t *testing.T) {
	for _, tc := range []struct {
		redis, source, extra string
		bad                  bool
	}{
		{`cluster = ["127.0.0.1:7000"]`, `source "stream" { stream = "jobs" }`, `delayed_retry = "durable_zset"`, true},
		{`url = "redis://127.0.0.1:6379"`, `source "stream" { stream = "jobs" }`, `delayed_retry = "durable_zset"`, false},
		{`cluster = ["127.0.0.1:7000"]`, `source "stream" { stream = "{jobs}" }`, `delayed_retry = "durable_zset"`, false},
		{`cluster = ["127.0.0.1:7000"]`, `source "stream" { stream = "jobs" }`, ``, false},
		{`cluster = ["127.0.0.1:7000"]`, `source "list" { key = "jobs" }`, ``, true},
		{`cluster = ["127.0.0.1:7000"]`, "source \"list\" {\n key = \"jobs\"\n reliable = false\n}", ``, false},
		{`cluster = ["127.0.0.1:7000"]`, "source \"list\" {\n key = \"{q}jobs\"\n}", ``, false},
		{`cluster = ["127.0.0.1:7000"]`, "source \"list\" {\n key = \"{q}jobs\"\n processing = \"{q}p\"\n}", ``, false},
		{`cluster = ["127.0.0.1:7000"]`, "source \"list\" {\n key = \"{q}jobs\"\n processing = \"q:p\"\n}", ``, true},
		// A durable_zset list: its delay queue shares the list's slot.
		{`cluster = ["127.0.0.1:7000"]`, "source \"list\" {\n key = \"{q}jobs\"\n}", `delayed_retry = "durable_zset"`, false},
		{`cluster = ["127.0.0.1:7000"]`, "source \"list\" {\n key = \"{q}jobs\"\n}", "delayed_retry = \"durable_zset\"\n delay_key = \"{q}d\"", false},
		{`cluster = ["127.0.0.1:7000"]`, "source \"list\" {\n key = \"{q}jobs\"\n}", "delayed_retry = \"durable_zset\"\n delay_key = \"q:d\"", true},
		{`url = "redis://127.0.0.1:6379"`, "source \"list\" {\n key = \"jobs\"\n}", "delayed_retry = \"durable_zset\"\n delay_key = \"q:d\"", false},
		{`url = "redis://127.0.0.1:6379"`, "source \"list\" {\n key = \"jobs\"\n reliable = false\n}", `delayed_retry = "durable_zset"`, true},
	} {
		src := fmt.Sprintf("redis \"r\" {\n  %s\n}\npipeline \"p\" {\n  %s\n  %s\n  rule \"r\" {\n    outcome = \"ack\"\n  }\n}\n", tc.redis, tc.source, tc.extra)
		path := writeTemp(t, src)
		_, diags := Load([]string{path}, Options{Hostname: "host1"})
		if diags.HasErrors() != tc.bad {
			t.Errorf("%s / %s / %s: errors %v, want %v: %v", tc.redis, tc.source, tc.extra, diags.HasErrors(), tc.bad, diags)
		}
	}
}

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	path := t.TempDir() + "/c.hcl"
	write(t, path, content)
	return path
}

// TestListDelayKeyDiagnostic: a durable_zset list's delay_key in another slot is reported at
// the delay_key attribute, naming both keys and their slots.
func TestListDelayKeyDiagnostic(t *testing.T) {
	src := "redis \"r\" {\n  cluster = [\"127.0.0.1:7000\"]\n}\npipeline \"p\" {\n  source \"list\" {\n    key = \"{q}jobs\"\n  }\n  delayed_retry = \"durable_zset\"\n  delay_key     = \"q:d\"\n  rule \"r\" {\n    outcome = \"ack\"\n  }\n}\n"
	_, diags := Load([]string{writeTemp(t, src)}, Options{Hostname: "host1"})
	if len(diags) != 1 || diags[0].Subject == nil {
		t.Fatalf("diagnostics %v, want one with a position", diags)
	}
	d := diags[0]
	if d.Subject.Start.Line != 9 || d.Subject.Start.Column != 19 {
		t.Errorf("at %d:%d, want 9:19 (delay_key's value)", d.Subject.Start.Line, d.Subject.Start.Column)
	}
	for _, want := range []string{`"{q}jobs"`, `"q:d"`, "durable_zset", "slot"} {
		if !strings.Contains(d.Detail, want) {
			t.Errorf("detail %q lacks %q", d.Detail, want)
		}
	}
}
